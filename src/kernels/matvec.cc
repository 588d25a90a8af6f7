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

#include "hwy/cache_control.h"
#include "hwy/highway.h"
#include "kernels/matvec.h"
#include "molt/common/dtype.h"
#include "molt/kernels/team.h"

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

// No software prefetch in the one-vector kernels: the hardware prefetchers follow these streams,
// and a prefetch 1 KiB ahead in the 16-bit kernels cost 3-4% of bf16 decode (A/B pairs, 0.5B and
// 1.5B, 9 of 10). The batched ones differ (see kPrefetchBytes).

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

// Batched decode: n vectors x (one per sequence) meet each weight row while it is in the
// registers or L1. A row step computes up to kGroup vectors at once (R · kGroup · 2 vector
// accumulators: 24 of AVX-512's 32 registers; AVX2's 16 hold only the one-vector kernel's 8),
// and further groups re-read the step's rows from L1, not from memory. Each (row, vector) pair
// keeps the one-vector kernel's accumulators and order, so every result equals matvec's bit
// for bit.
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
constexpr int kGroup = 3;
#else
constexpr int kGroup = 1;
#endif

// The batched kernels do 2-3x the arithmetic per byte, and their longer loop bodies fill the
// out-of-order window with fewer cache lines in flight: left to the hardware prefetchers, a core
// read ~30% slower (0.5B lm_head, 1 thread, 3 vectors: cost 1.4x one vector's pass, 1.0-1.3x
// with a prefetch 1 KiB ahead along each stream; 256 B and 2 KiB ahead measured worse).
constexpr int64_t kPrefetchBytes = 1024;

// Calls fn(NB, v0) for groups of NB <= kGroup consecutive vectors [v0, v0 + NB) covering
// [0, n), their sizes as even as possible (4 = 2 + 2, not 3 + 1).
template <class Fn>
HWY_INLINE void ForVectorGroups(int64_t n, const Fn& fn) {
  const int64_t groups = (n + kGroup - 1) / kGroup;
  for (int64_t g = 0; g < groups; ++g) {
    const int64_t v0 = n * g / groups, nb = n * (g + 1) / groups - v0;
    if constexpr (kGroup >= 3) {
      if (nb == 3) {
        fn(std::integral_constant<int, 3>(), v0);
        continue;
      }
    }
    if constexpr (kGroup >= 2) {
      if (nb == 2) {
        fn(std::integral_constant<int, 2>(), v0);
        continue;
      }
    }
    fn(std::integral_constant<int, 1>(), v0);
  }
}

// ---- f32 ---------------------------------------------------------------------------------

// y[v * ys + k * step] = row k · vector v for the R rows w + k * stride (stride = step rows,
// in elements) and the NB vectors x + v * xs.
template <int R, int NB>
HWY_INLINE void RowsF32(const float* w, int64_t stride, int64_t cols, const float* x, int64_t xs,
                        float* y, int64_t ys, int64_t step) {
  const DF d;
  const int64_t n = static_cast<int64_t>(hn::Lanes(d));
  hn::Vec<DF> a[R][NB], b[R][NB];
  for (int k = 0; k < R; ++k) {
    for (int v = 0; v < NB; ++v) a[k][v] = b[k][v] = hn::Zero(d);
  }
  int64_t c = 0;
  for (; c + 2 * n <= cols; c += 2 * n) {
    for (int k = 0; k < R; ++k) {
      if constexpr (NB > 1) {  // two cache lines per step at 16 lanes
        hwy::Prefetch(w + k * stride + c + kPrefetchBytes / 4);
        hwy::Prefetch(w + k * stride + c + kPrefetchBytes / 4 + 16);
      }
      const auto w0 = hn::LoadU(d, w + k * stride + c), w1 = hn::LoadU(d, w + k * stride + c + n);
      for (int v = 0; v < NB; ++v) {
        a[k][v] = hn::MulAdd(w0, hn::LoadU(d, x + v * xs + c), a[k][v]);
        b[k][v] = hn::MulAdd(w1, hn::LoadU(d, x + v * xs + c + n), b[k][v]);
      }
    }
  }
  for (int k = 0; k < R; ++k) {
    for (int v = 0; v < NB; ++v) {
      const float* xv = x + v * xs;
      float s = hn::GetLane(hn::SumOfLanes(d, hn::Add(a[k][v], b[k][v])));
      for (int64_t i = c; i < cols; ++i) s += w[k * stride + i] * xv[i];
      y[v * ys + k * step] = s;
    }
  }
}

