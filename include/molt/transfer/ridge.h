// Closed-form solves on accumulated moments (stats.h).
//
// Centred ridge, as Heo et al. specify, from the moments of N rows restricted to input
// channels `xi` and output channels `yi`:
//   x̄ = Σx / N,  ȳ = Σy / N,
//   Cxx = Σxxᵀ / N − x̄x̄ᵀ   (the centred input covariance),
//   Cxy = Σxyᵀ / N − x̄ȳᵀ,
//   W   = (Cxx + λI)⁻¹ Cxy  — λ is added to the diagonal of the centred covariance, i.e. it is
//                             not scaled by N nor by the data's variance, and the intercept is
//                             not penalised;
//   b   = ȳ − Wᵀx̄           — the intercept restores the means.
// Cxx + λI is factored by Cholesky (LAPACK dpotrf) and solved for all outputs at once
// (dpotrs). The prediction for a row x is ŷ = Wᵀx + b.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "molt/transfer/stats.h"

namespace molt {

struct RidgeFit {
  int64_t in = 0, out = 0;
  std::vector<double> w;  // [out × in], row c = weights of output c (nn.Linear layout)
  std::vector<double> b;  // [out]
};

// `what` names the regression in errors ("receiver layer 3 keys").
RidgeFit fit_ridge(const Moments& m, std::span<const int64_t> xi, std::span<const int64_t> yi,
                   double lambda, const std::string& what);

// Per-channel affine fit y_c ≈ scale_c · x_c + offset_c by least squares (no penalty): the
// diagonal re-alignment of same-weights routes. A channel without variance gets scale 1.
struct DiagonalFit {
  std::vector<double> scale, offset;
};
DiagonalFit fit_diagonal(const Moments& m, int64_t c0, int64_t n);

// Residual of a fit evaluated on other rows (held-out moments h), summed over outputs.
//   rss = Σ‖y − ŷ‖², sum_sq = Σ‖y‖², tss = Σ‖y − ȳ_h‖² (about the rows' own mean).
struct Residual {
  double rss = 0, sum_sq = 0, tss = 0, n = 0;
  // ‖Y − Ŷ‖ / ‖Y‖ (DESIGN.md §6 fit residual).
  double rel_rms() const;
  // ‖Y − Ŷ‖ / ‖Y − Ȳ‖ = sqrt(1 − R²): 1 = no better than predicting the mean.
  double centred() const;
  double r2() const { return tss > 0 ? 1.0 - rss / tss : 0.0; }
  // Sums over disjoint outputs of the same rows.
  void add(const Residual& o) { rss += o.rss, sum_sq += o.sum_sq, tss += o.tss, n = o.n; }
};
// rss per output channel is accumulated; ridge fits.
Residual ridge_residual(const Moments& h, std::span<const int64_t> xi, std::span<const int64_t> yi,
                        const RidgeFit& fit);
// Diagonal fits over channels [c0, c0 + n).
Residual diagonal_residual(const Moments& h, int64_t c0, int64_t n, const DiagonalFit& fit);
// The sum of squares part (sum_sq, tss) of outputs yi alone, rss left at 0.
Residual output_spread(const Moments& h, std::span<const int64_t> yi);

// Index helpers: channels [begin, begin + n).
std::vector<int64_t> channel_range(int64_t begin, int64_t n);

}  // namespace molt
