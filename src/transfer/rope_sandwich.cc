#include "molt/transfer/rope_sandwich.h"

#include "molt/common/error.h"

namespace molt {

RopeTable::RopeTable(const RopeSpec& spec, int64_t p0, int64_t n) : spec_(spec), p0_(p0), n_(n) {
  const int64_t d = spec.head_dim;
  if (d <= 0 || d % 2 != 0) fail("RoPE: head_dim {} must be positive and even", d);
  if (!(spec.theta > 0.0)) fail("RoPE: theta {} must be positive", spec.theta);
  if (p0 < 0 || n < 0) fail("RoPE: bad position range [{}, {})", p0, p0 + n);
  const int64_t half = d / 2;
  // The kernels' angle math, the one the model rotates with.
  cos_.resize(static_cast<size_t>(n * half));
  sin_.resize(static_cast<size_t>(n * half));
  for (int64_t p = 0; p < n; ++p) rope_cos_sin(spec, p0 + p, &cos_[p * half], &sin_[p * half]);
}

void RopeTable::rotate(float* x, int64_t i0, int64_t rows, int64_t n_heads, bool inverse) const {
  if (i0 < 0 || i0 + rows > n_)
    fail("RoPE: rows [{}, {}) outside the table of {}", i0, i0 + rows, n_);
  const int64_t d = spec_.head_dim, half = d / 2;
#pragma omp parallel for schedule(static) if (rows * n_heads * d > 32768)
  for (int64_t r = i0; r < i0 + rows; ++r) {
    rope_rotate(d, &cos_[r * half], &sin_[r * half], x + (r - i0) * n_heads * d, n_heads, inverse);
  }
}

void unrotate_keys(const RopeSpec& spec, float* k, int64_t n, int64_t n_heads) {
  RopeTable(spec, 0, n).rotate(k, 0, n, n_heads, /*inverse=*/true);
}

void rotate_keys(const RopeSpec& spec, float* k, int64_t n, int64_t n_heads) {
  RopeTable(spec, 0, n).rotate(k, 0, n, n_heads, /*inverse=*/false);
}

}  // namespace molt
