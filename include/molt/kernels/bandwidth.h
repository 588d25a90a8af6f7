// Memory bandwidth of this machine: the bound a decode step (which streams every weight once
// per token) cannot beat.
#pragma once

#include <cstddef>

namespace molt {

// STREAM triad a[i] = b[i] + s·c[i] over three float arrays of `mib` MiB each, on the kernel
// threads (molt::num_threads()); best of `repeats` runs. Bytes counted as STREAM does:
// 3 × 4 per element (write-allocate traffic is not counted). Returns GB/s (10⁹ bytes).
double measure_triad_bandwidth_gbs(size_t mib, int repeats);

// Read-only bandwidth: a sum over one float array of `mib` MiB, best of `repeats`. This is
// the access pattern of matvec (weights read once, nothing written back).
double measure_read_bandwidth_gbs(size_t mib, int repeats);

}  // namespace molt
