// Fused-dequantisation matvec for quantised weights, compiled once per CPU target by Highway
// and dispatched at run time.
//
// Decode reads every weight once per token, so at 4 or 8 bits per weight the arithmetic per
// byte is what limits speed: widening each weight to f32 costs about 4 vector ops per 8
// weights, more than two Zen 3 cores can issue at memory speed. On x86 with AVX2 the kernel
// instead rounds x to int8 once per call (one f32 scale per 32-byte chunk of weights: 32
// inputs at 8 bits, 64 at 4 bits; per two chunks at 8 bits when the groups are 64 or more, so
// their integer sums add before the conversion) and sums weight × x products in integers with
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
// On CPUs with AVX-512 VNNI (checked at run time; the AVX3 target compiles those kernels with the
// one extra feature) MLX weights take 512-bit kernels built on vpdpbusd: RowsAffineW for the
// MLX layout at 4 and 8 bits, Blocks8W for 4-bit rows by 8.
//
// Other targets (NEON, SVE, SSE4, EMU128, ...) take a portable kernel in Highway ops with the same
// int8 rounding of x and the same integer sums (below); shapes the chunks do not tile take an
// exact f32 path.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/qmatvec.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
// Must follow foreach_target.h.
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "hwy/highway.h"
#include "kernels/qmatvec.h"
#include "molt/common/dtype.h"
#include "molt/kernels/quant.h"
#include "molt/kernels/team.h"

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
// Only the x86 AVX2 / AVX-512 kernels below use it: the other targets this file is compiled
// for (foreach_target.h) leave it unused.
[[maybe_unused]] constexpr int64_t kPrefetchBytes = 768;

// Rows are dealt out in blocks, first come first served (inside a parallel region, no
// barrier at the end): with a static half each, one core finishing late (its memory slower for
// a moment, or a neighbour's interrupt) left the other spinning at every one of the ~120 joins
// per token, ~14% of the cycles of 4-bit decode. Each block is about 1/4 of a thread's share
// (1/8 measured a few % slower: each block restarts its streams) and is read as S (kStreams
// unless a kernel says otherwise) streams of consecutive rows.
template <int S = kStreams, class Rows>
HWY_INLINE void ForThreadRowsQ(int64_t rows, const Rows& rows_fn) {
  const int64_t nt = omp_get_num_threads();
  const int64_t block = std::max<int64_t>(4 * S, (rows + 4 * nt - 1) / (4 * nt));
  const int64_t blocks = (rows + block - 1) / block;
#pragma omp for schedule(dynamic, 1) nowait
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t r0 = b * block, r1 = std::min(rows, r0 + block);
    const int64_t q = (r1 - r0) / S;
    for (int64_t i = 0; i < q; ++i) {
      rows_fn(std::integral_constant<int, S>(), r0 + i, q);
    }
    for (int64_t r = r0 + S * q; r < r1; ++r) {
      rows_fn(std::integral_constant<int, 1>(), r, 0);
    }
  }
}

#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2

// kAffine8P: 8-bit with groups of 64 or more, where x gets one scale per 64 inputs so that two
// chunks' integer sums add before the one conversion and scaling (7 vector ops per chunk, not 8).
// kAffine4R8 / kAffine8R8: rows interleaved in blocks of 8 (WeightMatrix::rows8).
enum Kind {
  kInt8 = 0,
  kAffine8 = 1,
  kAffine4 = 2,
  kAffine4G32 = 3,
  kAffine8P = 4,
  kAffine4R8 = 5,
  kAffine8R8 = 6,
  kAffine4W = 7,    // kAffine4 on AVX-512 VNNI, two chunks per 512-bit vector (RowsAffineW)
  kAffine4R8W = 8,  // kAffine4R8 on AVX-512 VNNI (Blocks8W)
  kAffine8W = 9     // kAffine8P on AVX-512 VNNI (RowsAffineW<R, 8>)
};

// Inputs per x scale: 64 for 4-bit (a 32-byte chunk) and for 8-bit whose groups hold 64 or
// more (two chunks' integer sums add before one conversion), else 32.
HWY_INLINE int64_t XBlock(Kind kind, int64_t group_size) {
  switch (kind) {
    case kAffine4:
    case kAffine4G32:
    case kAffine4R8:
    case kAffine4W:
    case kAffine4R8W:
    case kAffine8P:
    case kAffine8W:
      return 64;
    case kAffine8R8:
      return group_size % 64 == 0 ? 64 : 32;
    default:
      return 32;
  }
}

// x rounded to int8 for one call: q (permuted for 4-bit: per 64 inputs the 32 even ones, then
// the 32 odd ones; for kAffine4W per 128 inputs the even ones of both chunks, then the odd ones;
// for kAffine4R8 per 8 inputs (one packed word) the 4 even, then the 4 odd),
// one scale per 32-byte weight chunk,
// and per weight group the exact Σ x and (8-bit affine) 128 · Σ x̃.
struct XQ {
  std::vector<int8_t> q;
  std::vector<float> dx, xsum, corr;
};

// |v| over 8k floats, as a broadcast-ready scalar.
HWY_INLINE float AbsMax(const __m256* v, int n) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  __m256 m = _mm256_andnot_ps(sign, v[0]);
  for (int i = 1; i < n; ++i) m = _mm256_max_ps(m, _mm256_andnot_ps(sign, v[i]));
  __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
  h = _mm_max_ps(h, _mm_movehl_ps(h, h));
  h = _mm_max_ss(h, _mm_movehdup_ps(h));
  return _mm_cvtss_f32(h);
}

// 32 floats (4 vectors) times inv, rounded to nearest even (as std::nearbyint) and stored in
// order as int8 at dst; returns the int32 sums of the four vectors' lanes.
HWY_INLINE __m256i Round32(const __m256* v, __m256 inv, int8_t* dst) {
  const __m256i i0 = _mm256_cvtps_epi32(_mm256_mul_ps(v[0], inv));
  const __m256i i1 = _mm256_cvtps_epi32(_mm256_mul_ps(v[1], inv));
  const __m256i i2 = _mm256_cvtps_epi32(_mm256_mul_ps(v[2], inv));
  const __m256i i3 = _mm256_cvtps_epi32(_mm256_mul_ps(v[3], inv));
  // packs works within 128-bit lanes: the 4-byte groups come out as i0 i1 i2 i3 (low halves)
  // then i0 i1 i2 i3 (high halves); one permute puts them back in order. |v · inv| <= 127.
  const __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(i0, i1), _mm256_packs_epi32(i2, i3));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst),
                      _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
  return _mm256_add_epi32(_mm256_add_epi32(i0, i1), _mm256_add_epi32(i2, i3));
}

HWY_INLINE float HSum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

HWY_INLINE int32_t HSumI(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
  return _mm_cvtsi128_si32(s);
}

