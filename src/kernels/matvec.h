// Internal: the SIMD matvec behind molt::matvec (Highway, dispatched per CPU).
#pragma once

#include <cstdint>

#include "molt/kernels/linear.h"
#include "molt/kernels/ops.h"

namespace molt {

// ys[i][v · rows_i ..] = ws[i] x[v · cols ..] for n checked weights of one dense dtype (F32,
// BF16 or F16) and one width (rows, cols > 0) and nv >= 1 vectors, in one parallel region; each
// result equals the nv = 1 one bit for bit.
void matvec_dispatch(const WeightMatrix* ws, int64_t n, const float* x, int64_t nv,
                     float* const* ys);

// dst[n] = f32 of n BF16 or F16 values.
void widen_row_16(DType dtype, const uint16_t* src, int64_t n, float* dst);

}  // namespace molt
