#include "molt/transfer/rope_sandwich.h"

#include <cmath>

#include "molt/common/error.h"

namespace molt {

RopeTable::RopeTable(const RopeSpec& spec, int64_t p0, int64_t n) : spec_(spec), p0_(p0), n_(n) {
  const int64_t d = spec.head_dim;
  if (d <= 0 || d % 2 != 0) fail("RoPE: head_dim {} must be positive and even", d);
  if (!(spec.theta > 0.0)) fail("RoPE: theta {} must be positive", spec.theta);
  if (p0 < 0 || n < 0) fail("RoPE: bad position range [{}, {})", p0, p0 + n);
  const int64_t half = d / 2;
  // The same f32 arithmetic as rope_apply (kernels/rope.cc), which matches transformers.
  std::vector<float> inv(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i) {
    const float e = static_cast<float>(2 * i) / static_cast<float>(d);
    inv[i] = 1.0f / static_cast<float>(std::pow(spec.theta, static_cast<double>(e)));
  }
  cos_.resize(static_cast<size_t>(n * half));
  sin_.resize(static_cast<size_t>(n * half));
  for (int64_t p = 0; p < n; ++p) {
    for (int64_t i = 0; i < half; ++i) {
      const float angle = static_cast<float>(p0 + p) * inv[i];
      cos_[p * half + i] = static_cast<float>(std::cos(static_cast<double>(angle)));
      sin_[p * half + i] = static_cast<float>(std::sin(static_cast<double>(angle)));
    }
  }
}

void RopeTable::rotate(float* x, int64_t i0, int64_t rows, int64_t n_heads, bool inverse) const {
  if (i0 < 0 || i0 + rows > n_)
    fail("RoPE: rows [{}, {}) outside the table of {}", i0, i0 + rows, n_);
  const int64_t d = spec_.head_dim, half = d / 2;
#pragma omp parallel for schedule(static) if (rows * n_heads * d > 32768)
  for (int64_t r = i0; r < i0 + rows; ++r) {
    const float* c = &cos_[r * half];
    const float* s0 = &sin_[r * half];
    float* row = x + (r - i0) * n_heads * d;
    for (int64_t h = 0; h < n_heads; ++h) {
      float* v = row + h * d;
      for (int64_t i = 0; i < half; ++i) {
        const float s = inverse ? -s0[i] : s0[i];
        const float a = v[i], b = v[i + half];
        v[i] = a * c[i] + (-b) * s;
        v[i + half] = b * c[i] + a * s;
      }
    }
  }
}

void unrotate_keys(const RopeSpec& spec, float* k, int64_t n, int64_t n_heads) {
  RopeTable(spec, 0, n).rotate(k, 0, n, n_heads, /*inverse=*/true);
}

void rotate_keys(const RopeSpec& spec, float* k, int64_t n, int64_t n_heads) {
  RopeTable(spec, 0, n).rotate(k, 0, n, n_heads, /*inverse=*/false);
}

}  // namespace molt
