// Internal: the 16-bit and quantised prefill paths of molt::matmul with their tile sizes exposed,
// so tests can cover several tiles without building a huge matrix.
#pragma once

#include <cstdint>

#include "molt/kernels/linear.h"

namespace molt {

// y[n × rows] = x · Wᵀ for BF16 / F16 / quantised W, widening `tile_rows` rows of W per sgemm call.
void matmul_widened(const WeightMatrix& w, const float* x, int64_t n, float* y, int64_t tile_rows);

// The bf16 path (gemm_bf16.h; the CPU must have it): x rounded to bf16, BF16 W as stored,
// quantised W dequantised to bf16 in tiles of `tile_rows` rows (0: about 2 MiB per tile).
void matmul_bf16(const WeightMatrix& w, const float* x, int64_t n, float* y, int64_t tile_rows = 0);

}  // namespace molt
