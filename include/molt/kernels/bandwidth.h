// Memory bandwidth of this machine: the bound a decode step (which streams every weight once
// per token) cannot beat.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

namespace molt {

// A STREAM triad kept ready between passes: the three arrays are allocated and first-touched
// once, so a pass can run between two decode steps and time the memory of that moment.
class TriadProbe {
 public:
  explicit TriadProbe(size_t mib);  // three arrays of `mib` MiB each
  ~TriadProbe();
  TriadProbe(const TriadProbe&) = delete;
  TriadProbe& operator=(const TriadProbe&) = delete;

  // One timed pass a[i] = b[i] + s·c[i] on the kernel threads; returns its seconds.
  double pass();
  // Bytes a pass moves as STREAM counts them: 3 × 4 per element.
  double bytes_per_pass() const;

 private:
  struct Arrays;
  std::unique_ptr<Arrays> arrays_;
};

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
