// Memory bandwidth of this machine: the bound a decode step (which streams every weight once
// per token) cannot beat.
#pragma once

#include <cstddef>
#include <cstdint>

namespace molt {

// STREAM triad a[i] = b[i] + s·c[i] over three float arrays of `mib` MiB each, on the kernel
// threads (molt::num_threads()); best of `repeats` runs. Bytes counted as STREAM does:
// 3 × 4 per element (write-allocate traffic is not counted). Returns GB/s (10⁹ bytes).
double measure_triad_bandwidth_gbs(size_t mib, int repeats);

// Read-only bandwidth: a sum over one float array of `mib` MiB, best of `repeats`. This is
// the access pattern of matvec (weights read once, nothing written back).
double measure_read_bandwidth_gbs(size_t mib, int repeats);

}  // namespace molt

namespace molt {

// GFLOP/s of OpenBLAS sgemm C[m × n] = A[m × k] · B[n × k]ᵀ (row-major, as prefill calls it),
// best of `repeats` after one warm-up, on the kernel threads.
double measure_sgemm_gflops(int64_t m, int64_t n, int64_t k, int repeats);

}  // namespace molt