// Rounds x to int8 once per call (it runs on one thread while the other waits, so it is
// vectorised too). 4-bit chunks of 64 inputs are split into even and odd inputs first.
void PrepareX(const WeightMatrix& w, Kind kind, const float* x, XQ& b) {
  const bool nib = kind == kAffine4 || kind == kAffine4G32 || kind == kAffine4R8 ||
                   kind == kAffine4W || kind == kAffine4R8W;
  const int64_t ce = XBlock(kind, w.group_size), nc = w.cols / ce, G = w.group_size;
  const int64_t ng = w.groups();
  // dx, xsum and corr are zero-padded to whole vectors of 8 (read 8 at a time).
  b.q.resize(static_cast<size_t>(w.cols));
  b.dx.assign(static_cast<size_t>((nc + 7) / 8 * 8), 0.0f);
  b.xsum.assign(static_cast<size_t>((ng + 7) / 8 * 8), 0.0f);
  b.corr.assign(b.xsum.size(), 0.0f);
  for (int64_t c = 0; c < nc; ++c) {
    const float* xc = x + c * ce;
    int8_t* qc = b.q.data() + c * ce;
    __m256 v[8];
    const int nv = static_cast<int>(ce / 8);
    for (int i = 0; i < nv; ++i) v[i] = _mm256_loadu_ps(xc + 8 * i);
    const float amax = AbsMax(v, nv);
    const float d = amax / 127.0f, inv = amax > 0.0f ? 127.0f / amax : 0.0f;
    const __m256 vinv = _mm256_set1_ps(inv);
    b.dx[static_cast<size_t>(c)] = d;
    if (nib) {
      // Even inputs meet the low nibbles, odd ones the high nibbles.
      __m256 ev[4], od[4];
      for (int i = 0; i < 4; ++i) {
        const __m256 e = _mm256_shuffle_ps(v[2 * i], v[2 * i + 1], _MM_SHUFFLE(2, 0, 2, 0));
        const __m256 o = _mm256_shuffle_ps(v[2 * i], v[2 * i + 1], _MM_SHUFFLE(3, 1, 3, 1));
        ev[i] = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(e), 0xd8));
        od[i] = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(o), 0xd8));
      }
      if (kind == kAffine4R8 || kind == kAffine4R8W) {
        alignas(32) int8_t t[64];
        Round32(ev, vinv, t);
        Round32(od, vinv, t + 32);
        for (int j = 0; j < 8; ++j) {
          std::memcpy(qc + 8 * j, t + 4 * j, 4);
          std::memcpy(qc + 8 * j + 4, t + 32 + 4 * j, 4);
        }
      } else if (kind == kAffine4W) {
        int8_t* qe = b.q.data() + (c / 2) * 128 + (c % 2) * 32;
        Round32(ev, vinv, qe);
        Round32(od, vinv, qe + 64);
      } else {
        Round32(ev, vinv, qc);
        Round32(od, vinv, qc + 32);
      }
    } else {
      __m256i sum = Round32(v, vinv, qc);
      if (ce == 64) sum = _mm256_add_epi32(sum, Round32(v + 4, vinv, qc + 32));
      if (kind != kInt8) b.corr[static_cast<size_t>(c * ce / G)] += 128.0f * d * HSumI(sum);
    }
  }
  // Σx per group (G a multiple of 32) in 16 lanes, then across them. One float summed after
  // another was one 4-cycle add per input on the thread the other waits for: ~1 us of a call at
  // 896 inputs, ~5 us at 4864 (Zen 5, 2 cores: 0.5B 4-bit decode +3% median, 4 of 5 alternating
  // pairs faster; 1.5B no change beyond the noise in 6).
  for (int64_t g = 0; g < ng; ++g) {
    const float* xg = x + g * G;
    __m256 a0 = _mm256_setzero_ps(), a1 = a0;
    for (int64_t i = 0; i < G; i += 16) {
      a0 = _mm256_add_ps(a0, _mm256_loadu_ps(xg + i));
      a1 = _mm256_add_ps(a1, _mm256_loadu_ps(xg + i + 8));
    }
    b.xsum[static_cast<size_t>(g)] = HSum(_mm256_add_ps(a0, a1));
  }
}

// Scales and biases are two more streams per row stream, 1/16 (8-bit) to 1/8 (4-bit) of the
// weights' bytes at G = 64, and the hardware prefetchers lose them among the weight streams:
// loads of them were ~15% of the 4-bit kernel's cycles. Fetch the tables of the row this
// stream reaches about kPrefetchBytes of weights later.
HWY_INLINE void PrefetchTables(const WeightMatrix& w, int64_t srow, int64_t row_bytes) {
  const int64_t ng = w.groups(), ahead = std::max<int64_t>(1, kPrefetchBytes / row_bytes);
  const int64_t esize = static_cast<int64_t>(dtype_size(w.scale_dtype));
  const int64_t first = (srow + ahead * ng) * esize, bytes = ng * esize;
  const char* sc = static_cast<const char*>(w.scales);
  const char* bi = static_cast<const char*>(w.biases);
  for (int64_t o = first; o < first + bytes + 63; o += 64) {
    _mm_prefetch(sc + o, _MM_HINT_T0);
    if (bi != nullptr) _mm_prefetch(bi + o, _MM_HINT_T0);
  }
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
    PrefetchTables(w, srow[k], row_bytes);
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
        // Explicit FMAs: left to contraction (C++ defaults to -ffp-contract=fast), the form
        // GCC chose differed between R = 1 and R = 4, so a row's result hung on the thread count.
        const float b0 = scale_at(w.scale_dtype, w.biases, srow[k] + g);
        const float b1 = scale_at(w.scale_dtype, w.biases, srow[k] + g + 1);
        tail[k] = std::fma(b1, xb.xsum[g + 1], std::fma(b0, xb.xsum[g], tail[k]));
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

// One chunk (32 bytes of weights) of R rows: the integer dot product with x, converted once
// and scaled by the chunk's combined scale S[k].
template <int R, int BITS, int UNIT>
HWY_INLINE void ChunkAffine(const uint8_t* const* wp, const int8_t* xq, const float* S,
                            int64_t sstride, int64_t c, __m256* acc) {
  const __m256i m0f = _mm256_set1_epi8(0x0f), ones = _mm256_set1_epi16(1);
  const __m256i m80 = _mm256_set1_epi8(static_cast<char>(0x80));
  if constexpr (BITS == 4) {
    const __m256i xe = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + c * 64));
    const __m256i xo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + c * 64 + 32));
    for (int k = 0; k < R; ++k) {
      const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wp[k] + c * 32));
      const __m256i lo = _mm256_and_si256(raw, m0f);
      const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), m0f);
      const __m256i p =
          _mm256_add_epi16(_mm256_maddubs_epi16(lo, xe), _mm256_maddubs_epi16(hi, xo));
      acc[k] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_madd_epi16(p, ones)),
                               _mm256_broadcast_ss(S + k * sstride), acc[k]);
    }
  } else if constexpr (UNIT == 64) {
    const __m256i x0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + c * 64));
    const __m256i x1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + c * 64 + 32));
    for (int k = 0; k < R; ++k) {
      const uint8_t* u = wp[k] + c * 64;
      const __m256i q0 =
          _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(u)), m80);
      const __m256i q1 =
          _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(u + 32)), m80);
      const __m256i p0 = _mm256_maddubs_epi16(_mm256_abs_epi8(q0), _mm256_sign_epi8(x0, q0));
      const __m256i p1 = _mm256_maddubs_epi16(_mm256_abs_epi8(q1), _mm256_sign_epi8(x1, q1));
      const __m256i sum =
          _mm256_add_epi32(_mm256_madd_epi16(p0, ones), _mm256_madd_epi16(p1, ones));
      acc[k] =
          _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum), _mm256_broadcast_ss(S + k * sstride), acc[k]);
    }
  } else {
    const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + c * 32));
    for (int k = 0; k < R; ++k) {
      const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wp[k] + c * 32));
      const __m256i qs = _mm256_xor_si256(raw, m80);
      const __m256i p = _mm256_maddubs_epi16(_mm256_abs_epi8(qs), _mm256_sign_epi8(xv, qs));
      acc[k] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_madd_epi16(p, ones)),
                               _mm256_broadcast_ss(S + k * sstride), acc[k]);
    }
  }
}

// Chunks [c0, c0 + n) of R rows. Kept free of calls and of variable-length inner loops so the
// R accumulators stay in registers: with the scales computed inside this loop (8 chunks at a
// time) GCC kept them on the stack, a store per FMA, and the kernel ran at ~60% of its ceiling.
template <int R, int BITS, int UNIT>
HWY_INLINE void DotAffine(const uint8_t* const* wp, const int8_t* xq, const float* S,
                          int64_t sstride, int64_t c0, int64_t n, __m256* out) {
  __m256 acc[R];
  for (int k = 0; k < R; ++k) acc[k] = out[k];
  // One prefetch per row and 64 bytes of weights.
  constexpr int64_t kStep = UNIT == 64 ? 1 : 2;
  int64_t j = 0;
  for (; j + kStep <= n; j += kStep) {
    const int64_t c = c0 + j;
    for (int k = 0; k < R; ++k) {
      _mm_prefetch(reinterpret_cast<const char*>(wp[k] + c * UNIT + kPrefetchBytes), _MM_HINT_T0);
    }
    ChunkAffine<R, BITS, UNIT>(wp, xq, S + j, sstride, c, acc);
    if constexpr (kStep == 2) ChunkAffine<R, BITS, UNIT>(wp, xq, S + j + 1, sstride, c + 1, acc);
  }
  if (j < n) ChunkAffine<R, BITS, UNIT>(wp, xq, S + j, sstride, c0 + j, acc);
  for (int k = 0; k < R; ++k) out[k] = acc[k];
}

