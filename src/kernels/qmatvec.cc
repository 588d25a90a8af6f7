// Fused-dequantisation matvec for quantised weights, compiled once per CPU target by Highway
// and dispatched at run time.
//
// Decode reads every weight once per token, so at 4 or 8 bits per weight the arithmetic per
// byte is what limits speed: widening each weight to f32 costs about 4 vector ops per 8
// weights, more than two Zen 3 cores can issue at memory speed. On x86 with AVX2 the kernel
// instead rounds x to int8 once per call (one f32 scale per 32-byte chunk of weights: 32
// inputs at 8 bits, 64 at 4 bits) and sums weight × x products in integers with
// vpmaddubsw / vpmaddwd, 32 or 64 weights per instruction pair; each chunk's integer sum is
// scaled by (x scale) and each group's by the weight scale. The affine bias term
// Σ_g bias_g · Σ_{i∈g} x_i is added from exact f32 group sums of x.
//
// 8-bit affine q in [0, 255] would overflow vpmaddubsw's i16 pairs against int8 x, so it
// runs as q - 128 (signed) with the sign trick (|q - 128| · (x with q - 128's sign), at most
// 2·128·127), and the 128 · Σ x̃ it removes is added back per group. Symmetric int8 (q in
// [-127, 127]) uses the trick the other way round (|x| · (q with x's sign)). 4-bit q in [0, 15]
// multiplies int8 x directly; x is permuted once per call so that the low nibbles of a chunk meet
// the even inputs and the high nibbles the odd ones.
//
// Other targets (SSE4, NEON, scalar, ...) and shapes the chunks do not tile take an exact f32
// path.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/qmatvec.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
// Must follow foreach_target.h.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

#include "hwy/highway.h"
#include "kernels/qmatvec.h"
#include "molt/common/dtype.h"

#if HWY_ARCH_X86
#include <immintrin.h>
#endif

