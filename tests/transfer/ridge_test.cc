// Closed-form solves on moments: recovery of a known map, λ on the centred covariance,
// held-out residuals from moments equal residuals computed row by row, clear errors.
#include "molt/transfer/ridge.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "molt/common/error.h"

namespace molt {
namespace {

struct Data {
  int64_t n, dx, dy;
  std::vector<double> x, y;
};

// y = A x + c + noise, x with non-zero means (so centring matters).
Data make_data(int64_t n, int64_t dx, int64_t dy, double noise, uint32_t seed,
               std::vector<double>* A_out = nullptr, std::vector<double>* c_out = nullptr) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> g(0.0, 1.0);
  std::vector<double> A(dy * dx), c(dy), mu(dx);
  for (auto& v : A) v = g(rng);
  for (auto& v : c) v = 5 * g(rng);
  for (auto& v : mu) v = 10 * g(rng);
  Data d{n, dx, dy, std::vector<double>(n * dx), std::vector<double>(n * dy)};
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t i = 0; i < dx; ++i) d.x[r * dx + i] = mu[i] + g(rng) * (1 + i);
    for (int64_t o = 0; o < dy; ++o) {
      double s = c[o] + noise * g(rng);
      for (int64_t i = 0; i < dx; ++i) s += A[o * dx + i] * d.x[r * dx + i];
      d.y[r * dy + o] = s;
    }
  }
  if (A_out) *A_out = A;
  if (c_out) *c_out = c;
  return d;
}

Moments moments_of(const Data& d, bool diagonal = false) {
  Moments m;
  m.reset(d.dx, d.dy, diagonal);
  m.add(d.x.data(), d.y.data(), d.n);
  return m;
}

TEST(Ridge, RecoversAKnownAffineMap) {
  std::vector<double> A, c;
  const Data d = make_data(400, 6, 3, 0.0, 1, &A, &c);
  const Moments m = moments_of(d);
  const auto xi = channel_range(0, 6), yi = channel_range(0, 3);
  const RidgeFit f = fit_ridge(m, xi, yi, 1e-10, "test");
  ASSERT_EQ(f.in, 6);
  ASSERT_EQ(f.out, 3);
  for (int64_t o = 0; o < 3; ++o) {
    for (int64_t i = 0; i < 6; ++i) EXPECT_NEAR(f.w[o * 6 + i], A[o * 6 + i], 1e-6);
    EXPECT_NEAR(f.b[o], c[o], 1e-5);
  }
  // Residual on other rows of the same map ≈ 0.
  const Data h = make_data(100, 6, 3, 0.0, 1);
  EXPECT_LT(ridge_residual(moments_of(h), xi, yi, f).rel_rms(), 1e-6);
}

// Solves (C + λI) W = Cxy with plain Gaussian elimination on explicitly centred rows.
TEST(Ridge, LambdaIsAddedToTheCentredCovariance) {
  const Data d = make_data(50, 4, 2, 0.5, 2);
  const double lambda = 0.7;
  const RidgeFit f =
      fit_ridge(moments_of(d), channel_range(0, 4), channel_range(0, 2), lambda, "t");
  std::vector<double> mx(4, 0), my(2, 0);
  for (int64_t r = 0; r < d.n; ++r) {
    for (int i = 0; i < 4; ++i) mx[i] += d.x[r * 4 + i] / d.n;
    for (int o = 0; o < 2; ++o) my[o] += d.y[r * 2 + o] / d.n;
  }
  for (int o = 0; o < 2; ++o) {
    double M[4][5] = {};
    for (int64_t r = 0; r < d.n; ++r) {
      for (int i = 0; i < 4; ++i) {
        for (int j = 0; j < 4; ++j)
          M[i][j] += (d.x[r * 4 + i] - mx[i]) * (d.x[r * 4 + j] - mx[j]) / d.n;
        M[i][4] += (d.x[r * 4 + i] - mx[i]) * (d.y[r * 2 + o] - my[o]) / d.n;
      }
    }
    for (int i = 0; i < 4; ++i) M[i][i] += lambda;
    for (int p = 0; p < 4; ++p) {
      for (int i = p + 1; i < 4; ++i) {
        const double q = M[i][p] / M[p][p];
        for (int j = p; j < 5; ++j) M[i][j] -= q * M[p][j];
      }
    }
    double w[4];
    for (int i = 3; i >= 0; --i) {
      double s = M[i][4];
      for (int j = i + 1; j < 4; ++j) s -= M[i][j] * w[j];
      w[i] = s / M[i][i];
    }
    double b = my[o];
    for (int i = 0; i < 4; ++i) {
      EXPECT_NEAR(f.w[o * 4 + i], w[i], 1e-9);
      b -= w[i] * mx[i];
    }
    EXPECT_NEAR(f.b[o], b, 1e-8);
  }
}

