// Elementwise and reduction kernels of the Qwen2 block, f32.
#pragma once

#include <cstdint>

namespace molt {

// out = x / rms(x) * weight, rms(x) = sqrt(mean(x²) + eps). out may alias x.
void rmsnorm(const float* x, const float* weight, int64_t n, float eps, float* out);

// In-place numerically stable softmax over n values.
void softmax(float* x, int64_t n);

// gate[i] = silu(gate[i]) * up[i]  (SwiGLU).
void silu_mul(float* gate, const float* up, int64_t n);

// y += x
void add_inplace(float* y, const float* x, int64_t n);

float dot(const float* a, const float* b, int64_t n);

// RoPE, rotate-half convention (Hugging Face / Qwen2): for i < d/2,
//   (x[i], x[i+d/2]) ← (x[i]·cos − x[i+d/2]·sin, x[i+d/2]·cos + x[i]·sin),
// angle = pos · theta^(−2i/d). `inverse` rotates by −angle (un-rotation).
struct RopeSpec {
  int64_t head_dim = 0;
  double theta = 10000.0;
};
// Rotates `n_heads` consecutive heads of one position in place.
void rope_apply(const RopeSpec& spec, int64_t pos, float* x, int64_t n_heads, bool inverse = false);

}  // namespace molt