HWY_BEFORE_NAMESPACE();
namespace molt {
namespace HWY_NAMESPACE {

// Same row split as the dense kernels (kernels/matvec.cc): four far-apart rows per step, so
// each thread's weights arrive as four long sequential streams.
constexpr int kStreams = 4;

// Software prefetch distance in bytes along each row stream (rows are contiguous, so it runs
// on into the stream's next row). At 4 bits a row of 896 inputs is only 7 cache lines and the
// hardware prefetchers alone left decode at ~0.4x the triad bound.
constexpr int64_t kPrefetchBytes = 1536;

template <class Rows>
HWY_INLINE void ForThreadRowsQ(int64_t rows, const Rows& rows_fn) {
  const int64_t nt = omp_get_num_threads(), t = omp_get_thread_num();
  const int64_t r0 = rows * t / nt, r1 = rows * (t + 1) / nt;
  const int64_t q = (r1 - r0) / kStreams;
  for (int64_t i = 0; i < q; ++i) {
    rows_fn(std::integral_constant<int, kStreams>(), r0 + i, q);
  }
  for (int64_t r = r0 + kStreams * q; r < r1; ++r) rows_fn(std::integral_constant<int, 1>(), r, 0);
}

#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2

enum Kind { kInt8 = 0, kAffine8 = 1, kAffine4 = 2, kAffine4G32 = 3 };

// x rounded to int8 for one call: q (permuted for 4-bit), one scale per 32-byte weight chunk,
// and per weight group the exact Σ x and (8-bit affine) 128 · Σ x̃.
struct XQ {
  std::vector<int8_t> q;
  std::vector<float> dx, xsum, corr;
};

void PrepareX(const WeightMatrix& w, Kind kind, const float* x, XQ& b) {
  const bool nib = kind == kAffine4 || kind == kAffine4G32;
  const int64_t ce = nib ? 64 : 32, nc = w.cols / ce, G = w.group_size, ng = w.groups();
  // dx, xsum and corr are zero-padded to whole vectors of 8 (read 8 at a time).
  b.q.resize(static_cast<size_t>(w.cols));
  b.dx.assign(static_cast<size_t>((nc + 7) / 8 * 8), 0.0f);
  b.xsum.assign(static_cast<size_t>((ng + 7) / 8 * 8), 0.0f);
  b.corr.assign(b.xsum.size(), 0.0f);
  for (int64_t c = 0; c < nc; ++c) {
    const float* xc = x + c * ce;
    float amax = 0.0f;
    for (int64_t i = 0; i < ce; ++i) amax = std::max(amax, std::fabs(xc[i]));
    const float d = amax / 127.0f, inv = amax > 0.0f ? 127.0f / amax : 0.0f;
    int32_t isum = 0;
    int8_t* qc = b.q.data() + c * ce;
    for (int64_t i = 0; i < ce; ++i) {
      const int v = static_cast<int>(std::nearbyint(xc[i] * inv));
      const int8_t q = static_cast<int8_t>(std::clamp(v, -127, 127));
      isum += q;
      qc[nib ? ((i & 1) ? 32 + i / 2 : i / 2) : i] = q;
    }
    b.dx[static_cast<size_t>(c)] = d;
    if (kind == kAffine8) b.corr[static_cast<size_t>(c * ce / G)] += 128.0f * d * isum;
  }
  for (int64_t g = 0; g < ng; ++g) {
    float s = 0.0f;
    for (int64_t i = 0; i < G; ++i) s += x[g * G + i];
    b.xsum[static_cast<size_t>(g)] = s;
  }
}

HWY_INLINE float HSum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// Symmetric int8 and 4-bit with G = 32 (a chunk spans two groups): y[k * step] for the R rows
// r0 + k * step, scaling each group's sum once at its end.
template <int R, Kind K>
HWY_INLINE void RowsQ(const WeightMatrix& w, const XQ& xb, int64_t r0, int64_t step, float* y) {
  const int64_t cols = w.cols, G = w.group_size, ng = w.groups();
  const int64_t row_bytes = K == kInt8 ? cols : cols * w.bits / 8;
  // Chunks (32 bytes) per group; one chunk spans two groups for 4-bit with G = 32.
  static_assert(K == kInt8 || K == kAffine4G32);
  const int64_t cpg = K == kAffine4G32 ? 1 : G / 32;
  const uint8_t* wp[R];
  int64_t srow[R];
  __m256 acc[R];
  float tail[R];
  for (int k = 0; k < R; ++k) {
    wp[k] = static_cast<const uint8_t*>(w.data) + (r0 + k * step) * row_bytes;
    srow[k] = (r0 + k * step) * ng;
    acc[k] = _mm256_setzero_ps();
    tail[k] = 0.0f;
  }
  const __m256i m0f = _mm256_set1_epi8(0x0f), ones = _mm256_set1_epi16(1);
  const int8_t* xq = xb.q.data();
  int64_t c = 0;
  for (int64_t g = 0; g < ng; g += (K == kAffine4G32 ? 2 : 1)) {
    __m256 gacc[R];
    for (int k = 0; k < R; ++k) gacc[k] = _mm256_setzero_ps();
    for (int64_t j = 0; j < cpg; ++j, ++c) {
      const __m256 dxv = _mm256_set1_ps(xb.dx[static_cast<size_t>(c)]);
      if constexpr (K == kAffine4G32) {
        const __m256i xe = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + c * 64));
        const __m256i xo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + c * 64 + 32));
        for (int k = 0; k < R; ++k) {
          if ((c & 1) == 0) {
            _mm_prefetch(reinterpret_cast<const char*>(wp[k] + c * 32 + kPrefetchBytes),
                         _MM_HINT_T0);
          }
          const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wp[k] + c * 32));
          const __m256i lo = _mm256_and_si256(raw, m0f);
          const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), m0f);
          const __m256i p =
              _mm256_add_epi16(_mm256_maddubs_epi16(lo, xe), _mm256_maddubs_epi16(hi, xo));
          gacc[k] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_madd_epi16(p, ones)), dxv, gacc[k]);
        }
      } else {
        const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + c * 32));
        const __m256i ax = _mm256_abs_epi8(xv);
        for (int k = 0; k < R; ++k) {
          if ((c & 1) == 0) {
            _mm_prefetch(reinterpret_cast<const char*>(wp[k] + c * 32 + kPrefetchBytes),
                         _MM_HINT_T0);
          }
          const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wp[k] + c * 32));
          const __m256i p = _mm256_maddubs_epi16(ax, _mm256_sign_epi8(raw, xv));
          gacc[k] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_madd_epi16(p, ones)), dxv, gacc[k]);
        }
      }
    }
    for (int k = 0; k < R; ++k) {
      const float s0 = scale_at(w.scale_dtype, w.scales, srow[k] + g);
      __m256 sv;
      if constexpr (K == kAffine4G32) {
        const float s1 = scale_at(w.scale_dtype, w.scales, srow[k] + g + 1);
        sv = _mm256_insertf128_ps(_mm256_castps128_ps256(_mm_set1_ps(s0)), _mm_set1_ps(s1), 1);
        tail[k] += scale_at(w.scale_dtype, w.biases, srow[k] + g) * xb.xsum[g] +
                   scale_at(w.scale_dtype, w.biases, srow[k] + g + 1) * xb.xsum[g + 1];
      } else {
        sv = _mm256_set1_ps(s0);
      }
      acc[k] = _mm256_fmadd_ps(gacc[k], sv, acc[k]);
    }
  }
  for (int k = 0; k < R; ++k) y[k * step] = HSum(acc[k]) + tail[k];
}

