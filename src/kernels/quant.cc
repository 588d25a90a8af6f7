// Quantisers (MLX affine, symmetric int8), the checked row dequantiser and the exact f32 quantised
// matvec (the row dequantiser's Highway kernel: dequantize.cc). The quantisers' arithmetic must
// stay bit-identical to tools/reference/mlx_quant.py, so floating-point contraction
// (a·b + c → fma) is off in this file.
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include "molt/kernels/quant.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/qmatvec.h"
#include "molt/common/error.h"

namespace molt {
namespace {

void store_scale(DType t, void* p, int64_t i, float v) {
  switch (t) {
    case DType::BF16:
      static_cast<uint16_t*>(p)[i] = f32_to_bf16(v);
      return;
    case DType::F16:
      static_cast<uint16_t*>(p)[i] = f32_to_f16(v);
      return;
    default:
      static_cast<float*>(p)[i] = v;
      return;
  }
}

void check_dense_source(const WeightMatrix& w, const char* op) {
  check_weight(w, op);
  if (w.quantized())
    fail("{}: the source weight is already quantised ({})", op, dtype_name(w.dtype));
}

void check_group(const char* op, int64_t group_size, int64_t cols) {
  if (group_size != 32 && group_size != 64 && group_size != 128) {
    fail("{}: group size {} is not one of 32, 64, 128", op, group_size);
  }
  if (cols % group_size != 0) {
    fail("{}: group size {} does not divide the input dimension {}", op, group_size, cols);
  }
}

}  // namespace

WeightMatrix QuantizedMatrix::view() const {
  WeightMatrix w{dtype, rows, cols, data.data()};
  w.bits = bits;
  w.group_size = group_size;
  w.scale_dtype = scale_dtype;
  w.scales = scales.data();
  w.biases = dtype == DType::U32 ? biases.data() : nullptr;
  w.rows8 = rows8;
  return w;
}

QuantizedMatrix interleave_rows8(const WeightMatrix& w) {
  check_weight(w, "interleave_rows8");
  if (w.dtype != DType::U32) {
    fail("interleave_rows8: the weight is {}, not MLX-quantised (U32)", dtype_name(w.dtype));
  }
  if (w.rows8) fail("interleave_rows8: the weight is interleaved already");
  if (w.rows % 8 != 0) fail("interleave_rows8: {} rows is not a multiple of 8", w.rows);
  QuantizedMatrix q;
  q.dtype = w.dtype;
  q.rows = w.rows;
  q.cols = w.cols;
  q.bits = w.bits;
  q.group_size = w.group_size;
  q.scale_dtype = w.scale_dtype;
  q.rows8 = true;
  const int64_t words = w.cols * w.bits / 32, ng = w.groups();
  const size_t es = dtype_size(w.scale_dtype);
  q.data.resize(w.data_bytes());
  q.scales.resize(static_cast<size_t>(w.rows * ng) * es);
  q.biases.resize(q.scales.size());
  const auto* src = static_cast<const uint32_t*>(w.data);
  auto* dst = reinterpret_cast<uint32_t*>(q.data.data());
  const auto* ssrc = static_cast<const uint8_t*>(w.scales);
  const auto* bsrc = static_cast<const uint8_t*>(w.biases);
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < w.rows / 8; ++b) {
    for (int64_t k = 0; k < 8; ++k) {
      const int64_t r = b * 8 + k;
      for (int64_t j = 0; j < words; ++j) dst[(b * words + j) * 8 + k] = src[r * words + j];
      for (int64_t g = 0; g < ng; ++g) {
        const size_t to = static_cast<size_t>((b * ng + g) * 8 + k) * es;
        const size_t from = static_cast<size_t>(r * ng + g) * es;
        std::memcpy(q.scales.data() + to, ssrc + from, es);
        std::memcpy(q.biases.data() + to, bsrc + from, es);
      }
    }
  }
  return q;
}

QuantizedMatrix quantize_affine(const WeightMatrix& w, int bits, int64_t group_size,
                                DType scale_dtype) {
  check_dense_source(w, "quantize_affine");
  if (bits != 4 && bits != 8) fail("quantize_affine: bits {} is not 4 or 8", bits);
  check_group("quantize_affine", group_size, w.cols);
  if (scale_dtype != DType::F32 && scale_dtype != DType::F16 && scale_dtype != DType::BF16) {
    fail("quantize_affine: scale dtype {} is not F32, F16 or BF16", dtype_name(scale_dtype));
  }
  QuantizedMatrix q;
  q.dtype = DType::U32;
  q.rows = w.rows;
  q.cols = w.cols;
  q.bits = bits;
  q.group_size = group_size;
  q.scale_dtype = scale_dtype;
  const int64_t ng = w.cols / group_size, per = 32 / bits, words = w.cols / per;
  q.data.assign(static_cast<size_t>(w.rows * words) * 4, 0);
  q.scales.resize(static_cast<size_t>(w.rows * ng) * dtype_size(scale_dtype));
  q.biases.resize(q.scales.size());
  const float n_bins = static_cast<float>((1 << bits) - 1), eps = 1e-7f;
  auto* out = reinterpret_cast<uint32_t*>(q.data.data());
  // Each thread's row, allocated here: a std::bad_alloc must not be thrown inside the parallel
  // region (it would end the process instead of reaching the caller).
  std::vector<float> rows(static_cast<size_t>(omp_get_max_threads() * w.cols));
#pragma omp parallel
  {
    float* row = rows.data() + omp_get_thread_num() * w.cols;
#pragma omp for schedule(static)
    for (int64_t r = 0; r < w.rows; ++r) {
      dequantize_row(w, r, row);
      for (int64_t g = 0; g < ng; ++g) {
        const float* v = row + g * group_size;
        float w_min = std::numeric_limits<float>::infinity(), w_max = -w_min;
        for (int64_t j = 0; j < group_size; ++j) {
          w_max = std::max(w_max, v[j]);
          w_min = std::min(w_min, v[j]);
        }
        const bool mask = std::abs(w_min) > std::abs(w_max);
        float scale = std::max((w_max - w_min) / n_bins, eps);
        scale = mask ? scale : -scale;
        const float edge = mask ? w_min : w_max;
        const float q0 = std::rint(edge / scale);
        float bias = 0.0f;
        if (q0 != 0.0f) {
          scale = edge / q0;
          bias = edge;
        }
        uint32_t* o = out + r * words + g * group_size / per;
        for (int64_t j = 0; j < group_size; ++j) {
          float e = std::rint((v[j] - bias) / scale);
          e = std::min(std::max(e, 0.0f), n_bins);
          o[j / per] |= static_cast<uint32_t>(e) << ((j % per) * bits);
        }
        store_scale(scale_dtype, q.scales.data(), r * ng + g, scale);
        store_scale(scale_dtype, q.biases.data(), r * ng + g, bias);
      }
    }
  }
  return q;
}

