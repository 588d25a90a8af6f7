#include "molt/kernels/ops.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels_test_util.h"

namespace molt {
namespace {

using test::random_floats;

class Ops : public test::PerSimdTarget {};
MOLT_INSTANTIATE_PER_SIMD_TARGET(Ops);

TEST_P(Ops, RmsnormMatchesDoubleReference) {
  for (int64_t n : {1, 20, 896, 897}) {
    const auto x = random_floats(static_cast<size_t>(n), 1, -3.0f, 3.0f);
    const auto w = random_floats(static_cast<size_t>(n), 2, 0.5f, 1.5f);
    std::vector<float> out(static_cast<size_t>(n));
    rmsnorm(x.data(), w.data(), n, 1e-6f, out.data());
    double ss = 0;
    for (float v : x) ss += static_cast<double>(v) * v;
    const double inv = 1.0 / std::sqrt(ss / n + 1e-6);
    for (int64_t i = 0; i < n; ++i) {
      const double ref = w[static_cast<size_t>(i)] * (x[static_cast<size_t>(i)] * inv);
      ASSERT_NEAR(out[static_cast<size_t>(i)], ref, 1e-6 * std::fabs(ref) + 1e-7) << n << " " << i;
    }
  }
}

TEST_P(Ops, RmsnormMayWorkInPlace) {
  auto x = random_floats(97, 3);
  const auto w = random_floats(97, 4);
  std::vector<float> out(97);
  rmsnorm(x.data(), w.data(), 97, 1e-6f, out.data());
  rmsnorm(x.data(), w.data(), 97, 1e-6f, x.data());
  EXPECT_EQ(x, out);
}

TEST_P(Ops, SoftmaxMatchesDoubleReferenceAndIsStable) {
  for (float spread : {1.0f, 30.0f, 1000.0f}) {
    for (int64_t n : {1, 7, 897}) {
      auto x = random_floats(static_cast<size_t>(n), 5, -spread, spread);
      const auto orig = x;
      softmax(x.data(), n);
      double mx = -1e300, sum = 0;
      for (float v : orig) mx = std::max(mx, static_cast<double>(v));
      for (float v : orig) sum += std::exp(v - mx);
      double total = 0;
      for (int64_t i = 0; i < n; ++i) {
        const double ref = std::exp(orig[static_cast<size_t>(i)] - mx) / sum;
        ASSERT_NEAR(x[static_cast<size_t>(i)], ref, 1e-6 * ref + 1e-9);
        total += x[static_cast<size_t>(i)];
      }
      EXPECT_NEAR(total, 1.0, 1e-5);
    }
  }
}

TEST_P(Ops, SiluMulMatchesDoubleReference) {
  auto gate = random_floats(897, 6, -8.0f, 8.0f);
  const auto up = random_floats(897, 7, -2.0f, 2.0f);
  const auto g0 = gate;
  silu_mul(gate.data(), up.data(), 897);
  for (size_t i = 0; i < 897; ++i) {
    const double g = g0[i];
    const double ref = g / (1.0 + std::exp(-g)) * up[i];
    ASSERT_NEAR(gate[i], ref, 1e-6 * std::fabs(ref) + 1e-7) << i;
  }
}

TEST_P(Ops, SiluMulSaturatesWithoutNan) {
  float gate[3] = {-200.0f, 200.0f, 0.0f};
  const float up[3] = {1.0f, 1.0f, 5.0f};
  silu_mul(gate, up, 3);
  EXPECT_EQ(gate[0], -0.0f);
  EXPECT_EQ(gate[1], 200.0f);
  EXPECT_EQ(gate[2], 0.0f);
}

TEST_P(Ops, AddInplaceAndDot) {
  for (int64_t n : {0, 1, 20, 897}) {
    auto y = random_floats(static_cast<size_t>(n), 8);
    const auto x = random_floats(static_cast<size_t>(n), 9);
    const auto y0 = y;
    add_inplace(y.data(), x.data(), n);
    double ref = 0, mag = 0;
    for (size_t i = 0; i < static_cast<size_t>(n); ++i) {
      ASSERT_EQ(y[i], y0[i] + x[i]);
      ref += static_cast<double>(x[i]) * y0[i];
      mag += std::fabs(static_cast<double>(x[i]) * y0[i]);
    }
    EXPECT_NEAR(dot(x.data(), y0.data(), n), ref, 1e-6 * mag + 1e-7) << n;
  }
}

}  // namespace
}  // namespace molt