// MLX affine with whole chunks per group (4-bit G >= 64, 8-bit G >= 32): the hot loop for
// published MLX checkpoints. For a segment of up to kSegment chunks, each row's combined
// scales (weight scale × x scale, one per chunk) are computed first, 8 at a time; the dot loop
// then costs one broadcast load and one FMA per chunk on top of the integer dot product. The
// bias (and 8-bit's 128 · Σx̃) terms are two short dot products per row at the end.
// UNIT: bytes of weights per x scale, 32 (a chunk) or 64 (two chunks, 8-bit kAffine8P); the
// "chunks" below are units.
template <int R, int BITS, int UNIT = 32>
HWY_INLINE void RowsAffine(const WeightMatrix& w, const XQ& xb, int64_t r0, int64_t step,
                           float* y) {
  constexpr int64_t kSegment = 64;
  const int64_t cols = w.cols, ng = w.groups(), row_bytes = cols * BITS / 8;
  const int64_t nc = row_bytes / UNIT;
  const int64_t cpg = w.group_size * BITS / 8 / UNIT;  // 1, 2 or 4
  const DType sd = w.scale_dtype;
  const int64_t total = w.rows * ng;
  const uint8_t* wp[R];
  int64_t srow[R];
  __m256 acc[R];
  for (int k = 0; k < R; ++k) {
    wp[k] = static_cast<const uint8_t*>(w.data) + (r0 + k * step) * row_bytes;
    srow[k] = (r0 + k * step) * ng;
    acc[k] = _mm256_setzero_ps();
    PrefetchTables(w, srow[k], row_bytes);
  }
  // Lane j of a block of 8 chunks takes the scale of group j / cpg.
  const __m256i expand = cpg == 1   ? _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)
                         : cpg == 2 ? _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3)
                                    : _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1);
  const float* dx = xb.dx.data();
  alignas(32) float S[R][kSegment];
  for (int64_t s0 = 0; s0 < nc; s0 += kSegment) {
    const int64_t n = std::min(kSegment, nc - s0);
    for (int k = 0; k < R; ++k) {
      for (int64_t c0 = s0; c0 < s0 + n; c0 += 8) {
        const int64_t g0 = c0 / cpg;
        // Eight scales from g0 on: past this row's last group they are the next row's, which
        // only meet lanes of chunks this row does not have (dx is zero-padded); the last
        // rows, where that would read past the table, fill the vector one by one.
        if (srow[k] + g0 + 8 <= total) {
          _mm256_store_ps(
              &S[k][c0 - s0],
              _mm256_mul_ps(_mm256_permutevar8x32_ps(Widen8(sd, w.scales, srow[k] + g0), expand),
                            _mm256_loadu_ps(dx + c0)));
        } else {
          for (int64_t c = c0; c < std::min(c0 + 8, s0 + n); ++c) {
            S[k][c - s0] = scale_at(sd, w.scales, srow[k] + c / cpg) * dx[c];
          }
        }
      }
    }
    DotAffine<R, BITS, UNIT>(wp, xb.q.data(), &S[0][0], kSegment, s0, n, acc);
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

#if HWY_TARGET <= HWY_AVX3
// GCC 12's AVX-512 headers fill the unused operand of several intrinsics with
// _mm512_undefined_*(), which -Wuninitialized reports where they are inlined (GCC bug 105593,
// fixed in GCC 13).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

// Entries [i, i + n) of a scale or bias table (n <= 16) as f32 lanes 0..n-1, zeros after; the
// masked load reads nothing past entry i + n - 1.
HWY_INLINE __m512 Widen16(DType t, const void* p, int64_t i, int64_t n) {
  const __mmask16 m = static_cast<__mmask16>((1u << n) - 1);
  if (t == DType::F32) return _mm512_maskz_loadu_ps(m, static_cast<const float*>(p) + i);
  const __m256i h = _mm256_maskz_loadu_epi16(m, static_cast<const uint16_t*>(p) + i);
  if (t == DType::F16) return _mm512_cvtph_ps(h);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

// kAffine4W / kAffine8W: RowsAffine<R, 4> and RowsAffine<R, 8, 64> for CPUs with AVX-512 VNNI
// (compiled into the AVX3 target with the one extra feature; chosen at run time,
// qmatvec_vnni_enabled). vpdpbusd multiplies and adds u8 × s8 into int32 in one instruction; a
// 512-bit vector holds two 4-bit chunks (128 weights) or one 8-bit unit (64 weights, whose
// q in [0, 255] needs no sign trick here: no int16 step can saturate). At cols 896 a row is only
// 7 chunk pairs, so the per-row work counts as much as the dot loop: the combined scales of 16
// blocks of 64 inputs are one vector per row (masked loads: nothing is read past the row's
// tables), each vector of weights takes its scales from it with one vpermps (the index moves on
// by the blocks it holds, shared by the rows), and the bias term is one FMA per 16 groups.
// Against the AVX2 loop (~11 ops per 4-bit chunk) the hot loop is ~8 ops per chunk pair. The
// integer sums equal the AVX2 loop's (at 8 bits, plus the 128 · Σx̃ it adds back per group); the
// f32 sums are added in another order, so results differ from it by rounding only. Needs
// groups of 64 or 128 and, at 4 bits, cols % 128 == 0 (x is laid out per chunk pair).
template <int R, int BITS>
__attribute__((target("avx512vnni"), noinline)) void RowsAffineW(const WeightMatrix& w,
                                                                 const XQ& xb, int64_t r0,
                                                                 int64_t step, float* y) {
  constexpr int64_t kBlockBytes = 64 * BITS / 8;    // weights of one x scale (64 inputs)
  constexpr int64_t kPerVector = 64 / kBlockBytes;  // such blocks in one vector: 2 or 1
  const int64_t ng = w.groups(), row_bytes = w.cols * BITS / 8, nc = w.cols / 64;
  const int64_t cpg = w.group_size / 64;  // blocks per group: 1 or 2
  const DType sd = w.scale_dtype;
  const uint8_t* wp[R];
  int64_t srow[R];
  __m512 acc[R];
  for (int k = 0; k < R; ++k) {
    wp[k] = static_cast<const uint8_t*>(w.data) + (r0 + k * step) * row_bytes;
    srow[k] = (r0 + k * step) * ng;
    acc[k] = _mm512_setzero_ps();
    PrefetchTables(w, srow[k], row_bytes);
  }
  const __m512i m0f = _mm512_set1_epi8(0x0f), advance = _mm512_set1_epi32(kPerVector);
  // Lane j of 16 blocks' scales: group j / cpg of the 16.
  const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const __m512i expand = cpg == 1 ? lane : _mm512_srli_epi32(lane, 1);
  const int8_t* xq = xb.q.data();
  const float* dx = xb.dx.data();
  for (int64_t c0 = 0; c0 < nc; c0 += 16) {
    const int64_t m = std::min<int64_t>(16, nc - c0);
    const __mmask16 mm = static_cast<__mmask16>((1u << m) - 1);
    const __m512 dxv = _mm512_maskz_loadu_ps(mm, dx + c0);
    __m512 S[R];
    for (int k = 0; k < R; ++k) {
      const int64_t g0 = c0 / cpg, gn = (m + cpg - 1) / cpg;
      __m512 sc = Widen16(sd, w.scales, srow[k] + g0, gn);
      if (cpg > 1) sc = _mm512_permutexvar_ps(expand, sc);
      S[k] = _mm512_mul_ps(sc, dxv);
    }
    // 4 bits: lanes 0-7 take the pair's first chunk's scale, 8-15 its second's; 8 bits: all
    // lanes the unit's.
    __m512i idx = BITS == 4 ? _mm512_srli_epi32(lane, 3) : _mm512_setzero_si512();
    for (int64_t j = 0; j < m; j += kPerVector) {
      const int64_t c = c0 + j;
      const __m512i x0 = _mm512_loadu_si512(xq + c * 64);
      const __m512i x1 = BITS == 4 ? _mm512_loadu_si512(xq + c * 64 + 64) : x0;
      for (int k = 0; k < R; ++k) {
        const uint8_t* p = wp[k] + c * kBlockBytes;
        _mm_prefetch(reinterpret_cast<const char*>(p + kPrefetchBytes), _MM_HINT_T0);
        const __m512i raw = _mm512_loadu_si512(p);
        __m512i sum;
        if constexpr (BITS == 4) {
          const __m512i lo = _mm512_and_si512(raw, m0f);
          const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(raw, 4), m0f);
          sum = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), lo, x0), hi, x1);
        } else {
          sum = _mm512_dpbusd_epi32(_mm512_setzero_si512(), raw, x0);
        }
        acc[k] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), _mm512_permutexvar_ps(idx, S[k]), acc[k]);
      }
      idx = _mm512_add_epi32(idx, advance);
    }
  }
  // Σ_g bias_g · Σx_g, 16 groups at a time.
  const float* xs = xb.xsum.data();
  for (int64_t g = 0; g < ng; g += 16) {
    const int64_t m = std::min<int64_t>(16, ng - g);
    const __m512 xsv = _mm512_maskz_loadu_ps(static_cast<__mmask16>((1u << m) - 1), xs + g);
    for (int k = 0; k < R; ++k) {
      acc[k] = _mm512_fmadd_ps(Widen16(sd, w.biases, srow[k] + g, m), xsv, acc[k]);
    }
  }
  for (int k = 0; k < R; ++k) y[k * step] = _mm512_reduce_add_ps(acc[k]);
}
#pragma GCC diagnostic pop
#endif