QuantizedMatrix quantize_int8(const WeightMatrix& w, int64_t group_size) {
  check_dense_source(w, "quantize_int8");
  if (group_size != 0) check_group("quantize_int8", group_size, w.cols);
  const int64_t G = group_size == 0 ? w.cols : group_size, ng = G > 0 ? w.cols / G : 0;
  QuantizedMatrix q;
  q.dtype = DType::I8;
  q.rows = w.rows;
  q.cols = w.cols;
  q.bits = 8;
  q.group_size = G;
  q.scale_dtype = DType::F32;
  q.data.resize(static_cast<size_t>(w.rows * w.cols));
  q.scales.resize(static_cast<size_t>(w.rows * ng) * 4);
  auto* out = reinterpret_cast<int8_t*>(q.data.data());
  auto* sc = reinterpret_cast<float*>(q.scales.data());
  // Each thread's row, allocated here: a std::bad_alloc must not be thrown inside the parallel
  // region (it would end the process instead of reaching the caller).
  std::vector<float> rows(static_cast<size_t>(omp_get_max_threads() * w.cols));
#pragma omp parallel
  {
    float* row = rows.data() + omp_get_thread_num() * w.cols;
#pragma omp for schedule(static)
    for (int64_t r = 0; r < w.rows; ++r) {
      dequantize_row(w, r, row);
      for (int64_t g = 0; g < ng; ++g) {
        const float* v = row + g * G;
        float amax = 0.0f;
        for (int64_t j = 0; j < G; ++j) amax = std::max(amax, std::abs(v[j]));
        const float s = amax > 0.0f ? amax / 127.0f : 1.0f;
        for (int64_t j = 0; j < G; ++j) {
          const float e = std::min(std::max(std::rint(v[j] / s), -127.0f), 127.0f);
          out[r * w.cols + g * G + j] = static_cast<int8_t>(e);
        }
        sc[r * ng + g] = s;
      }
    }
  }
  return q;
}

void qmatvec_exact(const WeightMatrix& w, const float* x, float* y) {
  const int64_t G = w.group_size, ng = w.groups(), cols = w.cols;
  // The calling thread's, grown to the most groups seen: a decode step allocates nothing (this
  // is the path of every quantised matvec where the SIMD kernels do not apply, arm64 included).
  thread_local std::vector<float> xsum;
  if (xsum.size() < static_cast<size_t>(ng)) xsum.resize(static_cast<size_t>(ng));
  for (int64_t g = 0; g < ng; ++g) {
    float s = 0.0f;
    for (int64_t i = 0; i < G; ++i) s += x[g * G + i];
    xsum[static_cast<size_t>(g)] = s;
  }
  const float* xs = xsum.data();
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < w.rows; ++r) {
    float acc = 0.0f;
    if (w.dtype == DType::I8) {
      const int8_t* q = static_cast<const int8_t*>(w.data) + r * cols;
      for (int64_t g = 0; g < ng; ++g) {
        float s = 0.0f;
        for (int64_t i = g * G; i < (g + 1) * G; ++i) s += static_cast<float>(q[i]) * x[i];
        acc += scale_at(w.scale_dtype, w.scales, r * ng + g) * s;
      }
    } else {
      const int per = 32 / w.bits;
      const uint32_t mask = (1u << w.bits) - 1u;
      const RowWords words = row_words(w, r);
      for (int64_t g = 0; g < ng; ++g) {
        float s = 0.0f;
        for (int64_t i = g * G; i < (g + 1) * G; ++i) {
          const uint32_t q = (words[i / per] >> ((i % per) * w.bits)) & mask;
          s += static_cast<float>(q) * x[i];
        }
        acc += scale_at(w.scale_dtype, w.scales, table_index(w, r, g)) * s +
               scale_at(w.scale_dtype, w.biases, table_index(w, r, g)) * xs[g];
      }
    }
    y[r] = acc;
  }
}

}  // namespace molt
