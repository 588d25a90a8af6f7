#include "molt/transfer/ridge.h"

#include <cblas.h>
#include <lapack.h>

#include <cmath>
#include <numeric>

#include "molt/common/error.h"

namespace molt {

std::vector<int64_t> channel_range(int64_t begin, int64_t n) {
  std::vector<int64_t> r(static_cast<size_t>(n));
  std::iota(r.begin(), r.end(), begin);
  return r;
}

RidgeFit fit_ridge(const Moments& m, std::span<const int64_t> xi, std::span<const int64_t> yi,
                   double lambda, const std::string& what) {
  if (m.diagonal) fail("{}: ridge needs full moments, these are diagonal", what);
  if (m.n < 1) fail("{}: no calibration rows", what);
  if (!(lambda >= 0)) fail("{}: λ = {} must be ≥ 0", what, lambda);
  const int64_t D = static_cast<int64_t>(xi.size()), M = static_cast<int64_t>(yi.size());
  const double N = m.n;
  std::vector<double> mx(D), my(M);
  for (int64_t a = 0; a < D; ++a) mx[a] = m.sx[xi[a]] / N;
  for (int64_t c = 0; c < M; ++c) my[c] = m.sy[yi[c]] / N;

  // A = Cxx + λI (symmetric, both triangles filled).
  std::vector<double> A(static_cast<size_t>(D * D));
#pragma omp parallel for schedule(static) if (D > 256)
  for (int64_t a = 0; a < D; ++a) {
    for (int64_t b = a; b < D; ++b) {
      double c = m.gram(xi[a], xi[b]) / N - mx[a] * mx[b];
      if (a == b) c += lambda;
      A[a * D + b] = c;
      A[b * D + a] = c;
    }
  }
  // B holds Cxy column-major (one column of D per output), i.e. [M × D] row-major: the solve
  // leaves W in the nn.Linear layout [out × in].
  RidgeFit fit;
  fit.in = D;
  fit.out = M;
  fit.w.resize(static_cast<size_t>(M * D));
#pragma omp parallel for schedule(static) if (D * M > 65536)
  for (int64_t c = 0; c < M; ++c) {
    for (int64_t a = 0; a < D; ++a) {
      fit.w[c * D + a] = m.xy[xi[a] * m.dim_y + yi[c]] / N - mx[a] * my[c];
    }
  }
  const lapack_int n = static_cast<lapack_int>(D), nrhs = static_cast<lapack_int>(M);
  lapack_int info = 0;
  const char uplo = 'U';
  LAPACK_dpotrf(&uplo, &n, A.data(), &n, &info);
  if (info > 0) {
    fail(
        "{}: the centred covariance + λI ({} inputs, {} rows, λ = {}) is not positive definite "
        "(leading minor {}); use a larger --lambda or more calibration rows",
        what, D, N, lambda, info);
  }
  if (info < 0) fail("{}: dpotrf argument {} invalid", what, -info);
  LAPACK_dpotrs(&uplo, &n, &nrhs, A.data(), &n, fit.w.data(), &n, &info);
  if (info != 0) fail("{}: dpotrs failed ({})", what, info);

  fit.b.resize(static_cast<size_t>(M));
  for (int64_t c = 0; c < M; ++c) {
    double s = my[c];
    for (int64_t a = 0; a < D; ++a) s -= fit.w[c * D + a] * mx[a];
    fit.b[c] = s;
  }
  return fit;
}

DiagonalFit fit_diagonal(const Moments& m, int64_t c0, int64_t n) {
  if (!m.diagonal) fail("diagonal fit needs diagonal moments");
  if (m.n < 1) fail("diagonal fit: no calibration rows");
  DiagonalFit f;
  f.scale.resize(static_cast<size_t>(n));
  f.offset.resize(static_cast<size_t>(n));
  const double N = m.n;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t c = c0 + i;
    const double mx = m.sx[c] / N, my = m.sy[c] / N;
    const double var = m.xx[c] / N - mx * mx, cov = m.xy[c] / N - mx * my;
    const double a = var > 1e-20 * std::max(1.0, mx * mx) ? cov / var : 1.0;
    f.scale[i] = a;
    f.offset[i] = my - a * mx;
  }
  return f;
}

double Residual::rel_rms() const {
  return sum_sq > 0 ? std::sqrt(std::max(rss, 0.0) / sum_sq) : 0;
}
double Residual::centred() const {
  return tss > 0 ? std::sqrt(std::max(rss, 0.0) / tss) : 0;
}

Residual output_spread(const Moments& h, std::span<const int64_t> yi) {
  Residual r;
  r.n = h.n;
  if (h.n < 1) return r;
  for (int64_t c : yi) {
    r.sum_sq += h.syy[c];
    r.tss += h.syy[c] - h.sy[c] * h.sy[c] / h.n;
  }
  return r;
}

Residual ridge_residual(const Moments& h, std::span<const int64_t> xi, std::span<const int64_t> yi,
                        const RidgeFit& fit) {
  Residual r = output_spread(h, yi);
  if (h.n < 1) return r;
  const int64_t D = fit.in, M = fit.out;
  // G = Σxxᵀ restricted to xi; GW = G · Wᵀ gives the quadratic term w_cᵀ G w_c.
  std::vector<double> G(static_cast<size_t>(D * D));
  for (int64_t a = 0; a < D; ++a) {
    for (int64_t b = 0; b < D; ++b) G[a * D + b] = h.gram(xi[a], xi[b]);
  }
  std::vector<double> WG(static_cast<size_t>(M * D));
  cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(M), static_cast<int>(D),
              static_cast<int>(D), 1.0, fit.w.data(), static_cast<int>(D), G.data(),
              static_cast<int>(D), 0.0, WG.data(), static_cast<int>(D));
  double rss = 0;
  for (int64_t c = 0; c < M; ++c) {
    const double* w = &fit.w[c * D];
    const double b = fit.b[c];
    double quad = 0, cross = 0, wsx = 0;
    for (int64_t a = 0; a < D; ++a) {
      quad += WG[c * D + a] * w[a];
      cross += w[a] * h.xy[xi[a] * h.dim_y + yi[c]];
      wsx += w[a] * h.sx[xi[a]];
    }
    // Σ(y − wᵀx − b)² expanded into the moments.
    rss += h.syy[yi[c]] - 2 * cross - 2 * b * h.sy[yi[c]] + quad + 2 * b * wsx + h.n * b * b;
  }
  r.rss = rss;
  return r;
}

Residual diagonal_residual(const Moments& h, int64_t c0, int64_t n, const DiagonalFit& fit) {
  Residual r = output_spread(h, channel_range(c0, n));
  if (h.n < 1) return r;
  double rss = 0;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t c = c0 + i;
    const double a = fit.scale[i], b = fit.offset[i];
    rss += h.syy[c] - 2 * a * h.xy[c] - 2 * b * h.sy[c] + a * a * h.xx[c] + 2 * a * b * h.sx[c] +
           h.n * b * b;
  }
  r.rss = rss;
  return r;
}

}  // namespace molt
