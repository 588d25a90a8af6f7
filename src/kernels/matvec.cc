// SIMD matvec (y = W x) for f32, bf16 and f16 weights, compiled once per CPU target by
// Highway and dispatched at run time. Decode streams every weight once per token, so the
// kernel is built to keep memory busy (see kStreams); accumulators stay f32.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/matvec.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
// Must follow foreach_target.h.
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#include "hwy/highway.h"
#include "kernels/matvec.h"
#include "molt/common/dtype.h"

HWY_BEFORE_NAMESPACE();
namespace molt {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;

// Four rows are computed together so each load of x serves four rows. They are not adjacent
// rows: each thread splits its contiguous share of rows into four quarters and walks them in
// step, so the weights arrive as four long sequential streams. One stream per core leaves
// DRAM bandwidth unused (about 30 GB/s of a 42 GB/s triad here), four adjacent rows are
// worse still (each a short stream the prefetchers keep losing), four far-apart streams
// read at or above the STREAM triad figure.
constexpr int kStreams = 4;

// No software prefetch: the hardware prefetchers follow these streams, and a prefetch 1 KiB
// ahead in the 16-bit kernels cost 3-4% of bf16 decode (A/B pairs, 0.5B and 1.5B, 9 of 10).

// Calls rows(R, first_row, row_step) for groups of R = kStreams rows [first, first + step,
// ...], then R = 1 for the rows left over. Inside a parallel region, rows are dealt out in
// blocks (about 1/4 of a thread's share: at 1/8, 0.5B bf16 decode ran ~5% slower, each block
// restarting its streams) first come first served, with no barrier at the end:
// with a static half each, one core finishing late (its memory slower for a moment) left the
// other waiting at every join, long enough to fall asleep and cost a wake-up.
template <class Rows>
HWY_INLINE void ForThreadRows(int64_t rows, const Rows& rows_fn) {
  const int64_t nt = omp_get_num_threads();
  const int64_t block = std::max<int64_t>(4 * kStreams, (rows + 4 * nt - 1) / (4 * nt));
  const int64_t blocks = (rows + block - 1) / block;
#pragma omp for schedule(dynamic, 1) nowait
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t r0 = b * block, r1 = std::min(rows, r0 + block);
    const int64_t q = (r1 - r0) / kStreams;
    for (int64_t i = 0; i < q; ++i) {
      rows_fn(std::integral_constant<int, kStreams>(), r0 + i, q);
    }
    for (int64_t r = r0 + kStreams * q; r < r1; ++r) {
      rows_fn(std::integral_constant<int, 1>(), r, 0);
    }
  }
}

// ---- f32 ---------------------------------------------------------------------------------

// y[k * step] = row k · x for the R rows w + k * stride (stride = step rows, in elements).
template <int R>
HWY_INLINE void RowsF32(const float* w, int64_t stride, int64_t cols, const float* x, float* y,
                        int64_t step) {
  const DF d;
  const int64_t n = static_cast<int64_t>(hn::Lanes(d));
  hn::Vec<DF> a[R], b[R];
  for (int k = 0; k < R; ++k) a[k] = b[k] = hn::Zero(d);
  int64_t c = 0;
  for (; c + 2 * n <= cols; c += 2 * n) {
    const auto x0 = hn::LoadU(d, x + c), x1 = hn::LoadU(d, x + c + n);
    for (int k = 0; k < R; ++k) {
      a[k] = hn::MulAdd(hn::LoadU(d, w + k * stride + c), x0, a[k]);
      b[k] = hn::MulAdd(hn::LoadU(d, w + k * stride + c + n), x1, b[k]);
    }
  }
  for (int k = 0; k < R; ++k) {
    float s = hn::GetLane(hn::SumOfLanes(d, hn::Add(a[k], b[k])));
    for (int64_t i = c; i < cols; ++i) s += w[k * stride + i] * x[i];
    y[k * step] = s;
  }
}

