#include "molt/kernels/linear.h"

#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdlib>
#include <vector>

#include "kernels/gemm_bf16.h"
#include "kernels/matmul.h"
#include "kernels/matvec.h"
#include "kernels/qmatvec.h"
#include "molt/common/error.h"

namespace molt {

void check_weight(const WeightMatrix& w, const char* op) {
  if (w.rows < 0 || w.cols < 0) fail("{}: weight shape [{}, {}] is negative", op, w.rows, w.cols);
  if (w.data == nullptr && w.rows * w.cols > 0) fail("{}: weight data is null", op);
  if (w.dtype == DType::F32 || w.dtype == DType::BF16 || w.dtype == DType::F16) return;
  if (!w.quantized()) {
    fail("{}: weight dtype {} is not supported (F32, BF16, F16, I8, U32)", op, dtype_name(w.dtype));
  }
  if (w.dtype == DType::U32 && w.bits != 4 && w.bits != 8) {
    fail("{}: {} bits per weight is not supported (4 or 8)", op, w.bits);
  }
  if (w.rows8 && (w.dtype != DType::U32 || w.rows % 8 != 0)) {
    fail("{}: rows interleaved by 8 need MLX weights and rows a multiple of 8 ({}, {} rows)", op,
         dtype_name(w.dtype), w.rows);
  }
  if (w.group_size <= 0 || w.cols % w.group_size != 0) {
    fail("{}: group size {} does not divide the input dimension {}", op, w.group_size, w.cols);
  }
  if (w.scale_dtype != DType::F32 && w.scale_dtype != DType::BF16 && w.scale_dtype != DType::F16) {
    fail("{}: scale dtype {} is not supported (F32, BF16, F16)", op, dtype_name(w.scale_dtype));
  }
  if (w.scales == nullptr && w.rows * w.cols > 0) fail("{}: the scales are missing", op);
  if (w.dtype == DType::U32 && w.biases == nullptr && w.rows * w.cols > 0) {
    fail("{}: the biases are missing", op);
  }
}

namespace {

// Row r of any checked W as f32.
void row_f32(const WeightMatrix& w, int64_t r, float* dst) {
  if (w.quantized()) {
    dequantize_row_q(w, r, dst);
  } else if (w.dtype == DType::F32) {
    const float* src = static_cast<const float*>(w.data) + r * w.cols;
    std::copy(src, src + w.cols, dst);
  } else {
    widen_row_16(w.dtype, static_cast<const uint16_t*>(w.data) + r * w.cols, w.cols, dst);
  }
}

// Widens (dequantises) rows [r0, r1) of W into dst (row-major, cols floats per row).
void widen_rows(const WeightMatrix& w, int64_t r0, int64_t r1, float* dst) {
#pragma omp parallel for schedule(static)
  for (int64_t r = r0; r < r1; ++r) row_f32(w, r, dst + (r - r0) * w.cols);
}

// Dequantises rows [r0, r1) of W into dst as bf16 (row-major), through one f32 row per thread.
void widen_rows_bf16(const WeightMatrix& w, int64_t r0, int64_t r1, uint16_t* dst) {
#pragma omp parallel
  {
    std::vector<float> row(static_cast<size_t>(w.cols));
#pragma omp for schedule(static)
    for (int64_t r = r0; r < r1; ++r) {
      row_f32(w, r, row.data());
      uint16_t* out = dst + (r - r0) * w.cols;
      for (int64_t c = 0; c < w.cols; ++c) out[c] = f32_to_bf16(row[static_cast<size_t>(c)]);
    }
  }
}

// Rows of W per tile, tiles of equal size (896 rows as 448 + 448, not 862 + 34). sgemm path:
// every tile repacks x inside sgemm, so tiles are large, up to 16 MiB of f32 (at 896 x 4864
// and n = 512: 166 GFLOP/s against 131 with 1 MiB tiles, and 163 for f32). bf16 path: oneDNN
// packs the tile itself, 2 MiB of bf16 suffice.
int64_t equal_tiles(int64_t rows, int64_t max_rows) {
  const int64_t tiles = (rows + max_rows - 1) / max_rows;
  return (rows + tiles - 1) / tiles;
}
int64_t sgemm_tile_rows(int64_t rows, int64_t cols) {
  return equal_tiles(rows, std::max<int64_t>(64, (int64_t{4} << 20) / cols));
}
int64_t bf16_tile_rows(int64_t rows, int64_t cols) {
  return equal_tiles(rows, std::max<int64_t>(64, (int64_t{1} << 20) / cols));
}

GemmPrecision precision_from_environment() {
  const char* v = std::getenv("MOLT_GEMM");
  return v == nullptr || *v == 0 ? GemmPrecision::kAuto
                                 : parse_gemm_precision(v, "the environment variable MOLT_GEMM");
}

std::atomic<GemmPrecision>& precision() {
  static std::atomic<GemmPrecision> p{precision_from_environment()};
  return p;
}

}  // namespace

void matvec(const WeightMatrix& w, const float* x, float* y) {
  matvec_batch(w, x, 1, y);
}

void matvec_multi(std::span<const WeightMatrix* const> ws, const float* x,
                  std::span<float* const> ys) {
  if (ws.size() != ys.size()) fail("matvec_multi: {} weights but {} outputs", ws.size(), ys.size());
  matvec_batch(ws, x, 1, ys);
}

void matvec_batch(const WeightMatrix& w, const float* x, int64_t n, float* y) {
  check_weight(w, n == 1 ? "matvec" : "matvec_batch");
  if (n < 0) fail("matvec_batch: vector count {} is negative", n);
  if (w.rows == 0 || n == 0) return;
  if (w.cols == 0) {
    std::fill(y, y + n * w.rows, 0.0f);
    return;
  }
  const WeightMatrix* ws = &w;
  if (w.quantized()) {
    qmatvec_dispatch(ws, 1, x, n, &y);
  } else {
    matvec_dispatch(ws, 1, x, n, &y);
  }
}

void matvec_batch(std::span<const WeightMatrix* const> ws, const float* x, int64_t n,
                  std::span<float* const> ys) {
  if (ws.size() != ys.size()) fail("matvec_batch: {} weights but {} outputs", ws.size(), ys.size());
  if (n < 0) fail("matvec_batch: vector count {} is negative", n);
  if (ws.empty()) return;
  const char* op = n == 1 ? "matvec_multi" : "matvec_batch";
  bool one_pass = ws[0]->rows > 0 && ws[0]->cols > 0;
  for (const WeightMatrix* w : ws) {
    check_weight(*w, op);
    one_pass = one_pass && w->rows > 0 && w->cols == ws[0]->cols &&
               (w->quantized() ? ws[0]->quantized() : w->dtype == ws[0]->dtype);
  }
  if (!one_pass) {
    for (size_t i = 0; i < ws.size(); ++i) matvec_batch(*ws[i], x, n, ys[i]);
    return;
  }
  constexpr size_t kMax = 8;
  if (ws.size() > kMax) fail("{}: {} weights, at most {}", op, ws.size(), kMax);
  if (n == 0) return;
  std::array<WeightMatrix, kMax> w;
  for (size_t i = 0; i < ws.size(); ++i) w[i] = *ws[i];
  const auto nw = static_cast<int64_t>(ws.size());
  if (w[0].quantized()) {
    qmatvec_dispatch(w.data(), nw, x, n, ys.data());
  } else {
    matvec_dispatch(w.data(), nw, x, n, ys.data());
  }
}

void matmul(const WeightMatrix& w, const float* x, int64_t n, float* y) {
  check_weight(w, "matmul");
  if (n < 0) fail("matmul: token count {} is negative", n);
  if (n == 0 || w.rows == 0) return;
  if (n == 1 || w.cols == 0) {
    for (int64_t t = 0; t < n; ++t) matvec(w, x + t * w.cols, y + t * w.rows);
    return;
  }
  const int m = static_cast<int>(n), k = static_cast<int>(w.cols);
  if (w.dtype != DType::F32 && w.dtype != DType::F16 && bf16_gemm_active()) {
    matmul_bf16(w, x, n, y);
    return;
  }
  if (w.dtype == DType::F32) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, static_cast<int>(w.rows), k, 1.0f, x, k,
                static_cast<const float*>(w.data), k, 0.0f, y, static_cast<int>(w.rows));
    return;
  }
  matmul_widened(w, x, n, y, sgemm_tile_rows(w.rows, w.cols));
}