// The tables (scales and biases) of consecutive blocks lie back to back, so a stream of blocks
// reads them as two more sequential streams, 8 entries per group each. Prefetching a block's
// whole tables at its start left them bursty (1.2 KB of each at a time for down_proj, 896 x 4864):
// each kernel instead prefetches a line of each as it reaches it, as far ahead of the entries in
// use as its weights' own prefetch runs ahead of the weights. Zen 5, 2 cores, 4-bit: down_proj
// cold ~39 to ~44 GB/s; decode faster in every alternating pair, 0.5B median +4% (5 pairs),
// 1.5B +6% (3); the AVX2 kernel there +1-6% (3); 8-bit no change beyond the noise.
struct Tables8 {
  const char* scales;
  const char* biases;
  int64_t esize = 0;  // bytes per entry
  int64_t ce = 0;     // inputs per chunk
  int64_t group = 0;  // inputs per group
  int64_t ahead = 0;  // table bytes prefetched ahead of the entries in use
  int64_t next = 0;   // table offset (within a block) whose line is prefetched next
};

// The set-up of the rows-by-8 kernels: for NB blocks of 8 rows (b0 + k · step) of `words` packed
// words per row, read in chunks of `ce` inputs with the weights prefetched `pf` bytes ahead: the
// first byte of each block's weights, its first table entry, zeroed accumulators, the first
// lines of its tables, and the table prefetch state (Blocks8Ahead).
template <int NB>
HWY_INLINE Tables8 Blocks8Start(const WeightMatrix& w, int64_t words, int64_t ce, int64_t pf,
                                int64_t b0, int64_t step, const uint8_t** wp, int64_t* t0,
                                __m256* acc) {
  Tables8 t{static_cast<const char*>(w.scales), static_cast<const char*>(w.biases)};
  t.esize = static_cast<int64_t>(dtype_size(w.scale_dtype));
  t.ce = ce;
  t.group = w.group_size;
  // Table bytes per group (8 entries) against weight bytes per group (8 rows x G inputs);
  // at least two lines.
  t.ahead = std::max<int64_t>(128, pf * 8 * t.esize / (w.group_size * w.bits));
  const int64_t ng = w.groups();
  for (int k = 0; k < NB; ++k) {
    const int64_t b = b0 + k * step;
    wp[k] = static_cast<const uint8_t*>(w.data) + b * words * 32;
    t0[k] = b * ng * 8;
    acc[k] = _mm256_setzero_ps();
    for (int64_t o = 0; o < t.ahead; o += 64) {
      _mm_prefetch(t.scales + t0[k] * t.esize + o, _MM_HINT_T0);
      _mm_prefetch(t.biases + t0[k] * t.esize + o, _MM_HINT_T0);
    }
  }
  return t;
}

// Before chunk c: a line of each block's tables for every 64 bytes of entries the chunks have
// reached, `ahead` bytes on (so every line of the stream is fetched once).
template <int NB>
HWY_INLINE void Blocks8Ahead(Tables8& t, const int64_t* t0, int64_t c) {
  const int64_t pos = c * t.ce / t.group * 8 * t.esize;  // chunk c's first entries
  for (; t.next <= pos; t.next += 64) {
    for (int k = 0; k < NB; ++k) {
      const int64_t o = t0[k] * t.esize + t.next + t.ahead;
      _mm_prefetch(t.scales + o, _MM_HINT_T0);
      _mm_prefetch(t.biases + o, _MM_HINT_T0);
    }
  }
}

// 4-bit rows by 8: chunk c's integer sums of the NB blocks' 8 rows, h0 over its first 32 inputs
// and h1 over the last 32, scaled by the rows' group scales times x's scale into acc.
template <int NB>
HWY_INLINE void Blocks8Chunk(const WeightMatrix& w, const XQ& xb, const int64_t* t0, int64_t c,
                             const __m256i* h0, const __m256i* h1, __m256* acc) {
  const DType sd = w.scale_dtype;
  const __m256 dxv = _mm256_set1_ps(xb.dx[static_cast<size_t>(c)]);
  if (w.group_size == 32) {
    // The two halves of the chunk are two groups.
    for (int k = 0; k < NB; ++k) {
      const __m256 s0 = Widen8(sd, w.scales, t0[k] + (2 * c) * 8);
      const __m256 s1 = Widen8(sd, w.scales, t0[k] + (2 * c + 1) * 8);
      acc[k] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(h0[k]), _mm256_mul_ps(s0, dxv), acc[k]);
      acc[k] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(h1[k]), _mm256_mul_ps(s1, dxv), acc[k]);
    }
  } else {
    const int64_t g = c * 64 / w.group_size;
    for (int k = 0; k < NB; ++k) {
      const __m256 sv = Widen8(sd, w.scales, t0[k] + g * 8);
      acc[k] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_add_epi32(h0[k], h1[k])),
                               _mm256_mul_ps(sv, dxv), acc[k]);
    }
  }
}

// 4-bit rows by 8: Σ_g bias_g · Σx_g added, 8 rows at a time, and the NB blocks' results stored.
template <int NB>
HWY_INLINE void Blocks8Finish(const WeightMatrix& w, const XQ& xb, const int64_t* t0, __m256* acc,
                              int64_t step, float* y) {
  for (int64_t g = 0; g < w.groups(); ++g) {
    const __m256 xs = _mm256_set1_ps(xb.xsum[static_cast<size_t>(g)]);
    for (int k = 0; k < NB; ++k) {
      acc[k] = _mm256_fmadd_ps(Widen8(w.scale_dtype, w.biases, t0[k] + g * 8), xs, acc[k]);
    }
  }
  for (int k = 0; k < NB; ++k) _mm256_storeu_ps(y + k * step * 8, acc[k]);
}

