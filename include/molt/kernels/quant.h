// Quantisation of weight matrices into the layouts molt runs (see molt/kernels/linear.h).
//
// MLX affine ("quantization": {"group_size": G, "bits": B} in config.json), exactly as MLX's
// CPU quantize computes it, per group of G inputs of one row, in f32:
//   scale = max((max - min) / (2^B - 1), 1e-7), negated unless |min| > |max|;
//   edge  = min if |min| > |max| else max;  q0 = rint(edge / scale);
//   if q0 != 0: scale = edge / q0, bias = edge  else bias = 0;
//   q = clamp(rint((w - bias) / scale), 0, 2^B - 1);
// then scale and bias are stored in the model dtype. A weight reads back as scale·q + bias.
//
// Symmetric int8 (molt's own; config "quantization": {"mode": "int8", "bits": 8,
// "group_size": G}, G = 0 for one scale per output channel): per group,
//   scale = absmax / 127 (1 when the group is all zero), q = clamp(rint(w / scale), -127, 127),
// scales stored as f32 in tensor "<linear>.scales" beside an I8 "<linear>.weight".
#pragma once

#include <cstdint>
#include <vector>

#include "molt/common/aligned_vector.h"
#include "molt/kernels/linear.h"

namespace molt {

// A quantised matrix that owns its storage; view() is valid while it lives (and moves keep
// the buffers, so views stay valid across moves of the owner).
struct QuantizedMatrix {
  DType dtype = DType::U32;  // U32 (affine) or I8 (symmetric)
  int64_t rows = 0, cols = 0;
  int bits = 0;
  int64_t group_size = 0;
  DType scale_dtype = DType::F32;
  AlignedVector<uint8_t> data, scales, biases;  // at cache lines, as a mapped file's tensors
  bool rows8 = false;
  WeightMatrix view() const;
};

// Quantises a dense W (F32, BF16 or F16) into MLX affine with `bits` in {4, 8} and
// `group_size` in {32, 64, 128} dividing cols; scales and biases stored as `scale_dtype`
// (F32, F16 or BF16 — MLX uses the model dtype). Rows are split over the kernel threads.
QuantizedMatrix quantize_affine(const WeightMatrix& w, int bits, int64_t group_size,
                                DType scale_dtype);

// The same MLX weights (4- or 8-bit) with rows interleaved in blocks of 8
// (WeightMatrix::rows8): the decode kernel then reads 8 rows' words as one vector, so each
// vector lane sums one row and a block of 8 rows needs no horizontal sums and no per-row set-up
// (4-bit: about twice the arithmetic rate of the row-major kernel at cols 896). Values are
// unchanged (dequantize_row gives the same floats). Needs a U32 W whose rows are a multiple
// of 8.
QuantizedMatrix interleave_rows8(const WeightMatrix& w);

// Whether this CPU's matvec kernel runs faster on interleaved MLX weights: true on x86 with
// AVX2 and above (elsewhere the portable kernel reads a row at a time and gathers interleaved
// rows first, so the row-major layout is the faster one).
bool rows8_preferred();

// The quantised decode kernel this CPU dispatches to, for reports: "AVX-512 VNNI", "AVX2" or
// "portable (Highway <target>)".
const char* qmatvec_kernel_name();

// Quantises a dense W into symmetric int8; group_size 0 = per output channel, else one of
// 32, 64, 128 dividing cols. Scales are f32.
QuantizedMatrix quantize_int8(const WeightMatrix& w, int64_t group_size);

}  // namespace molt