// y[v * rows + r] = row r · x[v * cols ..] for nv vectors.
void MatvecF32(const float* w, int64_t rows, int64_t cols, const float* x, int64_t nv, float* y) {
  ForThreadRows(rows, [&]<int R>(std::integral_constant<int, R>, int64_t r, int64_t q) {
    ForVectorGroups(nv, [&]<int NB>(std::integral_constant<int, NB>, int64_t v0) {
      RowsF32<R, NB>(w + r * cols, q * cols, cols, x + v0 * cols, cols, y + v0 * rows + r, rows, q);
    });
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

template <int R, int NB>
HWY_INLINE void RowsBF16(const uint16_t* w, int64_t stride, int64_t cols, const float* xp,
                         int64_t xs, float* y, int64_t ys, int64_t step) {
  for (int k = 0; k < R; ++k) {
    for (int v = 0; v < NB; ++v) {
      float s = 0.0f;
      for (int64_t i = 0; i < cols; ++i) s += bf16_to_f32(w[k * stride + i]) * xp[v * xs + i];
      y[v * ys + k * step] = s;
    }
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

template <int R, int NB>
HWY_INLINE void RowsBF16(const uint16_t* w, int64_t stride, int64_t cols, const float* xp,
                         int64_t xs, float* y, int64_t ys, int64_t step) {
  const DF d;
  const hn::RebindToUnsigned<DF> du32;
  const hn::Repartition<uint16_t, DF> du16;
  const int64_t n = static_cast<int64_t>(hn::Lanes(d));
  const auto hi_mask = hn::Set(du32, 0xFFFF0000u);
  hn::Vec<DF> ev[R][NB], od[R][NB];
  for (int k = 0; k < R; ++k) {
    for (int v = 0; v < NB; ++v) ev[k][v] = od[k][v] = hn::Zero(d);
  }
  int64_t c = 0;
  for (; c + 2 * n <= cols; c += 2 * n) {
    for (int k = 0; k < R; ++k) {
      if constexpr (NB > 1) hwy::Prefetch(w + k * stride + c + kPrefetchBytes / 2);
      const auto raw = hn::BitCast(du32, hn::LoadU(du16, w + k * stride + c));
      const auto we = hn::BitCast(d, hn::ShiftLeft<16>(raw));
      const auto wo = hn::BitCast(d, hn::And(raw, hi_mask));
      for (int v = 0; v < NB; ++v) {
        ev[k][v] = hn::MulAdd(we, hn::LoadU(d, xp + v * xs + c), ev[k][v]);
        od[k][v] = hn::MulAdd(wo, hn::LoadU(d, xp + v * xs + c + n), od[k][v]);
      }
    }
  }
  for (int k = 0; k < R; ++k) {
    for (int v = 0; v < NB; ++v) {
      const float* xv = xp + v * xs;
      float s = hn::GetLane(hn::SumOfLanes(d, hn::Add(ev[k][v], od[k][v])));
      for (int64_t i = c; i < cols; ++i) s += bf16_to_f32(w[k * stride + i]) * xv[i];
      y[v * ys + k * step] = s;
    }
  }
}
#endif

// px: nv vectors, each permuted by PermuteForBF16.
void MatvecBF16(const uint16_t* w, int64_t rows, int64_t cols, const float* px, int64_t nv,
                float* y) {
  ForThreadRows(rows, [&]<int R>(std::integral_constant<int, R>, int64_t r, int64_t q) {
    ForVectorGroups(nv, [&]<int NB>(std::integral_constant<int, NB>, int64_t v0) {
      RowsBF16<R, NB>(w + r * cols, q * cols, cols, px + v0 * cols, cols, y + v0 * rows + r, rows,
                      q);
    });
  });
}

// ---- f16 ---------------------------------------------------------------------------------

template <int R, int NB>
HWY_INLINE void RowsF16(const uint16_t* w16, int64_t stride, int64_t cols, const float* x,
                        int64_t xs, float* y, int64_t ys, int64_t step) {
  const DF d;
  const hn::Rebind<hwy::float16_t, DF> dh;
  const int64_t n = static_cast<int64_t>(hn::Lanes(d));
  const auto* w = reinterpret_cast<const hwy::float16_t*>(w16);
  hn::Vec<DF> a[R][NB], b[R][NB];
  for (int k = 0; k < R; ++k) {
    for (int v = 0; v < NB; ++v) a[k][v] = b[k][v] = hn::Zero(d);
  }
  int64_t c = 0;
  for (; c + 2 * n <= cols; c += 2 * n) {
    for (int k = 0; k < R; ++k) {
      if constexpr (NB > 1) hwy::Prefetch(w + k * stride + c + kPrefetchBytes / 2);
      const auto w0 = hn::PromoteTo(d, hn::LoadU(dh, w + k * stride + c));
      const auto w1 = hn::PromoteTo(d, hn::LoadU(dh, w + k * stride + c + n));
      for (int v = 0; v < NB; ++v) {
        a[k][v] = hn::MulAdd(w0, hn::LoadU(d, x + v * xs + c), a[k][v]);
        b[k][v] = hn::MulAdd(w1, hn::LoadU(d, x + v * xs + c + n), b[k][v]);
      }
    }
  }
  for (int k = 0; k < R; ++k) {
    for (int v = 0; v < NB; ++v) {
      const float* xv = x + v * xs;
      float s = hn::GetLane(hn::SumOfLanes(d, hn::Add(a[k][v], b[k][v])));
      for (int64_t i = c; i < cols; ++i) s += f16_to_f32(w16[k * stride + i]) * xv[i];
      y[v * ys + k * step] = s;
    }
  }
}

void MatvecF16(const uint16_t* w, int64_t rows, int64_t cols, const float* x, int64_t nv,
               float* y) {
  ForThreadRows(rows, [&]<int R>(std::integral_constant<int, R>, int64_t r, int64_t q) {
    ForVectorGroups(nv, [&]<int NB>(std::integral_constant<int, NB>, int64_t v0) {
      RowsF16<R, NB>(w + r * cols, q * cols, cols, x + v0 * cols, cols, y + v0 * rows + r, rows, q);
    });
  });
}

// y_i = W_i x for n weights of one dtype and width that read the same x (q/k/v, gate/up), in
// one parallel region: the threads are woken once for all of them, not once per matrix (a
// wake-up costs tens of microseconds under a passive wait policy), and x is permuted once.
// Each thread takes its share of every matrix in turn; no barrier between them. x holds nv
// vectors (one per sequence of a batched decode) and y_i nv rows of outputs.
void MatvecMulti(const WeightMatrix* ws, int64_t n, const float* x, int64_t nv, float* const* ys) {
  const DType dt = ws[0].dtype;
  const int64_t cols = ws[0].cols;
  thread_local std::vector<float> xp;
  if (dt == DType::BF16) {
    if (xp.size() < static_cast<size_t>(nv * cols)) xp.resize(static_cast<size_t>(nv * cols));
    for (int64_t v = 0; v < nv; ++v) PermuteForBF16(x + v * cols, cols, xp.data() + v * cols);
  }
  const float* px = xp.data();
  parallel([&] {
    for (int64_t i = 0; i < n; ++i) {
      const WeightMatrix& w = ws[i];
      if (dt == DType::F32) {
        MatvecF32(static_cast<const float*>(w.data), w.rows, cols, x, nv, ys[i]);
      } else if (dt == DType::BF16) {
        MatvecBF16(static_cast<const uint16_t*>(w.data), w.rows, cols, px, nv, ys[i]);
      } else {
        MatvecF16(static_cast<const uint16_t*>(w.data), w.rows, cols, x, nv, ys[i]);
      }
    }
  });
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

void matvec_dispatch(const WeightMatrix* ws, int64_t n, const float* x, int64_t nv,
                     float* const* ys) {
  HWY_DYNAMIC_DISPATCH(MatvecMulti)(ws, n, x, nv, ys);
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