// 4-bit with rows interleaved in blocks of 8 (kAffine4R8): one 32-byte vector holds one packed
// word (8 inputs) of each of 8 rows, so vector lane k sums row k and a block of 8 rows ends in
// one vector of 8 results: no horizontal sums, no per-row scale set-up. x comes as one
// broadcast of its 4 even and one of its 4 odd int8 inputs per word. Per 4 words the vpmaddubsw
// products add up in int16 (|15 · 127 · 2| · 2 · 4 = 30480 fits) before one vpmaddwd widens
// them; each chunk of 64 inputs is converted once and scaled by its 8 rows' scales (one 16-byte
// load) times x's scale, and each group adds its 8 biases times Σx. NB blocks far apart are read
// at once (RunBlocks8 says how many).
template <int NB>
HWY_INLINE void Blocks8(const WeightMatrix& w, const XQ& xb, int64_t b0, int64_t step, float* y) {
  const int64_t nc = w.cols / 64;
  const uint8_t* wp[NB];
  int64_t t0[NB];  // first table entry of the block
  __m256 acc[NB];
  constexpr int64_t kPf = 1024;  // prefetch distance along each block's weights, bytes
  Tables8 tables = Blocks8Start<NB>(w, w.cols / 8, 64, kPf, b0, step, wp, t0, acc);
  const __m256i m0f = _mm256_set1_epi8(0x0f), ones = _mm256_set1_epi16(1);
  const int8_t* xq = xb.q.data();
  // The NB blocks' sums over the 4 words (32 inputs) from word j on, as 8 int32 lanes each.
  // x's two broadcasts of a word are loaded where they are used (a broadcast load is a load,
  // not an ALU op, here): held for several words they pushed the accumulators out of the
  // registers.
  auto quad = [&](int64_t j, __m256i* out) HWY_ATTR {
    __m256i s[NB];
    for (int k = 0; k < NB; ++k) {
      const char* p = reinterpret_cast<const char*>(wp[k] + j * 32);
      _mm_prefetch(p + kPf, _MM_HINT_T0);
      _mm_prefetch(p + kPf + 64, _MM_HINT_T0);
      s[k] = _mm256_setzero_si256();
    }
    for (int v = 0; v < 4; ++v) {
      int32_t e, o;
      std::memcpy(&e, xq + (j + v) * 8, 4);
      std::memcpy(&o, xq + (j + v) * 8 + 4, 4);
      const __m256i xe = _mm256_set1_epi32(e), xo = _mm256_set1_epi32(o);
      for (int k = 0; k < NB; ++k) {
        const __m256i raw =
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wp[k] + (j + v) * 32));
        const __m256i lo = _mm256_and_si256(raw, m0f);
        const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), m0f);
        s[k] = _mm256_add_epi16(
            s[k], _mm256_add_epi16(_mm256_maddubs_epi16(lo, xe), _mm256_maddubs_epi16(hi, xo)));
      }
    }
    for (int k = 0; k < NB; ++k) out[k] = _mm256_madd_epi16(s[k], ones);
  };
  for (int64_t c = 0; c < nc; ++c) {
    Blocks8Ahead<NB>(tables, t0, c);
    __m256i h0[NB], h1[NB];
    quad(c * 8, h0);
    quad(c * 8 + 4, h1);
    Blocks8Chunk<NB>(w, xb, t0, c, h0, h1, acc);
  }
  Blocks8Finish<NB>(w, xb, t0, acc, step, y);
}

// 8-bit with rows interleaved in blocks of 8 (kAffine8R8): as Blocks8, one vector holds one
// word (4 inputs) of each of 8 rows. q in [0, 255] runs as q - 128 with the sign trick (as
// RowsAffine) and 128 · Σx̃ per group comes back through the scales; the vpmaddubsw pairs
// (up to 2 · 128 · 127) leave no room to add in int16, so each widens at once.
template <int NB>
HWY_INLINE void Blocks8Q8(const WeightMatrix& w, const XQ& xb, int64_t b0, int64_t step, float* y) {
  const int64_t ng = w.groups(), G = w.group_size;
  const int64_t ce = XBlock(kAffine8R8, G), nc = w.cols / ce, vpc = ce / 4;
  const DType sd = w.scale_dtype;
  const uint8_t* wp[NB];
  int64_t t0[NB];
  __m256 acc[NB];
  constexpr int64_t kPf = 1024;
  Tables8 tables = Blocks8Start<NB>(w, w.cols / 4, ce, kPf, b0, step, wp, t0, acc);
  const __m256i ones = _mm256_set1_epi16(1), m80 = _mm256_set1_epi8(static_cast<char>(0x80));
  const int8_t* xq = xb.q.data();
  for (int64_t c = 0; c < nc; ++c) {
    Blocks8Ahead<NB>(tables, t0, c);
    const __m256 dxv = _mm256_set1_ps(xb.dx[static_cast<size_t>(c)]);
    __m256i s[NB];
    for (int k = 0; k < NB; ++k) s[k] = _mm256_setzero_si256();
    for (int64_t v = 0; v < vpc; ++v) {
      const int64_t j = c * vpc + v;
      int32_t xv;
      std::memcpy(&xv, xq + j * 4, 4);
      const __m256i xb4 = _mm256_set1_epi32(xv);
      for (int k = 0; k < NB; ++k) {
        if ((v & 1) == 0) {
          _mm_prefetch(reinterpret_cast<const char*>(wp[k] + j * 32 + kPf), _MM_HINT_T0);
        }
        const __m256i qs = _mm256_xor_si256(
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wp[k] + j * 32)), m80);
        const __m256i p = _mm256_maddubs_epi16(_mm256_abs_epi8(qs), _mm256_sign_epi8(xb4, qs));
        s[k] = _mm256_add_epi32(s[k], _mm256_madd_epi16(p, ones));
      }
    }
    const int64_t g = c * ce / G;
    for (int k = 0; k < NB; ++k) {
      const __m256 sv = Widen8(sd, w.scales, t0[k] + g * 8);
      acc[k] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s[k]), _mm256_mul_ps(sv, dxv), acc[k]);
    }
  }
  // Σ_g bias_g · Σx_g + scale_g · 128 Σx̃_g, 8 rows at a time.
  for (int64_t g = 0; g < ng; ++g) {
    const __m256 xs = _mm256_set1_ps(xb.xsum[static_cast<size_t>(g)]);
    const __m256 cr = _mm256_set1_ps(xb.corr[static_cast<size_t>(g)]);
    for (int k = 0; k < NB; ++k) {
      acc[k] = _mm256_fmadd_ps(Widen8(sd, w.biases, t0[k] + g * 8), xs, acc[k]);
      acc[k] = _mm256_fmadd_ps(Widen8(sd, w.scales, t0[k] + g * 8), cr, acc[k]);
    }
  }
  for (int k = 0; k < NB; ++k) _mm256_storeu_ps(y + k * step * 8, acc[k]);
}

#if HWY_TARGET <= HWY_AVX3
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
// kAffine4R8W: Blocks8 on AVX-512 VNNI. A 512-bit vector holds two consecutive words of the 8 rows
// (lanes 0-7 word j, 8-15 word j + 1); x's even and odd int8 inputs of both words come from one
// 16-byte load and two vpermd (shared by the NB blocks); vpdpbusd adds the products straight into
// int32, in two chains per block (low and high nibbles) so that the latency of one does not hold
// up the loop. Each half chunk (32 inputs) folds its two words' lanes into 8 rows' sums; the
// integer sums per row and group, and what follows them, are Blocks8's: the results are equal
// bit for bit.
template <int NB>
__attribute__((target("avx512vnni"), noinline)) void Blocks8W(const WeightMatrix& w, const XQ& xb,
                                                              int64_t b0, int64_t step, float* y) {
  const int64_t nc = w.cols / 64;
  const uint8_t* wp[NB];
  int64_t t0[NB];
  __m256 acc[NB];
  // Prefetch distance along each block's weights: twice Blocks8's. On a Zen 5 (2 cores, ~70 GB/s
  // triad) with 3 streams, 0.5B decode went from ~140 to ~150 tok/s against 1024 (4 alternating
  // rounds; 3072 about as fast, 1536 and 4096 slower).
  constexpr int64_t kPf = 2048;
  Tables8 tables = Blocks8Start<NB>(w, w.cols / 8, 64, kPf, b0, step, wp, t0, acc);
  const __m512i m0f = _mm512_set1_epi8(0x0f);
  const __m512i ie = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 2, 2, 2, 2, 2, 2, 2, 2);
  const __m512i io = _mm512_setr_epi32(1, 1, 1, 1, 1, 1, 1, 1, 3, 3, 3, 3, 3, 3, 3, 3);
  const int8_t* xq = xb.q.data();
  // The NB blocks' int32 sums over the 4 words (32 inputs) from word j on, 8 rows each.
  auto half = [&](int64_t j, __m256i * out) __attribute__((target("avx512vnni"))) {
    __m512i se[NB], so[NB];
    for (int k = 0; k < NB; ++k) se[k] = so[k] = _mm512_setzero_si512();
    for (int64_t v = j; v < j + 4; v += 2) {
      const __m512i x4 =
          _mm512_castsi128_si512(_mm_loadu_si128(reinterpret_cast<const __m128i*>(xq + v * 8)));
      const __m512i xe = _mm512_permutexvar_epi32(ie, x4), xo = _mm512_permutexvar_epi32(io, x4);
      for (int k = 0; k < NB; ++k) {
        const char* p = reinterpret_cast<const char*>(wp[k] + v * 32);
        _mm_prefetch(p + kPf, _MM_HINT_T0);
        const __m512i raw = _mm512_loadu_si512(p);
        se[k] = _mm512_dpbusd_epi32(se[k], _mm512_and_si512(raw, m0f), xe);
        so[k] = _mm512_dpbusd_epi32(so[k], _mm512_and_si512(_mm512_srli_epi16(raw, 4), m0f), xo);
      }
    }
    for (int k = 0; k < NB; ++k) {
      const __m512i t = _mm512_add_epi32(se[k], so[k]);
      out[k] = _mm256_add_epi32(_mm512_castsi512_si256(t), _mm512_extracti64x4_epi64(t, 1));
    }
  };
  for (int64_t c = 0; c < nc; ++c) {
    Blocks8Ahead<NB>(tables, t0, c);
    __m256i h0[NB], h1[NB];
    half(c * 8, h0);
    half(c * 8 + 4, h1);
    Blocks8Chunk<NB>(w, xb, t0, c, h0, h1, acc);
  }
  Blocks8Finish<NB>(w, xb, t0, acc, step, y);
}
#pragma GCC diagnostic pop
#endif