void MatvecF32(const float* w, int64_t rows, int64_t cols, const float* x, float* y) {
  ForThreadRows(rows, [&]<int R>(std::integral_constant<int, R>, int64_t r, int64_t q) {
    RowsF32<R>(w + r * cols, q * cols, cols, x, y + r, q);
  });
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
HWY_INLINE void RowsBF16(const uint16_t* w, int64_t stride, int64_t cols, const float* xp, float* y,
                         int64_t step) {
  for (int k = 0; k < R; ++k) {
    float s = 0.0f;
    for (int64_t i = 0; i < cols; ++i) s += bf16_to_f32(w[k * stride + i]) * xp[i];
    y[k * step] = s;
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
HWY_INLINE void RowsBF16(const uint16_t* w, int64_t stride, int64_t cols, const float* xp, float* y,
                         int64_t step) {
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
      const auto raw = hn::BitCast(du32, hn::LoadU(du16, w + k * stride + c));
      ev[k] = hn::MulAdd(hn::BitCast(d, hn::ShiftLeft<16>(raw)), xe, ev[k]);
      od[k] = hn::MulAdd(hn::BitCast(d, hn::And(raw, hi_mask)), xo, od[k]);
    }
  }
  for (int k = 0; k < R; ++k) {
    float s = hn::GetLane(hn::SumOfLanes(d, hn::Add(ev[k], od[k])));
    for (int64_t i = c; i < cols; ++i) s += bf16_to_f32(w[k * stride + i]) * xp[i];
    y[k * step] = s;
  }
}
#endif

// px: x permuted by PermuteForBF16.
void MatvecBF16(const uint16_t* w, int64_t rows, int64_t cols, const float* px, float* y) {
  ForThreadRows(rows, [&]<int R>(std::integral_constant<int, R>, int64_t r, int64_t q) {
    RowsBF16<R>(w + r * cols, q * cols, cols, px, y + r, q);
  });
}

// ---- f16 ---------------------------------------------------------------------------------

template <int R>
HWY_INLINE void RowsF16(const uint16_t* w16, int64_t stride, int64_t cols, const float* x, float* y,
                        int64_t step) {
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
      a[k] = hn::MulAdd(hn::PromoteTo(d, hn::LoadU(dh, w + k * stride + c)), x0, a[k]);
      b[k] = hn::MulAdd(hn::PromoteTo(d, hn::LoadU(dh, w + k * stride + c + n)), x1, b[k]);
    }
  }
  for (int k = 0; k < R; ++k) {
    float s = hn::GetLane(hn::SumOfLanes(d, hn::Add(a[k], b[k])));
    for (int64_t i = c; i < cols; ++i) s += f16_to_f32(w16[k * stride + i]) * x[i];
    y[k * step] = s;
  }
}

void MatvecF16(const uint16_t* w, int64_t rows, int64_t cols, const float* x, float* y) {
  ForThreadRows(rows, [&]<int R>(std::integral_constant<int, R>, int64_t r, int64_t q) {
    RowsF16<R>(w + r * cols, q * cols, cols, x, y + r, q);
  });
}

// y_i = W_i x for n weights of one dtype and width that read the same x (q/k/v, gate/up), in
// one parallel region: the threads are woken once for all of them, not once per matrix (a
// wake-up costs tens of microseconds under a passive wait policy), and x is permuted once.
// Each thread takes its share of every matrix in turn; no barrier between them.
void MatvecMulti(const WeightMatrix* ws, int64_t n, const float* x, float* const* ys) {
  const DType dt = ws[0].dtype;
  const int64_t cols = ws[0].cols;
  thread_local std::vector<float> xp;
  if (dt == DType::BF16) {
    xp.resize(static_cast<size_t>(cols));
    PermuteForBF16(x, cols, xp.data());
  }
  const float* px = xp.data();
#pragma omp parallel
  for (int64_t i = 0; i < n; ++i) {
    const WeightMatrix& w = ws[i];
    if (dt == DType::F32) {
      MatvecF32(static_cast<const float*>(w.data), w.rows, cols, x, ys[i]);
    } else if (dt == DType::BF16) {
      MatvecBF16(static_cast<const uint16_t*>(w.data), w.rows, cols, px, ys[i]);
    } else {
      MatvecF16(static_cast<const uint16_t*>(w.data), w.rows, cols, x, ys[i]);
    }
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

HWY_EXPORT(MatvecMulti);
HWY_EXPORT(WidenBF16);
HWY_EXPORT(WidenF16);

void matvec_dispatch(const WeightMatrix* ws, int64_t n, const float* x, float* const* ys) {
  HWY_DYNAMIC_DISPATCH(MatvecMulti)(ws, n, x, ys);
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
