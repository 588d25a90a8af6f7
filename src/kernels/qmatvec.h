// Internal: fused-dequantisation matvec for quantised weights (I8 symmetric, U32 MLX affine)
// and the scalar helpers shared with prefill and embedding lookup.
#pragma once

#include <cstdint>

#include "molt/common/dtype.h"
#include "molt/kernels/linear.h"

namespace molt {

// ys[i] = ws[i] x for n checked quantised weights of one width. On AVX2 and above x is rounded
// to int8 per block and the products are summed in integers; elsewhere (and for shapes the
// SIMD path does not tile) the sum is exact f32. Weights of one format share one parallel
// region and one rounding of x. x holds nv >= 1 vectors ([nv × cols]) and ys[i] nv rows of
// outputs ([nv × rows_i]); each vector's result equals the nv = 1 one bit for bit.
void qmatvec_dispatch(const WeightMatrix* ws, int64_t n, const float* x, int64_t nv,
                      float* const* ys);

// Whether MLX affine weights (4-bit: groups of 64 or 128 and cols % 128 == 0, or rows by 8;
// 8-bit: groups of 64 or 128) take the AVX-512 VNNI kernels on this CPU: by default where the
// CPU has it, unless MOLT_NO_VNNI is set. set_qmatvec_vnni turns them on or off (for tests and
// A/B runs) and returns whether the CPU has it. The AVX-512 target only; others ignore it.
bool qmatvec_vnni_enabled();
bool set_qmatvec_vnni(bool on);

// The exact f32 path alone (reference for tests).
void qmatvec_exact(const WeightMatrix& w, const float* x, float* y);

// out[cols] = row `row` of a checked quantised W as f32 (scale · q + bias, no FMA).
void dequantize_row_q(const WeightMatrix& w, int64_t row, float* out);

// The packed words of row r of a U32 W, in either layout (WeightMatrix::rows8).
struct RowWords {
  const uint32_t* p;
  int64_t stride;
  uint32_t operator[](int64_t j) const { return p[j * stride]; }
};
inline RowWords row_words(const WeightMatrix& w, int64_t r) {
  const int64_t per_row = w.cols * w.bits / 32;
  const auto* d = static_cast<const uint32_t*>(w.data);
  if (w.rows8) return {d + (r / 8) * per_row * 8 + r % 8, 8};
  return {d + r * per_row, 1};
}

// Index of entry (row r, group g) of W's scales and biases, in either layout.
inline int64_t table_index(const WeightMatrix& w, int64_t r, int64_t g) {
  return w.rows8 ? ((r / 8) * w.groups() + g) * 8 + r % 8 : r * w.groups() + g;
}

// Scale or bias number i of a table stored as F32, F16 or BF16.
inline float scale_at(DType t, const void* p, int64_t i) {
  switch (t) {
    case DType::BF16:
      return bf16_to_f32(static_cast<const uint16_t*>(p)[i]);
    case DType::F16:
      return f16_to_f32(static_cast<const uint16_t*>(p)[i]);
    default:
      return static_cast<const float*>(p)[i];
  }
}

}  // namespace molt
