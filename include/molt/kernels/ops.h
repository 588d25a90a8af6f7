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

// The SIMD target dispatch picks on this CPU ("AVX2", "AVX3", "NEON", ...), for reports.
const char* simd_target_name();

// RoPE, rotate-half convention (Hugging Face / Qwen2): for i < d/2,
//   (x[i], x[i+d/2]) ← (x[i]·cos − x[i+d/2]·sin, x[i+d/2]·cos + x[i]·sin),
// angle = pos · theta^(−2i/d). `inverse` rotates by −angle (un-rotation). This file holds the
// only implementation of the angle math: the model, shedding and the transfer's RoPE sandwich
// all rotate through it, so their rotations agree bit for bit.
struct RopeSpec {
  int64_t head_dim = 0;
  double theta = 10000.0;
};
// Rotates `n_heads` consecutive heads of one position in place.
void rope_apply(const RopeSpec& spec, int64_t pos, float* x, int64_t n_heads, bool inverse = false);

// cos and sin (head_dim/2 each) of angle(pos) − angle(from), where angle(p) is the f32 angle
// transformers computes (f32 inverse frequencies times f32 position). from = 0 gives the
// plain angles of pos; the difference and cos/sin are taken in double, rounded once to f32.
void rope_cos_sin(const RopeSpec& spec, int64_t pos, float* cos, float* sin, int64_t from = 0);
// Rotates `n_heads` heads of head_dim floats by the angles of a rope_cos_sin table.
void rope_rotate(int64_t head_dim, const float* cos, const float* sin, float* x, int64_t n_heads,
                 bool inverse = false);
// Keys rotated at position `from`, moved to position `to` in one rotation by
// angle(to) − angle(from) (shedding context). Equal to rope_apply at `to` on the un-rotated key
// up to the f32 rounding of one rotation.
void rope_shift(const RopeSpec& spec, int64_t from, int64_t to, float* x, int64_t n_heads);

}  // namespace molt
