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
// region and one rounding of x.
void qmatvec_dispatch(const WeightMatrix* ws, int64_t n, const float* x, float* const* ys);

// The exact f32 path alone (reference for tests).
void qmatvec_exact(const WeightMatrix& w, const float* x, float* y);

// out[cols] = row `row` of a checked quantised W as f32 (scale · q + bias, no FMA).
void dequantize_row_q(const WeightMatrix& w, int64_t row, float* out);

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