void matmul_widened(const WeightMatrix& w, const float* x, int64_t n, float* y, int64_t tile_rows) {
  // Each tile of W rows is widened to f32 and writes columns [r0, r1) of y (ldc = rows).
  // The buffer is kept for the next call.
  const int m = static_cast<int>(n), k = static_cast<int>(w.cols);
  const int64_t tile = std::max<int64_t>(1, tile_rows);
  thread_local std::vector<float> buf;
  buf.resize(static_cast<size_t>(std::min(tile, w.rows) * w.cols));
  for (int64_t r0 = 0; r0 < w.rows; r0 += tile) {
    const int64_t r1 = std::min(w.rows, r0 + tile);
    widen_rows(w, r0, r1, buf.data());
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, static_cast<int>(r1 - r0), k, 1.0f, x,
                k, buf.data(), k, 0.0f, y + r0, static_cast<int>(w.rows));
  }
}

void matmul_bf16(const WeightMatrix& w, const float* x, int64_t n, float* y, int64_t tile_rows) {
  // x once as bf16; BF16 weights as stored; quantised ones dequantised to bf16 in tiles of
  // ~2 MiB, each tile writing columns [r0, r1) of y. The buffers are kept for the next call.
  thread_local std::vector<uint16_t> xb, tile;
  xb.resize(static_cast<size_t>(n * w.cols));
  round_to_bf16(x, n * w.cols, xb.data());
  if (w.dtype == DType::BF16) {
    gemm_bf16(xb.data(), n, w.cols, static_cast<const uint16_t*>(w.data), w.rows, y, w.rows);
    return;
  }
  const int64_t rows = tile_rows > 0 ? tile_rows : bf16_tile_rows(w.rows, w.cols);
  tile.resize(static_cast<size_t>(std::min(rows, w.rows) * w.cols));
  for (int64_t r0 = 0; r0 < w.rows; r0 += rows) {
    const int64_t r1 = std::min(w.rows, r0 + rows);
    widen_rows_bf16(w, r0, r1, tile.data());
    gemm_bf16(xb.data(), n, w.cols, tile.data(), r1 - r0, y + r0, w.rows);
  }
}