// 8 consecutive scales (or biases) from entry i, as f32.
HWY_INLINE __m256 Widen8(DType t, const void* p, int64_t i) {
  if (t == DType::F32) return _mm256_loadu_ps(static_cast<const float*>(p) + i);
  const __m128i h =
      _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(p) + i));
  if (t == DType::F16) return _mm256_cvtph_ps(h);
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

// MLX affine with whole chunks per group (4-bit G >= 64, 8-bit G >= 32): the hot loop for
// published MLX checkpoints. Per block of 8 chunks and row, one vector holds each chunk's
// (weight scale × x scale), so a chunk costs one lane broadcast (vpermps) and one FMA on top
// of its integer dot product; the bias (and 8-bit's 128 · Σx̃) terms are two short dot products
// per row at the end. No scalar work per group.
template <int R, int BITS>
HWY_INLINE void RowsAffine(const WeightMatrix& w, const XQ& xb, int64_t r0, int64_t step,
                           float* y) {
  const int64_t cols = w.cols, ng = w.groups(), row_bytes = cols * BITS / 8, nc = row_bytes / 32;
  const int64_t cpg = w.group_size * BITS / 8 / 32;  // 1, 2 or 4
  const DType sd = w.scale_dtype;
  const int64_t total = w.rows * ng;
  const uint8_t* wp[R];
  int64_t srow[R];
  __m256 acc[R];
  for (int k = 0; k < R; ++k) {
    wp[k] = static_cast<const uint8_t*>(w.data) + (r0 + k * step) * row_bytes;
    srow[k] = (r0 + k * step) * ng;
    acc[k] = _mm256_setzero_ps();
  }
  const __m256i m0f = _mm256_set1_epi8(0x0f), ones = _mm256_set1_epi16(1);
  const __m256i m80 = _mm256_set1_epi8(static_cast<char>(0x80));
  // Lane j of the block takes the scale of group j / cpg.
  const __m256i expand = cpg == 1   ? _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)
                         : cpg == 2 ? _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3)
                                    : _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1);
  const int8_t* xq = xb.q.data();
  const float* dx = xb.dx.data();
  for (int64_t c0 = 0; c0 < nc; c0 += 8) {
    const int64_t n = std::min<int64_t>(8, nc - c0), g0 = c0 / cpg;
    __m256 S[R];
    for (int k = 0; k < R; ++k) {
      // Eight scales from g0 on: past this row's last group they are the next row's, which
      // only meet lanes of chunks this row does not have (dx is zero-padded); the last
      // rows, where that would read past the table, fill the vector one by one.
      if (srow[k] + g0 + 8 <= total) {
        S[k] = _mm256_mul_ps(_mm256_permutevar8x32_ps(Widen8(sd, w.scales, srow[k] + g0), expand),
                             _mm256_loadu_ps(dx + c0));
      } else {
        alignas(32) float t[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        for (int64_t j = 0; j < n; ++j) {
          t[j] = scale_at(sd, w.scales, srow[k] + (c0 + j) / cpg) * dx[c0 + j];
        }
        S[k] = _mm256_load_ps(t);
      }
    }
    for (int64_t j = 0; j < n; ++j) {
      const int64_t c = c0 + j;
      const __m256i lane = _mm256_set1_epi32(static_cast<int>(j));
      if constexpr (BITS == 4) {
        const __m256i xe = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + c * 64));
        const __m256i xo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + c * 64 + 32));
        for (int k = 0; k < R; ++k) {
          if ((c & 1) == 0) {
            _mm_prefetch(reinterpret_cast<const char*>(wp[k] + c * 32 + kPrefetchBytes),
                         _MM_HINT_T0);
          }
          const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wp[k] + c * 32));
          const __m256i lo = _mm256_and_si256(raw, m0f);
          const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), m0f);
          const __m256i p =
              _mm256_add_epi16(_mm256_maddubs_epi16(lo, xe), _mm256_maddubs_epi16(hi, xo));
          acc[k] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_madd_epi16(p, ones)),
                                   _mm256_permutevar8x32_ps(S[k], lane), acc[k]);
        }
      } else {
        const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + c * 32));
        for (int k = 0; k < R; ++k) {
          if ((c & 1) == 0) {
            _mm_prefetch(reinterpret_cast<const char*>(wp[k] + c * 32 + kPrefetchBytes),
                         _MM_HINT_T0);
          }
          const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wp[k] + c * 32));
          const __m256i qs = _mm256_xor_si256(raw, m80);
          const __m256i p = _mm256_maddubs_epi16(_mm256_abs_epi8(qs), _mm256_sign_epi8(xv, qs));
          acc[k] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_madd_epi16(p, ones)),
                                   _mm256_permutevar8x32_ps(S[k], lane), acc[k]);
        }
      }
    }
  }
  // Σ_g bias_g · Σx_g (+ scale_g · 128 Σx̃_g at 8 bits).
  const float* xs = xb.xsum.data();
  const float* corr = xb.corr.data();
  for (int k = 0; k < R; ++k) {
    __m256 t = _mm256_setzero_ps();
    int64_t g = 0;
    // As above: lanes past this row's groups meet zero padding of xsum and corr.
    for (; g < ng && srow[k] + g + 8 <= total; g += 8) {
      t = _mm256_fmadd_ps(Widen8(sd, w.biases, srow[k] + g), _mm256_loadu_ps(xs + g), t);
      if constexpr (BITS == 8) {
        t = _mm256_fmadd_ps(Widen8(sd, w.scales, srow[k] + g), _mm256_loadu_ps(corr + g), t);
      }
    }
    float tail = 0.0f;
    for (; g < ng; ++g) {
      tail += scale_at(sd, w.biases, srow[k] + g) * xs[g];
      if constexpr (BITS == 8) tail += scale_at(sd, w.scales, srow[k] + g) * corr[g];
    }
    y[k * step] = HSum(_mm256_add_ps(acc[k], t)) + tail;
  }
}

