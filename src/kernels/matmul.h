// Internal: the 16-bit prefill path of molt::matmul with its tile size exposed, so tests can
// cover several tiles without building a huge matrix.
#pragma once

#include <cstdint>

#include "molt/kernels/linear.h"

namespace molt {

// y[n × rows] = x · Wᵀ for BF16 / F16 / quantised W, widening `tile_rows` rows of W per sgemm call.
void matmul_widened(const WeightMatrix& w, const float* x, int64_t n, float* y, int64_t tile_rows);

}  // namespace molt