TEST(Ridge, HeldOutResidualFromMomentsEqualsRowByRow) {
  const Data train = make_data(200, 5, 3, 1.0, 3), held = make_data(80, 5, 3, 1.0, 3);
  const std::vector<int64_t> xi = {4, 1, 2}, yi = {2, 0};  // subsets in any order
  const RidgeFit f = fit_ridge(moments_of(train), xi, yi, 0.01, "t");
  const Residual r = ridge_residual(moments_of(held), xi, yi, f);
  double rss = 0, ss = 0, tss = 0;
  std::vector<double> mean(2, 0);
  for (int64_t row = 0; row < held.n; ++row) {
    for (int o = 0; o < 2; ++o) mean[o] += held.y[row * 3 + yi[o]] / held.n;
  }
  for (int64_t row = 0; row < held.n; ++row) {
    for (int o = 0; o < 2; ++o) {
      double yhat = f.b[o];
      for (int a = 0; a < 3; ++a) yhat += f.w[o * 3 + a] * held.x[row * 5 + xi[a]];
      const double y = held.y[row * 3 + yi[o]];
      rss += (y - yhat) * (y - yhat);
      ss += y * y;
      tss += (y - mean[o]) * (y - mean[o]);
    }
  }
  EXPECT_NEAR(r.rss, rss, 1e-8 * ss);
  EXPECT_NEAR(r.sum_sq, ss, 1e-9 * ss);
  EXPECT_NEAR(r.tss, tss, 1e-8 * ss);
  EXPECT_NEAR(r.rel_rms(), std::sqrt(rss / ss), 1e-7);
}

TEST(Ridge, SingularCovarianceWithoutLambdaNamesTheRegression) {
  Data d = make_data(30, 3, 1, 0.1, 4);
  for (int64_t r = 0; r < d.n; ++r) d.x[r * 3 + 2] = d.x[r * 3 + 1];  // a duplicated column
  try {
    fit_ridge(moments_of(d), channel_range(0, 3), channel_range(0, 1), 0.0,
              "keys of receiver layer 2");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("keys of receiver layer 2"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("not positive definite"), std::string::npos) << e.what();
  }
  // λ > 0 makes it solvable.
  EXPECT_NO_THROW(fit_ridge(moments_of(d), channel_range(0, 3), channel_range(0, 1), 0.01, "t"));
}

TEST(Ridge, DiagonalFitRecoversScaleAndOffset) {
  std::mt19937 rng(5);
  std::normal_distribution<double> g(0.0, 1.0);
  const int64_t n = 300, dim = 4;
  std::vector<double> x(n * dim), y(n * dim);
  const double scale[4] = {1.0, 0.5, -2.0, 1.01}, offset[4] = {0.0, 3.0, -1.0, 0.2};
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t c = 0; c < dim; ++c) {
      x[r * dim + c] = 4 + 2 * g(rng);
      y[r * dim + c] = scale[c] * x[r * dim + c] + offset[c];
    }
  }
  Moments m;
  m.reset(dim, dim, true);
  m.add(x.data(), y.data(), n);
  const DiagonalFit f = fit_diagonal(m, 0, dim);
  for (int c = 0; c < dim; ++c) {
    EXPECT_NEAR(f.scale[c], scale[c], 1e-9);
    EXPECT_NEAR(f.offset[c], offset[c], 1e-8);
  }
  EXPECT_LT(diagonal_residual(m, 0, dim, f).rel_rms(), 1e-7);
  // A diagonal layout refuses a ridge solve and the reverse.
  EXPECT_THROW(fit_ridge(m, channel_range(0, 2), channel_range(0, 2), 0.01, "t"), Error);
}

TEST(Moments, MergedHalvesEqualOnePass) {
  const Data d = make_data(120, 7, 3, 1.0, 6);
  Moments all, a, b;
  all.reset(7, 3, false);
  a.reset(7, 3, false);
  b.reset(7, 3, false);
  all.add(d.x.data(), d.y.data(), d.n);
  a.add(d.x.data(), d.y.data(), 50);
  b.add(d.x.data() + 50 * 7, d.y.data() + 50 * 3, 70);
  a.merge(b);
  EXPECT_EQ(a.n, all.n);
  for (int64_t i = 0; i < 7; ++i) {
    for (int64_t j = i; j < 7; ++j)
      EXPECT_NEAR(a.gram(i, j), all.gram(i, j), 1e-9 * std::abs(all.gram(i, j)));
  }
  for (size_t i = 0; i < all.xy.size(); ++i)
    EXPECT_NEAR(a.xy[i], all.xy[i], 1e-9 * (1 + std::abs(all.xy[i])));
}

}  // namespace
}  // namespace molt