MatmulBuffers matmul_buffers(DType dtype, int64_t rows, int64_t cols, int64_t n) {
  MatmulBuffers b;
  if (dtype == DType::F32 || n <= 1 || rows <= 0 || cols <= 0) return b;
  const bool quantized = dtype == DType::I8 || dtype == DType::U32;
  if (dtype != DType::F16 && bf16_gemm_active()) {
    b.x_bytes = static_cast<size_t>(n * cols) * 2;
    if (quantized) b.tile_bytes = static_cast<size_t>(bf16_tile_rows(rows, cols) * cols) * 2;
  } else {
    b.tile_bytes = static_cast<size_t>(sgemm_tile_rows(rows, cols) * cols) * sizeof(float);
  }
  return b;
}

GemmPrecision parse_gemm_precision(const std::string& s, const std::string& what) {
  if (s == "auto") return GemmPrecision::kAuto;
  if (s == "f32") return GemmPrecision::kF32;
  if (s == "bf16") {
    if (!bf16_gemm_supported()) {
      fail(
          "{}: bf16 GEMM needs a CPU with bf16 dot products (AVX-512 BF16 or AMX); this one "
          "has none (use auto or f32)",
          what);
    }
    return GemmPrecision::kBF16;
  }
  fail("{}: '{}' is not a GEMM precision (auto, f32 or bf16)", what, s);
}

void set_gemm_precision(GemmPrecision p) {
  if (p == GemmPrecision::kBF16 && !bf16_gemm_supported()) {
    fail("set_gemm_precision: this CPU has no bf16 dot products");
  }
  precision().store(p);
}

GemmPrecision gemm_precision() {
  return precision().load();
}

bool bf16_gemm_active() {
  const GemmPrecision p = precision().load();
  return p == GemmPrecision::kBF16 || (p == GemmPrecision::kAuto && bf16_gemm_supported());
}

const char* gemm_path_name(DType weights) {
  const bool bf16 = weights != DType::F32 && weights != DType::F16 && bf16_gemm_active();
  return bf16 ? "bf16 (oneDNN)" : "f32 (OpenBLAS sgemm)";
}

void dequantize_row(const WeightMatrix& w, int64_t row, float* out) {
  check_weight(w, "dequantize_row");
  if (row < 0 || row >= w.rows) fail("dequantize_row: row {} is outside [0, {})", row, w.rows);
  row_f32(w, row, out);
}

}  // namespace molt
