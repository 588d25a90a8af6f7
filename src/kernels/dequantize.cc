// Dequantisation of one row of quantised weights to f32: prefill's tiles (sgemm or bf16 GEMM
// read them) and embedding lookups. In Highway ops, compiled once per CPU target and dispatched at
// run time. The values must stay bit-identical to the scalar formula (tools/reference/
// mlx_quant.py: scale · q, then + bias, two roundings) on every target, so this file is compiled
// with -ffp-contract=off (CMakeLists.txt): GCC would otherwise fuse the vector multiply and add
// wherever the target has FMA.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/dequantize.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
// Must follow foreach_target.h.
#include <cstring>
#include <vector>

#include "hwy/highway.h"
#include "kernels/qmatvec.h"

HWY_BEFORE_NAMESPACE();
namespace molt {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Inputs [i0, i1) of a row: q's bytes at p (int8, or 8-bit q = byte), out = s·q (+ b).
template <bool kSigned, bool kBias>
HWY_INLINE void Bytes(const uint8_t* p, float s, float b, int64_t i0, int64_t i1, float* out) {
  const hn::CappedTag<float, 16> df;
  const hn::Rebind<int32_t, decltype(df)> di;
  const hn::Rebind<uint8_t, decltype(df)> du8;
  const hn::Rebind<int8_t, decltype(df)> di8;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  const auto sv = hn::Set(df, s), bv = hn::Set(df, b);
  int64_t i = i0;
  for (; i + N <= i1; i += N) {
    const auto q = kSigned
                       ? hn::PromoteTo(di, hn::LoadU(di8, reinterpret_cast<const int8_t*>(p) + i))
                       : hn::PromoteTo(di, hn::LoadU(du8, p + i));
    const auto v = hn::Mul(sv, hn::ConvertTo(df, q));
    hn::StoreU(kBias ? hn::Add(v, bv) : v, df, out + i);
  }
  for (; i < i1; ++i) {
    const float q = kSigned ? static_cast<float>(static_cast<int8_t>(p[i])) : p[i];
    out[i] = kBias ? s * q + b : s * q;
  }
}

// Inputs [i0, i1) of a 4-bit row (i0 even): byte j holds input 2j in its low nibble and 2j + 1 in
// its high one. 16 inputs per step in 128-bit vectors, whose interleaves keep lane order on every
// target (wider x86 vectors interleave within 128-bit blocks).
HWY_INLINE void Nibbles(const uint8_t* p, float s, float b, int64_t i0, int64_t i1, float* out) {
  int64_t i = i0;
#if HWY_TARGET != HWY_SCALAR
  const hn::Full128<uint16_t> d16;
  const hn::Rebind<uint8_t, decltype(d16)> d8;  // 8 bytes
  const hn::Full64<uint16_t> dh;
  const hn::Full128<int32_t> di;
  const hn::Full128<float> df;
  const auto sv = hn::Set(df, s), bv = hn::Set(df, b);
  const auto m = hn::Set(d16, 15);
  for (; i + 16 <= i1; i += 16) {
    const auto raw = hn::PromoteTo(d16, hn::LoadU(d8, p + i / 2));
    const auto lo = hn::And(raw, m), hi = hn::ShiftRight<4>(raw);
    const auto z0 = hn::InterleaveLower(d16, lo, hi), z1 = hn::InterleaveUpper(d16, lo, hi);
    const hn::Vec<decltype(dh)> quarters[4] = {hn::LowerHalf(dh, z0), hn::UpperHalf(dh, z0),
                                               hn::LowerHalf(dh, z1), hn::UpperHalf(dh, z1)};
    for (int k = 0; k < 4; ++k) {
      const auto q = hn::ConvertTo(df, hn::PromoteTo(di, quarters[k]));
      hn::StoreU(hn::Add(hn::Mul(sv, q), bv), df, out + i + 4 * k);
    }
  }
#endif
  for (; i < i1; ++i) {
    const float q = static_cast<float>((p[i / 2] >> (4 * (i % 2))) & 15);
    out[i] = s * q + b;
  }
}

void DequantizeRow(const WeightMatrix& w, int64_t row, float* out) {
  const int64_t G = w.group_size, ng = w.groups();
  const uint8_t* p;
  if (w.dtype == DType::I8) {
    p = static_cast<const uint8_t*>(w.data) + row * w.cols;
  } else if (w.rows8) {
    // Rows by 8: this row's words made contiguous first.
    thread_local std::vector<uint8_t> gathered;
    const int64_t words = w.cols * w.bits / 32;
    gathered.resize(static_cast<size_t>(4 * words));
    const RowWords rw = row_words(w, row);
    for (int64_t j = 0; j < words; ++j) {
      const uint32_t word = rw[j];
      std::memcpy(gathered.data() + 4 * j, &word, 4);
    }
    p = gathered.data();
  } else {
    p = static_cast<const uint8_t*>(w.data) + row * w.cols * w.bits / 8;
  }
  for (int64_t g = 0; g < ng; ++g) {
    const float s = scale_at(w.scale_dtype, w.scales, table_index(w, row, g));
    if (w.dtype == DType::I8) {
      Bytes<true, false>(p, s, 0.0f, g * G, (g + 1) * G, out);
      continue;
    }
    const float b = scale_at(w.scale_dtype, w.biases, table_index(w, row, g));
    if (w.bits == 8) {
      Bytes<false, true>(p, s, b, g * G, (g + 1) * G, out);
    } else {
      Nibbles(p, s, b, g * G, (g + 1) * G, out);
    }
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace molt
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace molt {

HWY_EXPORT(DequantizeRow);

void dequantize_row_q(const WeightMatrix& w, int64_t row, float* out) {
  HWY_DYNAMIC_DISPATCH(DequantizeRow)(w, row, out);
}

}  // namespace molt
#endif  // HWY_ONCE
