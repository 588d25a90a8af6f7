// SIMD matvec (y = W x) for f32, bf16 and f16 weights, compiled once per CPU target by
// Highway and dispatched at run time. Decode streams every weight once per token, so the
// kernel is built to keep memory busy: rows are split into one contiguous range per thread,
// four rows share each load of x, and accumulators stay f32.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/matvec.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
// Must follow foreach_target.h.
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "hwy/highway.h"
#include "kernels/matvec.h"
#include "molt/common/dtype.h"

HWY_BEFORE_NAMESPACE();
namespace molt {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;

// This thread's share of [0, rows), in whole groups of 4 rows.
inline void thread_rows(int64_t rows, int64_t* r0, int64_t* r1) {
  const int64_t nt = omp_get_num_threads(), t = omp_get_thread_num();
  const int64_t groups = (rows + 3) / 4;
  *r0 = std::min(rows, groups * t / nt * 4);
  *r1 = std::min(rows, groups * (t + 1) / nt * 4);
}

// ---- f32 ---------------------------------------------------------------------------------

template <int R>
HWY_INLINE void RowsF32(const float* w, int64_t cols, const float* x, float* y) {
  const DF d;
  const int64_t n = static_cast<int64_t>(hn::Lanes(d));
  hn::Vec<DF> a[R], b[R];
  for (int k = 0; k < R; ++k) a[k] = b[k] = hn::Zero(d);
  int64_t c = 0;
  for (; c + 2 * n <= cols; c += 2 * n) {
    const auto x0 = hn::LoadU(d, x + c), x1 = hn::LoadU(d, x + c + n);
    for (int k = 0; k < R; ++k) {
      a[k] = hn::MulAdd(hn::LoadU(d, w + k * cols + c), x0, a[k]);
      b[k] = hn::MulAdd(hn::LoadU(d, w + k * cols + c + n), x1, b[k]);
    }
  }
  for (; c + n <= cols; c += n) {
    const auto x0 = hn::LoadU(d, x + c);
    for (int k = 0; k < R; ++k) a[k] = hn::MulAdd(hn::LoadU(d, w + k * cols + c), x0, a[k]);
  }
  for (int k = 0; k < R; ++k) {
    float s = hn::GetLane(hn::SumOfLanes(d, hn::Add(a[k], b[k])));
    for (int64_t i = c; i < cols; ++i) s += w[k * cols + i] * x[i];
    y[k] = s;
  }
}

void MatvecF32(const float* w, int64_t rows, int64_t cols, const float* x, float* y) {
#pragma omp parallel
  {
    int64_t r0, r1;
    thread_rows(rows, &r0, &r1);
    int64_t r = r0;
    for (; r + 4 <= r1; r += 4) RowsF32<4>(w + r * cols, cols, x, y + r);
    for (; r < r1; ++r) RowsF32<1>(w + r * cols, cols, x, y + r);
  }
}

// ---- bf16 --------------------------------------------------------------------------------
// A bf16 is the top half of an f32. Reading 2N bf16 as N u32 lanes, `lane << 16` is the
// even element and `lane & 0xffff0000` the odd one: two integer ops widen 2N weights. x is
// permuted once per call to match (per 2N chunk: N even elements, then N odd ones).

#if HWY_TARGET == HWY_SCALAR
// One lane: no u32 pair to split, so plain conversion in order.
void PermuteForBF16(const float* x, int64_t cols, float* xp) {
  std::copy(x, x + cols, xp);
}

template <int R>
HWY_INLINE void RowsBF16(const uint16_t* w, int64_t cols, const float* xp, float* y) {
  for (int k = 0; k < R; ++k) {
    float s = 0.0f;
    for (int64_t i = 0; i < cols; ++i) s += bf16_to_f32(w[k * cols + i]) * xp[i];
    y[k] = s;
  }
}
#else
void PermuteForBF16(const float* x, int64_t cols, float* xp) {
  const int64_t n = static_cast<int64_t>(hn::Lanes(DF()));
  int64_t c = 0;
  for (; c + 2 * n <= cols; c += 2 * n) {
    for (int64_t i = 0; i < n; ++i) {
      xp[c + i] = x[c + 2 * i];
      xp[c + n + i] = x[c + 2 * i + 1];
    }
  }
  for (; c < cols; ++c) xp[c] = x[c];
}

template <int R>
HWY_INLINE void RowsBF16(const uint16_t* w, int64_t cols, const float* xp, float* y) {
  const DF d;
  const hn::RebindToUnsigned<DF> du32;
  const hn::Repartition<uint16_t, DF> du16;
  const int64_t n = static_cast<int64_t>(hn::Lanes(d));
  const auto hi_mask = hn::Set(du32, 0xFFFF0000u);
  hn::Vec<DF> ev[R], od[R];
  for (int k = 0; k < R; ++k) ev[k] = od[k] = hn::Zero(d);
  int64_t c = 0;
  for (; c + 2 * n <= cols; c += 2 * n) {
    const auto xe = hn::LoadU(d, xp + c), xo = hn::LoadU(d, xp + c + n);
    for (int k = 0; k < R; ++k) {
      const auto raw = hn::BitCast(du32, hn::LoadU(du16, w + k * cols + c));
      ev[k] = hn::MulAdd(hn::BitCast(d, hn::ShiftLeft<16>(raw)), xe, ev[k]);
      od[k] = hn::MulAdd(hn::BitCast(d, hn::And(raw, hi_mask)), xo, od[k]);
    }
  }
  for (int k = 0; k < R; ++k) {
    float s = hn::GetLane(hn::SumOfLanes(d, hn::Add(ev[k], od[k])));
    for (int64_t i = c; i < cols; ++i) s += bf16_to_f32(w[k * cols + i]) * xp[i];
    y[k] = s;
  }
}
#endif

void MatvecBF16(const uint16_t* w, int64_t rows, int64_t cols, const float* x, float* y) {
  thread_local std::vector<float> xp;
  xp.resize(static_cast<size_t>(cols));
  PermuteForBF16(x, cols, xp.data());
  const float* px = xp.data();
#pragma omp parallel
  {
    int64_t r0, r1;
    thread_rows(rows, &r0, &r1);
    int64_t r = r0;
    for (; r + 4 <= r1; r += 4) RowsBF16<4>(w + r * cols, cols, px, y + r);
    for (; r < r1; ++r) RowsBF16<1>(w + r * cols, cols, px, y + r);
  }
}

// ---- f16 ---------------------------------------------------------------------------------

template <int R>
HWY_INLINE void RowsF16(const uint16_t* w16, int64_t cols, const float* x, float* y) {
  const DF d;
  const hn::Rebind<hwy::float16_t, DF> dh;
  const int64_t n = static_cast<int64_t>(hn::Lanes(d));
  const auto* w = reinterpret_cast<const hwy::float16_t*>(w16);
  hn::Vec<DF> a[R], b[R];
  for (int k = 0; k < R; ++k) a[k] = b[k] = hn::Zero(d);
  int64_t c = 0;
  for (; c + 2 * n <= cols; c += 2 * n) {
    const auto x0 = hn::LoadU(d, x + c), x1 = hn::LoadU(d, x + c + n);
    for (int k = 0; k < R; ++k) {
      a[k] = hn::MulAdd(hn::PromoteTo(d, hn::LoadU(dh, w + k * cols + c)), x0, a[k]);
      b[k] = hn::MulAdd(hn::PromoteTo(d, hn::LoadU(dh, w + k * cols + c + n)), x1, b[k]);
    }
  }
  for (int k = 0; k < R; ++k) {
    float s = hn::GetLane(hn::SumOfLanes(d, hn::Add(a[k], b[k])));
    for (int64_t i = c; i < cols; ++i) s += f16_to_f32(w16[k * cols + i]) * x[i];
    y[k] = s;
  }
}

void MatvecF16(const uint16_t* w, int64_t rows, int64_t cols, const float* x, float* y) {
#pragma omp parallel
  {
    int64_t r0, r1;
    thread_rows(rows, &r0, &r1);
    int64_t r = r0;
    for (; r + 4 <= r1; r += 4) RowsF16<4>(w + r * cols, cols, x, y + r);
    for (; r < r1; ++r) RowsF16<1>(w + r * cols, cols, x, y + r);
  }
}

// ---- widening (embedding rows, prefill tiles) ----------------------------------------------

void WidenBF16(const uint16_t* src, int64_t n, float* dst) {
  const DF d;
  const hn::Rebind<hwy::bfloat16_t, DF> dh;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  const auto* s = reinterpret_cast<const hwy::bfloat16_t*>(src);
  int64_t i = 0;
  for (; i + lanes <= n; i += lanes) hn::StoreU(hn::PromoteTo(d, hn::LoadU(dh, s + i)), d, dst + i);
  for (; i < n; ++i) dst[i] = bf16_to_f32(src[i]);
}

void WidenF16(const uint16_t* src, int64_t n, float* dst) {
  const DF d;
  const hn::Rebind<hwy::float16_t, DF> dh;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  const auto* s = reinterpret_cast<const hwy::float16_t*>(src);
  int64_t i = 0;
  for (; i + lanes <= n; i += lanes) hn::StoreU(hn::PromoteTo(d, hn::LoadU(dh, s + i)), d, dst + i);
  for (; i < n; ++i) dst[i] = f16_to_f32(src[i]);
}

}  // namespace HWY_NAMESPACE
}  // namespace molt
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace molt {

HWY_EXPORT(MatvecF32);
HWY_EXPORT(MatvecBF16);
HWY_EXPORT(MatvecF16);
HWY_EXPORT(WidenBF16);
HWY_EXPORT(WidenF16);

void matvec_dispatch(const WeightMatrix& w, const float* x, float* y) {
  switch (w.dtype) {
    case DType::F32:
      HWY_DYNAMIC_DISPATCH(MatvecF32)(static_cast<const float*>(w.data), w.rows, w.cols, x, y);
      return;
    case DType::BF16:
      HWY_DYNAMIC_DISPATCH(MatvecBF16)(static_cast<const uint16_t*>(w.data), w.rows, w.cols, x, y);
      return;
    default:
      HWY_DYNAMIC_DISPATCH(MatvecF16)(static_cast<const uint16_t*>(w.data), w.rows, w.cols, x, y);
      return;
  }
}

void widen_row_16(DType dtype, const uint16_t* src, int64_t n, float* dst) {
  if (dtype == DType::BF16) {
    HWY_DYNAMIC_DISPATCH(WidenBF16)(src, n, dst);
  } else {
    HWY_DYNAMIC_DISPATCH(WidenF16)(src, n, dst);
  }
}

const char* simd_target_name() {
  // The best compiled target this CPU supports: the one dynamic dispatch picks.
  const int64_t t = hwy::SupportedTargets() & HWY_TARGETS;
  return hwy::TargetName(t & -t);
}

}  // namespace molt
#endif  // HWY_ONCE
