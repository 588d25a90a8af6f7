// Linear layers: y = W x for one token (decode) and Y = X Wᵀ for many (prefill).
// W is row-major [rows = out features, cols = in features], exactly as a Hugging Face
// nn.Linear weight is stored, in the dtype of the file; compute is f32.
#pragma once

#include <cstdint>

#include "molt/common/dtype.h"

namespace molt {

struct WeightMatrix {
  DType dtype = DType::F32;  // F32, BF16 or F16 (quantised layouts: kernels issue)
  int64_t rows = 0;
  int64_t cols = 0;
  const void* data = nullptr;
  size_t bytes() const { return static_cast<size_t>(rows * cols) * dtype_size(dtype); }
};

// y[rows] = W · x[cols]. Rows are split over the kernel threads.
void matvec(const WeightMatrix& w, const float* x, float* y);

// y[n × rows] = x[n × cols] · Wᵀ, row-major. f32 goes straight to BLAS sgemm; 16-bit
// weights are widened in tiles and fed to sgemm.
void matmul(const WeightMatrix& w, const float* x, int64_t n, float* y);

// Copies row `row` of W into out[cols] as f32 (embedding lookup).
void dequantize_row(const WeightMatrix& w, int64_t row, float* out);

}  // namespace molt
