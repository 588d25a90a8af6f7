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
  b.q.resize(static_cast<size_t>(w.cols));
  b.dx.resize(static_cast<size_t>(nc));
  b.xsum.assign(static_cast<size_t>(ng), 0.0f);
  b.corr.assign(static_cast<size_t>(ng), 0.0f);
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

// y[k * step] for the R rows r0 + k * step.
template <int R, Kind K>
HWY_INLINE void RowsQ(const WeightMatrix& w, const XQ& xb, int64_t r0, int64_t step, float* y) {
  const int64_t cols = w.cols, G = w.group_size, ng = w.groups();
  const int64_t row_bytes = K == kInt8 ? cols : cols * w.bits / 8;
  // Chunks (32 bytes) per group; one chunk spans two groups for 4-bit with G = 32.
  const int64_t cpg = K == kAffine4G32 ? 1 : G * (K == kInt8 ? 8 : w.bits) / 8 / 32;
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
  const __m256i m80 = _mm256_set1_epi8(static_cast<char>(0x80));
  const int8_t* xq = xb.q.data();
  int64_t c = 0;
  for (int64_t g = 0; g < ng; g += (K == kAffine4G32 ? 2 : 1)) {
    __m256 gacc[R];
    for (int k = 0; k < R; ++k) gacc[k] = _mm256_setzero_ps();
    for (int64_t j = 0; j < cpg; ++j, ++c) {
      const __m256 dxv = _mm256_set1_ps(xb.dx[static_cast<size_t>(c)]);
      if constexpr (K == kAffine4 || K == kAffine4G32) {
        const __m256i xe = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + c * 64));
        const __m256i xo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + c * 64 + 32));
        for (int k = 0; k < R; ++k) {
          const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wp[k] + c * 32));
          const __m256i lo = _mm256_and_si256(raw, m0f);
          const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), m0f);
          const __m256i p =
              _mm256_add_epi16(_mm256_maddubs_epi16(lo, xe), _mm256_maddubs_epi16(hi, xo));
          gacc[k] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_madd_epi16(p, ones)), dxv, gacc[k]);
        }
      } else {
        const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + c * 32));
        const __m256i ax = _mm256_abs_epi8(xv);  // unused by 8-bit affine
        for (int k = 0; k < R; ++k) {
          const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wp[k] + c * 32));
          __m256i p;
          if constexpr (K == kAffine8) {
            // q - 128 may be -128, which sign_epi8 cannot negate: move its sign onto x instead
            // (|q - 128| <= 128 fits the unsigned operand).
            const __m256i qs = _mm256_xor_si256(raw, m80);
            p = _mm256_maddubs_epi16(_mm256_abs_epi8(qs), _mm256_sign_epi8(xv, qs));
          } else {
            p = _mm256_maddubs_epi16(ax, _mm256_sign_epi8(raw, xv));
          }
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
        if constexpr (K != kInt8) {
          tail[k] += s0 * xb.corr[static_cast<size_t>(g)] +
                     scale_at(w.scale_dtype, w.biases, srow[k] + g) * xb.xsum[g];
        }
      }
      acc[k] = _mm256_fmadd_ps(gacc[k], sv, acc[k]);
    }
  }
  for (int k = 0; k < R; ++k) y[k * step] = HSum(acc[k]) + tail[k];
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
      RunQ<kAffine8>(w, xb, y);
      return;
    case kAffine4:
      RunQ<kAffine4>(w, xb, y);
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
