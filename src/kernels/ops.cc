// Elementwise and reduction kernels (Highway, dispatched per CPU). They are cheap next to the
// matvecs, but softmax and SiLU call exp once per element, which a scalar libm makes
// expensive at long context.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/ops.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
// Must follow foreach_target.h.
#include <cmath>

#include "hwy/contrib/math/math-inl.h"
#include "hwy/highway.h"
#include "molt/kernels/ops.h"

HWY_BEFORE_NAMESPACE();
namespace molt {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;

float Dot(const float* a, const float* b, int64_t n) {
  const DF d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  auto s0 = hn::Zero(d), s1 = hn::Zero(d);
  int64_t i = 0;
  for (; i + 2 * lanes <= n; i += 2 * lanes) {
    s0 = hn::MulAdd(hn::LoadU(d, a + i), hn::LoadU(d, b + i), s0);
    s1 = hn::MulAdd(hn::LoadU(d, a + i + lanes), hn::LoadU(d, b + i + lanes), s1);
  }
  for (; i + lanes <= n; i += lanes) s0 = hn::MulAdd(hn::LoadU(d, a + i), hn::LoadU(d, b + i), s0);
  float s = hn::GetLane(hn::SumOfLanes(d, hn::Add(s0, s1)));
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

void Rmsnorm(const float* x, const float* weight, int64_t n, float eps, float* out) {
  const float mean_sq = Dot(x, x, n) / static_cast<float>(n);
  const float inv = static_cast<float>(1.0 / std::sqrt(static_cast<double>(mean_sq + eps)));
  const DF d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  const auto vinv = hn::Set(d, inv);
  int64_t i = 0;
  for (; i + lanes <= n; i += lanes) {
    hn::StoreU(hn::Mul(hn::LoadU(d, weight + i), hn::Mul(hn::LoadU(d, x + i), vinv)), d, out + i);
  }
  for (; i < n; ++i) out[i] = weight[i] * (x[i] * inv);
}

void Softmax(float* x, int64_t n) {
  const DF d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  float mx = x[0];
  int64_t i = 0;
  if (n >= lanes) {
    auto vm = hn::LoadU(d, x);
    for (i = lanes; i + lanes <= n; i += lanes) vm = hn::Max(vm, hn::LoadU(d, x + i));
    mx = hn::GetLane(hn::MaxOfLanes(d, vm));
  }
  for (; i < n; ++i) mx = std::fmax(mx, x[i]);
  const auto vmx = hn::Set(d, mx);
  auto vsum = hn::Zero(d);
  for (i = 0; i + lanes <= n; i += lanes) {
    const auto e = hn::Exp(d, hn::Sub(hn::LoadU(d, x + i), vmx));
    hn::StoreU(e, d, x + i);
    vsum = hn::Add(vsum, e);
  }
  float sum = hn::GetLane(hn::SumOfLanes(d, vsum));
  for (; i < n; ++i) {
    x[i] = std::exp(x[i] - mx);
    sum += x[i];
  }
  const float inv = 1.0f / sum;
  const auto vinv = hn::Set(d, inv);
  for (i = 0; i + lanes <= n; i += lanes) hn::StoreU(hn::Mul(hn::LoadU(d, x + i), vinv), d, x + i);
  for (; i < n; ++i) x[i] *= inv;
}

void SiluMul(float* gate, const float* up, int64_t n) {
  const DF d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  const auto one = hn::Set(d, 1.0f);
  // hn::Exp is defined up to 104 (inf from 88.7 on, so g / (1 + inf) = -0 as in libm).
  const auto limit = hn::Set(d, 104.0f);
  int64_t i = 0;
  for (; i + lanes <= n; i += lanes) {
    const auto g = hn::LoadU(d, gate + i);
    const auto e = hn::Exp(d, hn::Min(hn::Neg(g), limit));
    hn::StoreU(hn::Mul(hn::Div(g, hn::Add(one, e)), hn::LoadU(d, up + i)), d, gate + i);
  }
  for (; i < n; ++i) gate[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

void AddInplace(float* y, const float* x, int64_t n) {
  const DF d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  int64_t i = 0;
  for (; i + lanes <= n; i += lanes) {
    hn::StoreU(hn::Add(hn::LoadU(d, y + i), hn::LoadU(d, x + i)), d, y + i);
  }
  for (; i < n; ++i) y[i] += x[i];
}

}  // namespace HWY_NAMESPACE
}  // namespace molt
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace molt {

HWY_EXPORT(Dot);
HWY_EXPORT(Rmsnorm);
HWY_EXPORT(Softmax);
HWY_EXPORT(SiluMul);
HWY_EXPORT(AddInplace);

void rmsnorm(const float* x, const float* weight, int64_t n, float eps, float* out) {
  if (n <= 0) return;
  HWY_DYNAMIC_DISPATCH(Rmsnorm)(x, weight, n, eps, out);
}

void softmax(float* x, int64_t n) {
  if (n <= 0) return;
  HWY_DYNAMIC_DISPATCH(Softmax)(x, n);
}

void silu_mul(float* gate, const float* up, int64_t n) {
  HWY_DYNAMIC_DISPATCH(SiluMul)(gate, up, n);
}

void add_inplace(float* y, const float* x, int64_t n) {
  HWY_DYNAMIC_DISPATCH(AddInplace)(y, x, n);
}

float dot(const float* a, const float* b, int64_t n) {
  return HWY_DYNAMIC_DISPATCH(Dot)(a, b, n);
}

}  // namespace molt
#endif  // HWY_ONCE
