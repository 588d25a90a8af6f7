#include "kernels/matvec.h"

#include <omp.h>

#include "molt/common/dtype.h"
#include "molt/kernels/threads.h"

namespace molt {
namespace {

template <typename Widen>
float row_dot(const uint16_t* w, const float* x, int64_t n, Widen widen) {
  float acc = 0.0f;
  for (int64_t c = 0; c < n; ++c) acc += widen(w[c]) * x[c];
  return acc;
}

}  // namespace

void widen_row_16(DType dtype, const uint16_t* src, int64_t n, float* dst) {
  if (dtype == DType::BF16) {
    for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(src[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) dst[i] = f16_to_f32(src[i]);
  }
}

void matvec_dispatch(const WeightMatrix& w, const float* x, float* y) {
  const int64_t cols = w.cols;
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < w.rows; ++r) {
    if (w.dtype == DType::F32) {
      const float* row = static_cast<const float*>(w.data) + r * cols;
      float acc = 0.0f;
      for (int64_t c = 0; c < cols; ++c) acc += row[c] * x[c];
      y[r] = acc;
    } else if (w.dtype == DType::BF16) {
      y[r] = row_dot(static_cast<const uint16_t*>(w.data) + r * cols, x, cols, bf16_to_f32);
    } else {
      y[r] = row_dot(static_cast<const uint16_t*>(w.data) + r * cols, x, cols, f16_to_f32);
    }
  }
}

}  // namespace molt