// Batched decode (nv vectors, one per sequence): each row step runs the one-vector kernel once per
// vector, so the step's weights come from memory once and from L1 for the other vectors, and
// every result equals the one-vector one bit for bit (the integer dot products are not shared).

// The ranges a rows-by-8 matrix is dealt out in: each thread's share (blocks · t / nt up to
// blocks · (t + 1) / nt) is cut into ranges that halve. Range j of a share with `left` blocks not
// yet dealt out is about half of them (whole streams of S blocks), or all of them once they are
// at most 2 · S, or at the last of kRanges8PerThread ranges (the claim flags RunBlocks8 is given
// are sized by the same constant). Long first ranges keep the streams long; short last ones leave
// little for the other thread to wait on at the join.
constexpr int64_t kRanges8PerThread = 16;
template <int S>
HWY_INLINE int64_t Range8(int64_t left, int64_t j) {
  if (left <= 2 * S || j == kRanges8PerThread - 1) return left;
  return (left / 2 + S - 1) / S * S;
}

// Range flags RunBlocks8 claims, per matrix of one call: one per range Range8 can make for each
// thread of the largest team, cleared by the caller.
HWY_INLINE int64_t ClaimsPerMatrix() {
  return kRanges8PerThread * static_cast<int64_t>(omp_get_max_threads());
}

// This thread's share of y = W x for rows interleaved by 8: blocks of 8 rows dealt out in the
// ranges Range8 makes, each read as S far-apart streams of blocks. Thread t walks its own ranges
// and then on through the other threads' (wrapping), taking each range no thread has claimed yet
// (`claims`, one flag per range): the threads begin far apart in the matrix, as a static split
// puts them, one that finishes early takes over what another has not reached, and as the ranges
// get shorter towards the end of each share, they finish close together. Zen 5, 2 cores, against
// 4 equal ranges per thread (the master thread then spent ~12% of a 0.5B token waiting in
// libgomp, ~9.5% after): VNNI 0.5B decode +4.5-7% in 3 ABBA rounds (4 more, in a slower hour:
// -1.5 to +5.3%, median +1.9%), 1.5B +1.3-2.9% in 7; AVX2 0.5B +2-4% in 2; 8-bit 0.5B +8-12% in
// 2. With ranges first come first served (all threads side by side), 0.5B
// decode -5% (median of 5 alternating pairs), 1.5B -3% (4); the static split
// itself left one core spinning at every join whenever the other ran late. The 4-bit kernels read
// 3 streams. AVX2, on a Zen 3 (2 cores) against 2: 0.5B decode +0-5% in 7 alternating pairs
// (median +4%), 1.5B x bound +3-18% in 4, in cache +6%; 4 streams measured slower than 2
// (molt_quant_bench, cold and in cache). VNNI, on a Zen 5 (2 cores) with its prefetch at 2048
// against 2 streams at 1024: 0.5B decode +3-24% in 5 alternating pairs (median +12%), 1.5B +7-17%
// in 4; 4 streams no faster than 3. 8-bit keeps 2.
// K: kAffine4R8, kAffine8R8 or kAffine4R8W.
template <Kind K>
void RunBlocks8(const WeightMatrix& w, const XQ* xb, int64_t nv, float* y, uint8_t* claims) {
  constexpr int S = K == kAffine8R8 ? 2 : 3;
  const int64_t blocks = w.rows / 8, nt = omp_get_num_threads();
  auto run = [&]<int NB>(std::integral_constant<int, NB>, int64_t b, int64_t step) {
    for (int64_t v = 0; v < nv; ++v) {
      float* yv = y + v * w.rows + b * 8;
      if constexpr (K == kAffine4R8) {
        Blocks8<NB>(w, xb[v], b, step, yv);
      } else if constexpr (K == kAffine4R8W) {
#if HWY_TARGET <= HWY_AVX3
        Blocks8W<NB>(w, xb[v], b, step, yv);
#endif
      } else {
        Blocks8Q8<NB>(w, xb[v], b, step, yv);
      }
    }
  };
  const int64_t t = omp_get_thread_num();
  for (int64_t du = 0; du < nt; ++du) {
    const int64_t u = t + du < nt ? t + du : t + du - nt, end = (u + 1) * blocks / nt;
    int64_t b0 = u * blocks / nt;
    for (int64_t j = 0; b0 < end; ++j) {
      const int64_t b1 = b0 + Range8<S>(end - b0, j), q = (b1 - b0) / S;
      std::atomic_ref<uint8_t> claim(claims[u * kRanges8PerThread + j]);
      if (claim.load(std::memory_order_relaxed) == 0 &&
          claim.exchange(1, std::memory_order_relaxed) == 0) {
        for (int64_t b = b0; b < b0 + q; ++b) run(std::integral_constant<int, S>(), b, q);
        for (int64_t b = b0 + S * q; b < b1; ++b) run(std::integral_constant<int, 1>(), b, 0);
      }
      b0 = b1;
    }
  }
}

// This thread's share of y = W x (called inside a parallel region).
template <int BITS, int UNIT = 32>
void RunAffine(const WeightMatrix& w, const XQ* xb, int64_t nv, float* y) {
  ForThreadRowsQ(w.rows, [&]<int R>(std::integral_constant<int, R>, int64_t r, int64_t q) {
    for (int64_t v = 0; v < nv; ++v) RowsAffine<R, BITS, UNIT>(w, xb[v], r, q, y + v * w.rows + r);
  });
}

#if HWY_TARGET <= HWY_AVX3
// Eight far-apart rows per step (ForThreadRowsQ's streams): against four, ~+10% GB/s at
// 4864 x 896 and above, cold, 2 threads (the faster loop keeps more lines in flight).
// Consecutive rows (one stream per thread) measured ~35% slower.
template <int BITS>
void RunAffineW(const WeightMatrix& w, const XQ* xb, int64_t nv, float* y) {
  ForThreadRowsQ<8>(w.rows, [&]<int R>(std::integral_constant<int, R>, int64_t r, int64_t q) {
    for (int64_t v = 0; v < nv; ++v) RowsAffineW<R, BITS>(w, xb[v], r, q, y + v * w.rows + r);
  });
}
#endif

template <Kind K>
void RunQ(const WeightMatrix& w, const XQ* xb, int64_t nv, float* y) {
  ForThreadRowsQ(w.rows, [&]<int R>(std::integral_constant<int, R>, int64_t r, int64_t q) {
    for (int64_t v = 0; v < nv; ++v) RowsQ<R, K>(w, xb[v], r, q, y + v * w.rows + r);
  });
}

