// RoPE: the one implementation of the angle math (see ops.h). The rotation runs in Highway ops,
// compiled once per CPU target and dispatched at run time; each output is a·cos − b·sin (or
// b·cos + a·sin) with the two products and the sum rounded separately, as the reference formula
// q·cos + rotate_half(q)·sin, so every target gives the same floats: this file is compiled with
// -ffp-contract=off (CMakeLists.txt), or GCC would fuse them wherever the target has FMA.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/rope.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
// Must follow foreach_target.h.
#include <cmath>
#include <vector>

#include "hwy/highway.h"
#include "molt/common/error.h"
#include "molt/kernels/ops.h"

HWY_BEFORE_NAMESPACE();
namespace molt {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

void RopeRotate(int64_t head_dim, const float* cos, const float* sin, float* x, int64_t n_heads,
                bool inverse) {
  const hn::ScalableTag<float> d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d)), half = head_dim / 2;
  for (int64_t h = 0; h < n_heads; ++h) {
    float* v = x + h * head_dim;
    int64_t i = 0;
    for (; i + N <= half; i += N) {
      const auto c = hn::LoadU(d, cos + i), a = hn::LoadU(d, v + i), b = hn::LoadU(d, v + i + half);
      auto s = hn::LoadU(d, sin + i);
      if (inverse) s = hn::Neg(s);
      hn::StoreU(hn::Add(hn::Mul(a, c), hn::Mul(hn::Neg(b), s)), d, v + i);
      hn::StoreU(hn::Add(hn::Mul(b, c), hn::Mul(a, s)), d, v + i + half);
    }
    for (; i < half; ++i) {
      const float s = inverse ? -sin[i] : sin[i];
      const float a = v[i], b = v[i + half];
      v[i] = a * cos[i] + (-b) * s;
      v[i + half] = b * cos[i] + a * s;
    }
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace molt
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace molt {
HWY_EXPORT(RopeRotate);

namespace {

void check(const RopeSpec& spec, const char* what) {
  const int64_t d = spec.head_dim;
  if (d <= 0 || d % 2 != 0) fail("{}: head_dim {} must be positive and even", what, d);
  if (!(spec.theta > 0.0)) fail("{}: rope theta {} must be positive", what, spec.theta);
}

// inv_freq exactly as transformers builds it in f32:
//   1.0 / (base ** (torch.arange(0, d, 2).float() / d))
// The exponent is an f32 quotient, the power is rounded once to f32, the reciprocal is f32.
const std::vector<float>& inv_freq(int64_t head_dim, double theta) {
  thread_local int64_t cached_dim = -1;
  thread_local double cached_theta = 0.0;
  thread_local std::vector<float> table;
  if (cached_dim != head_dim || cached_theta != theta) {
    table.resize(static_cast<size_t>(head_dim / 2));
    for (int64_t i = 0; i < head_dim / 2; ++i) {
      const float e = static_cast<float>(2 * i) / static_cast<float>(head_dim);
      const float p = static_cast<float>(std::pow(theta, static_cast<double>(e)));
      table[static_cast<size_t>(i)] = 1.0f / p;
    }
    cached_dim = head_dim;
    cached_theta = theta;
  }
  return table;
}

// A cos/sin table of one position for this thread: kept, so a decode step allocates nothing.
float* cos_sin_buffer(int64_t head_dim) {
  thread_local std::vector<float> cs;
  if (cs.size() < static_cast<size_t>(head_dim)) cs.resize(static_cast<size_t>(head_dim));
  return cs.data();
}

}  // namespace

void rope_cos_sin(const RopeSpec& spec, int64_t pos, float* cos, float* sin, int64_t from) {
  check(spec, "rope_cos_sin");
  const int64_t half = spec.head_dim / 2;
  const std::vector<float>& inv = inv_freq(spec.head_dim, spec.theta);
  for (int64_t i = 0; i < half; ++i) {
    // f32 angles (position_ids.float() @ inv_freq). With from = 0 the difference is the f32
    // angle itself, exactly; two f32 angles differ exactly in double.
    const float f = inv[static_cast<size_t>(i)];
    const double angle = static_cast<double>(static_cast<float>(pos) * f) -
                         static_cast<double>(static_cast<float>(from) * f);
    cos[i] = static_cast<float>(std::cos(angle));
    sin[i] = static_cast<float>(std::sin(angle));
  }
}

void rope_rotate(int64_t head_dim, const float* cos, const float* sin, float* x, int64_t n_heads,
                 bool inverse) {
  HWY_DYNAMIC_DISPATCH(RopeRotate)(head_dim, cos, sin, x, n_heads, inverse);
}

void rope_apply(const RopeSpec& spec, int64_t pos, float* x, int64_t n_heads, bool inverse) {
  check(spec, "rope_apply");
  float* cs = cos_sin_buffer(spec.head_dim);
  rope_cos_sin(spec, pos, cs, cs + spec.head_dim / 2);
  rope_rotate(spec.head_dim, cs, cs + spec.head_dim / 2, x, n_heads, inverse);
}

void rope_shift(const RopeSpec& spec, int64_t from, int64_t to, float* x, int64_t n_heads) {
  check(spec, "rope_shift");
  float* cs = cos_sin_buffer(spec.head_dim);
  rope_cos_sin(spec, to, cs, cs + spec.head_dim / 2, from);
  rope_rotate(spec.head_dim, cs, cs + spec.head_dim / 2, x, n_heads);
}

}  // namespace molt
#endif  // HWY_ONCE
