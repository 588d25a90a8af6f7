// Linear layers: y = W x for one token (decode) and Y = X Wᵀ for many (prefill).
// W is row-major [rows = out features, cols = in features], exactly as a Hugging Face
// nn.Linear weight is stored, in the dtype of the file; compute is f32.
//
// Quantised weights (see molt/kernels/quant.h for the formats) are described by the same
// struct: `dtype` names the storage of `data` and selects the scheme.
//   F32, BF16, F16  dense [rows, cols].
//   I8              symmetric int8: w = scale · q, q in [-127, 127], data [rows, cols] int8,
//                   scales [rows, cols / group_size] (group_size = cols: per output channel).
//   U32             MLX affine: w = scale · q + bias, q in [0, 2^bits), data
//                   [rows, cols · bits / 32] uint32 with element k of each word in bits
//                   [k·bits, (k+1)·bits); scales and biases [rows, cols / group_size].
//                   With `rows8` (rows a multiple of 8; see interleave_rows8 in
//                   molt/kernels/quant.h) rows are interleaved in blocks of 8: word j of row r
//                   is data[((r / 8) · words_per_row + j) · 8 + r % 8], and entry (r, g) of the
//                   scales and biases is at ((r / 8) · groups + g) · 8 + r % 8.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "molt/common/dtype.h"

namespace molt {

struct WeightMatrix {
  DType dtype = DType::F32;  // F32, BF16, F16 (dense), I8 or U32 (quantised)
  int64_t rows = 0;
  int64_t cols = 0;  // logical input features (unpacked)
  const void* data = nullptr;
  // Quantised only.
  int bits = 0;                    // U32: 4 or 8; I8: 8
  int64_t group_size = 0;          // input features per scale (divides cols)
  DType scale_dtype = DType::F32;  // of scales and biases: F32, F16 or BF16
  const void* scales = nullptr;    // [rows, cols / group_size]
  const void* biases = nullptr;    // U32 only, same shape and dtype as scales
  bool rows8 = false;              // U32: rows interleaved in blocks of 8 (see above)

  bool quantized() const { return dtype == DType::I8 || dtype == DType::U32; }
  int64_t groups() const { return group_size > 0 ? cols / group_size : 0; }
  // Bytes of `data` (packed) alone.
  size_t data_bytes() const {
    if (dtype == DType::U32) return static_cast<size_t>(rows * cols * bits / 8);
    return static_cast<size_t>(rows * cols) * dtype_size(dtype);
  }
  // Bytes read by one matvec: data plus scales and biases.
  size_t bytes() const {
    size_t b = data_bytes();
    if (quantized()) {
      b += static_cast<size_t>(rows * groups()) * dtype_size(scale_dtype) *
           (dtype == DType::U32 ? 2 : 1);
    }
    return b;
  }
};

// y[rows] = W · x[cols]. Rows are split over the kernel threads. Quantised weights take a
// fused-dequantisation kernel (x is rounded to int8 per block of 32 or 64 inputs on AVX2 and
// above; exact f32 elsewhere).
void matvec(const WeightMatrix& w, const float* x, float* y);

// ys[i] = ws[i] · x for up to 8 weights that read the same x (q/k/v, gate/up): the same
// results as matvec on each, with the threads woken once and x prepared once.
void matvec_multi(std::span<const WeightMatrix* const> ws, const float* x,
                  std::span<float* const> ys);

// Batched decode: ys[i] = x · ws[i]ᵀ for n rows of x ([n × cols] → ys[i] [n × rows_i]), up to
// 8 weights that read the same x. Each row's result equals matvec (matvec_multi) of that row
// alone bit for bit, while each weight is read from memory once for all n rows: a decode step
// of n sequences costs about one pass over the weights, not n. Any n >= 0; n = 1 is matvec_multi.
void matvec_batch(std::span<const WeightMatrix* const> ws, const float* x, int64_t n,
                  std::span<float* const> ys);
void matvec_batch(const WeightMatrix& w, const float* x, int64_t n, float* y);

// y[n × rows] = x[n × cols] · Wᵀ, row-major. f32 goes straight to BLAS sgemm. BF16 weights
// on the bf16 path (below) are multiplied as stored, with x rounded to bf16; quantised weights
// are dequantised in tiles, to bf16 on that path, to f32 for sgemm otherwise; F16 to f32.
void matmul(const WeightMatrix& w, const float* x, int64_t n, float* y);

// The arithmetic of matmul (prefill) for BF16 and quantised weights. kAuto: bf16 products
// summed in f32 where the CPU has bf16 dot products (AVX-512 BF16, AMX), f32 sgemm elsewhere;
// kF32: f32 sgemm everywhere, exact to the weights and the same on every machine; kBF16: the
// bf16 path, an error where the CPU lacks it. Rounding activations to bf16 moves logits by
// about 1e-3 of their range (tests/kernels/gemm_bf16_test.cc bounds it). The process starts
// with the environment's MOLT_GEMM (auto, f32 or bf16), else kAuto.
enum class GemmPrecision { kAuto, kF32, kBF16 };
void set_gemm_precision(GemmPrecision p);
GemmPrecision gemm_precision();
// Parses "auto", "f32", "bf16"; errors name `what` (a flag or a variable).
GemmPrecision parse_gemm_precision(const std::string& s, const std::string& what);
// Whether matmul takes the bf16 path now, and the name of the path weights of `dtype` take,
// for reports: "bf16 (oneDNN)" or "f32 (OpenBLAS sgemm)" (F32 and F16 weights always take sgemm).
bool bf16_gemm_active();
const char* gemm_path_name(DType weights = DType::BF16);

// The buffers matmul keeps between calls (one set per calling thread, each grown to the largest
// call) for weights of `dtype` [rows × cols] and n tokens, on the path it takes now: the f32
// tile of widened rows (sgemm path), or x rounded to bf16 and a bf16 tile of dequantised rows
// (bf16 path; none for F32 weights). For footprints (ladder/footprint.cc).
struct MatmulBuffers {
  size_t x_bytes = 0;     // x as bf16
  size_t tile_bytes = 0;  // widened / dequantised rows of W
};
MatmulBuffers matmul_buffers(DType dtype, int64_t rows, int64_t cols, int64_t n);

// Copies row `row` of W into out[cols] as f32 (embedding lookup). Quantised rows are
// computed as float(scale) * float(q) + float(bias), in f32 with no fused multiply-add.
void dequantize_row(const WeightMatrix& w, int64_t row, float* out);

// Throws molt::Error naming `op` when W is not a usable weight (dtype, shape, group size,
// missing scales or biases).
void check_weight(const WeightMatrix& w, const char* op);

}  // namespace molt
