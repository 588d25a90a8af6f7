// Prefill GEMM with bf16 inputs and f32 accumulation, on CPUs with bf16 dot products.
//
// Dense bf16 weights are multiplied as stored; activations are rounded to bf16 once per call.
// oneDNN's matmul (brgemm kernels for AVX-512 BF16 and AMX) does the work: on a 2-core Zen 4
// it runs at 3.5–3.7× OpenBLAS sgemm on the prefill shapes of Qwen2.5 0.5B and 1.5B, where a
// Highway kernel (1.0.3 emulates bf16 products with f32 FMAs) cannot beat sgemm.
#pragma once

#include <cstdint>

namespace molt {

// Whether this CPU multiplies bf16 natively (oneDNN's dispatch reaches avx512_core_bf16 or
// above). Cached after the first call.
bool bf16_gemm_supported();

// y[t · ldy + r] = Σ_c x[t · cols + c] · w[r · cols + c] for t < n, r < rows (x · Wᵀ), with x
// and w bf16, products summed in f32. Only columns [0, rows) of each y row are written. Safe to
// call from several threads at once, inside or outside a parallel region.
void gemm_bf16(const uint16_t* x, int64_t n, int64_t cols, const uint16_t* w, int64_t rows,
               float* y, int64_t ldy);

// The matmul primitives kept for reuse (one per shape, least recently used dropped first):
// at most kGemmBf16CachedShapes. A server sees a new prompt length with every request; an
// unbounded cache grew for as long as it ran.
inline constexpr int kGemmBf16CachedShapes = 64;
int gemm_bf16_cached_shapes();

// dst[i] = bf16(src[i]), round to nearest even (threads split long arrays).
void round_to_bf16(const float* src, int64_t count, uint16_t* dst);

}  // namespace molt