// The SIMD kind of a checked W, or false when its groups do not tile 32-byte chunks.
bool KindOf(const WeightMatrix& w, Kind& kind) {
  if (w.dtype == DType::I8) {
    kind = kInt8;
    return w.group_size % 32 == 0;
  }
  if (w.rows8 && w.bits == 8) {
    kind = kAffine8R8;
    return w.group_size % 32 == 0;
  }
  if (w.bits == 8) {
    kind = w.group_size % 64 == 0 ? kAffine8P : kAffine8;
    return w.group_size % 32 == 0;
  }
  if (w.rows8) {
    kind = kAffine4R8;
    return w.cols % 64 == 0 && (w.group_size == 32 || w.group_size % 64 == 0);
  }
  kind = w.group_size == 32 ? kAffine4G32 : kAffine4;
  return w.group_size % 64 == 0 || (w.group_size == 32 && w.cols % 64 == 0);
}

#if HWY_TARGET <= HWY_AVX3
// The AVX-512 VNNI kind for weights of `kind` like w (the weights of one call share its format
// and cols), or `kind` itself where those kernels are off or do not apply.
Kind VnniKind(Kind kind, const WeightMatrix& w) {
  if (!qmatvec_vnni_enabled()) return kind;
  const bool g64 = w.group_size == 64 || w.group_size == 128;
  if (kind == kAffine4 && g64 && w.cols % 128 == 0) return kAffine4W;
  if (kind == kAffine8P && g64) return kAffine8W;
  if (kind == kAffine4R8) return kAffine4R8W;
  return kind;
}
#endif

// ys[i] = ws[i] x for n weights that read the same x (q/k/v, gate/up): x is rounded once and
// the threads are woken once for all of them (a wake-up costs tens of microseconds under a
// passive wait policy). Each thread takes its share of every matrix in turn, no barrier.
// x holds nv vectors, each rounded on its own (as a lone matvec would round it).
void QMatvecMulti(const WeightMatrix* ws, int64_t n, const float* x, int64_t nv, float* const* ys) {
  Kind kind;
  bool same = KindOf(ws[0], kind);
  for (int64_t i = 1; i < n && same; ++i) {
    Kind k;
    same = KindOf(ws[i], k) && k == kind && ws[i].dtype == ws[0].dtype &&
           ws[i].bits == ws[0].bits && ws[i].group_size == ws[0].group_size &&
           ws[i].scale_dtype == ws[0].scale_dtype && ws[i].rows8 == ws[0].rows8;
  }
  if (!same) {
    for (int64_t i = 0; i < n; ++i) {
      Kind k;
      if (KindOf(ws[i], k)) {
        QMatvecMulti(ws + i, 1, x, nv, ys + i);
      } else {
        for (int64_t v = 0; v < nv; ++v) {
          qmatvec_exact(ws[i], x + v * ws[i].cols, ys[i] + v * ws[i].rows);
        }
      }
    }
    return;
  }
#if HWY_TARGET <= HWY_AVX3
  kind = VnniKind(kind, ws[0]);
#endif
  // Grown to the largest batch seen, then reused: steady-state decode allocates nothing.
  thread_local std::vector<XQ> xq;
  if (xq.size() < static_cast<size_t>(nv)) xq.resize(static_cast<size_t>(nv));
  for (int64_t v = 0; v < nv; ++v) PrepareX(ws[0], kind, x + v * ws[0].cols, xq[v]);
  const XQ* xb = xq.data();  // the caller's buffers: inside the region `xq` names each thread's own
  thread_local std::vector<uint8_t> claim_flags;
  const int64_t cpm = ClaimsPerMatrix();
  claim_flags.assign(static_cast<size_t>(n * cpm), 0);
  uint8_t* claims = claim_flags.data();
  parallel([&] {
    for (int64_t i = 0; i < n; ++i) {
      switch (kind) {
        case kInt8:
          RunQ<kInt8>(ws[i], xb, nv, ys[i]);
          break;
        case kAffine8:
          RunAffine<8>(ws[i], xb, nv, ys[i]);
          break;
        case kAffine8P:
          RunAffine<8, 64>(ws[i], xb, nv, ys[i]);
          break;
        case kAffine4:
          RunAffine<4>(ws[i], xb, nv, ys[i]);
          break;
        case kAffine4G32:
          RunQ<kAffine4G32>(ws[i], xb, nv, ys[i]);
          break;
        case kAffine4R8:
          RunBlocks8<kAffine4R8>(ws[i], xb, nv, ys[i], claims + i * cpm);
          break;
        case kAffine8R8:
          RunBlocks8<kAffine8R8>(ws[i], xb, nv, ys[i], claims + i * cpm);
          break;
        case kAffine4W:
#if HWY_TARGET <= HWY_AVX3
          RunAffineW<4>(ws[i], xb, nv, ys[i]);
#endif
          break;
        case kAffine8W:
#if HWY_TARGET <= HWY_AVX3
          RunAffineW<8>(ws[i], xb, nv, ys[i]);
#endif
          break;
        case kAffine4R8W:
          RunBlocks8<kAffine4R8W>(ws[i], xb, nv, ys[i], claims + i * cpm);
          break;
      }
    }
  });
}

bool PrefersRows8() {
  return true;
}

const char* KernelName() {
#if HWY_TARGET <= HWY_AVX3
  if (qmatvec_vnni_enabled()) return "AVX-512 VNNI";
#endif
  return "AVX2";
}

#else  // every other target: NEON, SVE, SSE4, EMU128, ...

namespace hn = hwy::HWY_NAMESPACE;

// The portable kernel, in Highway ops only. x is rounded to int8 exactly as the AVX2 kernels
// round it (same blocks, same f32 multiply, to nearest even), so every int8 value and every
// integer sum equals theirs; only the f32 steps after them run in another order, and results
// differ from the AVX2 ones by f32 rounding alone (tested on x86 through the SSE4 target, on
// arm64 through the cross-architecture fixture). Products are widened to int16 lanes and summed
// in int32 by ReorderWidenMulAccumulate (vmlal on NEON: Highway 1.0.3 has no dot-product op).
// Rows are read one at a time and whole: MLX rows by 8 are gathered into a row first.

// Inputs per x scale, as XBlock chooses them on AVX2: 64 at 4 bits and for 8-bit affine groups
// of 64 or more, else 32.
HWY_INLINE int64_t PortableXBlock(const WeightMatrix& w) {
  if (w.dtype == DType::I8) return 32;
  return w.bits == 4 || w.group_size % 64 == 0 ? 64 : 32;
}

// Whether w's groups tile the blocks (the shapes the AVX2 kernels take, KindOf).
HWY_INLINE bool PortableApplies(const WeightMatrix& w) {
  if (w.dtype == DType::I8 || w.bits == 8) return w.group_size % 32 == 0;
  if (w.rows8) return w.cols % 64 == 0 && (w.group_size == 32 || w.group_size % 64 == 0);
  return w.group_size % 64 == 0 || (w.group_size == 32 && w.cols % 64 == 0);
}

// x rounded for one weight format: q (at 4 bits per 64 inputs the 32 even ones, then the 32
// odd ones, to meet the low and high nibbles), one scale per block and the exact Σx per group.
struct XQ {
  std::vector<int8_t> q;
  std::vector<float> dx, xsum;
};

void PrepareX(const WeightMatrix& w, const float* x, XQ& b) {
  const hn::CappedTag<float, 16> df;  // at most 16 lanes: they divide a block of 32
  const hn::Rebind<int8_t, decltype(df)> d8;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  const int64_t xb = PortableXBlock(w), nb = w.cols / xb, G = w.group_size, ng = w.groups();
  b.q.resize(static_cast<size_t>(w.cols));
  b.dx.resize(static_cast<size_t>(nb));
  b.xsum.resize(static_cast<size_t>(ng));
  alignas(64) int8_t t[64];
  for (int64_t c = 0; c < nb; ++c) {
    const float* xc = x + c * xb;
    auto m = hn::Zero(df);
    for (int64_t i = 0; i < xb; i += N) m = hn::Max(m, hn::Abs(hn::LoadU(df, xc + i)));
    const float amax = hn::GetLane(hn::MaxOfLanes(df, m));
    const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
    b.dx[static_cast<size_t>(c)] = amax / 127.0f;
    int8_t* qc = b.q.data() + c * xb;
    int8_t* dst = w.bits == 4 ? t : qc;
    for (int64_t i = 0; i < xb; i += N) {
      const auto r = hn::NearestInt(hn::Mul(hn::LoadU(df, xc + i), hn::Set(df, inv)));
      hn::StoreU(hn::DemoteTo(d8, r), d8, dst + i);
    }
    if (w.bits == 4) {
      for (int64_t k = 0; k < 32; ++k) {
        qc[k] = t[2 * k];
        qc[32 + k] = t[2 * k + 1];
      }
    }
  }
  // Σx per group (G a multiple of 32, so of N) in vector lanes, then across them.
  for (int64_t g = 0; g < ng; ++g) {
    auto acc = hn::Zero(df);
    for (int64_t i = 0; i < G; i += N) acc = hn::Add(acc, hn::LoadU(df, x + g * G + i));
    b.xsum[static_cast<size_t>(g)] = hn::GetLane(hn::SumOfLanes(df, acc));
  }
}