template <int BITS>
void RunAffine(const WeightMatrix& w, const XQ& xb, float* y) {
#pragma omp parallel
  ForThreadRowsQ(w.rows, [&]<int R>(std::integral_constant<int, R>, int64_t r, int64_t q) {
    RowsAffine<R, BITS>(w, xb, r, q, y + r);
  });
}

template <Kind K>
void RunQ(const WeightMatrix& w, const XQ& xb, float* y) {
#pragma omp parallel
  ForThreadRowsQ(w.rows, [&]<int R>(std::integral_constant<int, R>, int64_t r, int64_t q) {
    RowsQ<R, K>(w, xb, r, q, y + r);
  });
}

void QMatvec(const WeightMatrix& w, const float* x, float* y) {
  Kind kind;
  bool tiles;
  if (w.dtype == DType::I8) {
    kind = kInt8;
    tiles = w.group_size % 32 == 0;
  } else if (w.bits == 8) {
    kind = kAffine8;
    tiles = w.group_size % 32 == 0;
  } else {
    kind = w.group_size == 32 ? kAffine4G32 : kAffine4;
    tiles = w.group_size % 64 == 0 || (w.group_size == 32 && w.cols % 64 == 0);
  }
  if (!tiles) {
    qmatvec_exact(w, x, y);
    return;
  }
  thread_local XQ xb;
  PrepareX(w, kind, x, xb);
  switch (kind) {
    case kInt8:
      RunQ<kInt8>(w, xb, y);
      return;
    case kAffine8:
      RunAffine<8>(w, xb, y);
      return;
    case kAffine4:
      RunAffine<4>(w, xb, y);
      return;
    case kAffine4G32:
      RunQ<kAffine4G32>(w, xb, y);
      return;
  }
}

#else

void QMatvec(const WeightMatrix& w, const float* x, float* y) {
  qmatvec_exact(w, x, y);
}

#endif

}  // namespace HWY_NAMESPACE
}  // namespace molt
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace molt {

HWY_EXPORT(QMatvec);

void qmatvec_dispatch(const WeightMatrix& w, const float* x, float* y) {
  HWY_DYNAMIC_DISPATCH(QMatvec)(w, x, y);
}

}  // namespace molt
#endif  // HWY_ONCE
