#include <cmath>
#include <vector>

#include "molt/common/error.h"
#include "molt/kernels/ops.h"

namespace molt {
namespace {

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

}  // namespace

void rope_apply(const RopeSpec& spec, int64_t pos, float* x, int64_t n_heads, bool inverse) {
  const int64_t d = spec.head_dim;
  if (d <= 0 || d % 2 != 0) fail("rope_apply: head_dim {} must be positive and even", d);
  if (!(spec.theta > 0.0)) fail("rope_apply: rope theta {} must be positive", spec.theta);
  const int64_t half = d / 2;
  const std::vector<float>& inv = inv_freq(d, spec.theta);
  thread_local std::vector<float> cs;
  cs.resize(static_cast<size_t>(d));
  float* cos_t = cs.data();
  float* sin_t = cs.data() + half;
  for (int64_t i = 0; i < half; ++i) {
    // f32 angle (position_ids.float() @ inv_freq); cos/sin of that f32 value.
    const float angle = static_cast<float>(pos) * inv[static_cast<size_t>(i)];
    cos_t[i] = static_cast<float>(std::cos(static_cast<double>(angle)));
    const float s = static_cast<float>(std::sin(static_cast<double>(angle)));
    sin_t[i] = inverse ? -s : s;
  }
  for (int64_t h = 0; h < n_heads; ++h) {
    float* v = x + h * d;
    for (int64_t i = 0; i < half; ++i) {
      const float a = v[i], b = v[i + half];
      // Same operations as q * cos + rotate_half(q) * sin.
      v[i] = a * cos_t[i] + (-b) * sin_t[i];
      v[i + half] = b * cos_t[i] + a * sin_t[i];
    }
  }
}

}  // namespace molt