// Row r of W · x, its bytes at wb (row-major: int8, 8-bit or 4-bit). One integer sum per unit
// of min(block, group) inputs, converted once and scaled by (x scale) × (group scale); the
// affine bias term from the exact group sums of x at the end.
template <int BITS, bool kSigned>
HWY_INLINE float RowPortable(const WeightMatrix& w, const uint8_t* wb, int64_t r, const XQ& xq) {
  const hn::CappedTag<int16_t, 16> d16;  // at most 16 lanes: they divide a unit's 16 bytes
  const hn::Rebind<uint8_t, decltype(d16)> du8;
  const hn::Rebind<int8_t, decltype(d16)> di8;
  const hn::RepartitionToWide<decltype(d16)> d32;
  const hn::Rebind<float, decltype(d32)> df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d16));
  const int64_t xb = PortableXBlock(w), G = w.group_size, unit = std::min(xb, G);
  const int8_t* q = xq.q.data();
  auto acc = hn::Zero(df);
  for (int64_t u0 = 0; u0 < w.cols; u0 += unit) {
    auto s0 = hn::Zero(d32), s1 = hn::Zero(d32);
    if constexpr (BITS == 4) {
      // Byte j of the unit holds inputs u0 + 2j (low nibble) and u0 + 2j + 1 (high).
      const int8_t* xe = q + (u0 / 64) * 64 + (u0 % 64) / 2;
      const uint8_t* p = wb + u0 / 2;
      for (int64_t j = 0; j < unit / 2; j += N) {
        const auto raw = hn::PromoteTo(d16, hn::LoadU(du8, p + j));
        const auto lo = hn::And(raw, hn::Set(d16, 15)), hi = hn::ShiftRight<4>(raw);
        s0 = hn::ReorderWidenMulAccumulate(d32, lo, hn::PromoteTo(d16, hn::LoadU(di8, xe + j)), s0,
                                           s1);
        s0 = hn::ReorderWidenMulAccumulate(d32, hi, hn::PromoteTo(d16, hn::LoadU(di8, xe + 32 + j)),
                                           s0, s1);
      }
    } else {
      for (int64_t j = u0; j < u0 + unit; j += N) {
        const auto wv =
            kSigned ? hn::PromoteTo(d16, hn::LoadU(di8, reinterpret_cast<const int8_t*>(wb) + j))
                    : hn::PromoteTo(d16, hn::LoadU(du8, wb + j));
        s0 = hn::ReorderWidenMulAccumulate(d32, wv, hn::PromoteTo(d16, hn::LoadU(di8, q + j)), s0,
                                           s1);
      }
    }
    const float sc = scale_at(w.scale_dtype, w.scales, table_index(w, r, u0 / G)) *
                     xq.dx[static_cast<size_t>(u0 / xb)];
    acc = hn::MulAdd(hn::ConvertTo(df, hn::Add(s0, s1)), hn::Set(df, sc), acc);
  }
  float y = hn::GetLane(hn::SumOfLanes(df, acc));
  if (w.dtype == DType::U32) {
    for (int64_t g = 0; g < w.groups(); ++g) {
      y = std::fma(scale_at(w.scale_dtype, w.biases, table_index(w, r, g)),
                   xq.xsum[static_cast<size_t>(g)], y);
    }
  }
  return y;
}

// This thread's share of y = W x for the nv vectors (inside a parallel region).
template <int BITS, bool kSigned>
void RunPortable(const WeightMatrix& w, const XQ* xq, int64_t nv, float* y) {
  const int64_t row_bytes = w.cols * BITS / 8;
  thread_local std::vector<uint8_t> gathered;  // a row of rows-by-8 weights, made contiguous
  gathered.resize(static_cast<size_t>(row_bytes));
  ForThreadRowsQ<1>(w.rows, [&]<int R>(std::integral_constant<int, R>, int64_t r, int64_t) {
    const uint8_t* wb = static_cast<const uint8_t*>(w.data) + r * row_bytes;
    if (w.rows8) {
      const RowWords words = row_words(w, r);
      for (int64_t j = 0; j < row_bytes / 4; ++j) {
        const uint32_t word = words[j];
        std::memcpy(gathered.data() + 4 * j, &word, 4);
      }
      wb = gathered.data();
    }
    for (int64_t v = 0; v < nv; ++v)
      y[v * w.rows + r] = RowPortable<BITS, kSigned>(w, wb, r, xq[v]);
  });
}

bool PrefersRows8() {
  return false;
}

const char* KernelName() {
  static const std::string name =
      std::string("portable (Highway ") + hwy::TargetName(HWY_TARGET) + ")";
  return name.c_str();
}

// As on AVX2: x is rounded once per weight and vector, and the threads are woken once for all
// the weights; shapes the blocks do not tile take the exact path after the region.
void QMatvecMulti(const WeightMatrix* ws, int64_t n, const float* x, int64_t nv, float* const* ys) {
  thread_local std::vector<XQ> xq;
  if (xq.size() < static_cast<size_t>(n * nv)) xq.resize(static_cast<size_t>(n * nv));
  for (int64_t i = 0; i < n; ++i) {
    if (!PortableApplies(ws[i])) continue;
    for (int64_t v = 0; v < nv; ++v) PrepareX(ws[i], x + v * ws[i].cols, xq[i * nv + v]);
  }
  const XQ* xb = xq.data();  // the caller's buffers: inside the region `xq` names each thread's own
  parallel([&] {
    for (int64_t i = 0; i < n; ++i) {
      const WeightMatrix& w = ws[i];
      if (!PortableApplies(w)) continue;
      if (w.dtype == DType::I8) {
        RunPortable<8, true>(w, xb + i * nv, nv, ys[i]);
      } else if (w.bits == 8) {
        RunPortable<8, false>(w, xb + i * nv, nv, ys[i]);
      } else {
        RunPortable<4, false>(w, xb + i * nv, nv, ys[i]);
      }
    }
  });
  for (int64_t i = 0; i < n; ++i) {
    if (PortableApplies(ws[i])) continue;
    for (int64_t v = 0; v < nv; ++v) {
      qmatvec_exact(ws[i], x + v * ws[i].cols, ys[i] + v * ws[i].rows);
    }
  }
}

#endif

}  // namespace HWY_NAMESPACE
}  // namespace molt
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace molt {

HWY_EXPORT(QMatvecMulti);
HWY_EXPORT(PrefersRows8);
HWY_EXPORT(KernelName);

bool rows8_preferred() {
  return HWY_DYNAMIC_DISPATCH(PrefersRows8)();
}

const char* qmatvec_kernel_name() {
  return HWY_DYNAMIC_DISPATCH(KernelName)();
}

namespace {
bool cpu_has_vnni() {
#if HWY_ARCH_X86
  return __builtin_cpu_supports("avx512vnni");
#else
  return false;
#endif
}
// MOLT_NO_VNNI (any value) turns the AVX-512 VNNI kernels off, for A/B measurements.
std::atomic<bool> vnni{cpu_has_vnni() && std::getenv("MOLT_NO_VNNI") == nullptr};
}  // namespace

bool qmatvec_vnni_enabled() {
  return vnni.load(std::memory_order_relaxed);
}

bool set_qmatvec_vnni(bool on) {
  const bool supported = cpu_has_vnni();
  vnni.store(on && supported, std::memory_order_relaxed);
  return supported;
}

void qmatvec_dispatch(const WeightMatrix* ws, int64_t n, const float* x, int64_t nv,
                      float* const* ys) {
  HWY_DYNAMIC_DISPATCH(QMatvecMulti)(ws, n, x, nv, ys);
}

}  // namespace molt
#endif  // HWY_ONCE
