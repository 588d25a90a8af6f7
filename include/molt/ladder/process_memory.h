// What this process really holds in memory, read from /proc: the ground truth that footprint
// accounting is checked against.
#pragma once

#include <cstddef>
#include <string>

namespace molt {

struct ProcessMemory {
  size_t rss_bytes = 0;   // resident set (smaps_rollup "Rss", else statm)
  size_t anon_bytes = 0;  // of which anonymous (heap, KV cache); 0 when smaps_rollup is absent
  size_t file_bytes = 0;  // of which file-backed (mmapped weights, code)
  size_t peak_bytes = 0;  // high-water mark of RSS since start or the last reset (VmHWM)
  std::string source;     // "smaps_rollup" or "statm"
};

// Reads /proc/self/smaps_rollup (falls back to /proc/self/statm) and /proc/self/status.
ProcessMemory read_process_memory();

// Resets VmHWM to the current RSS (writes 5 to /proc/self/clear_refs) so the peak of one
// phase can be measured; false where the kernel does not allow it.
bool reset_peak_rss();

// Hands memory the allocator holds free back to the OS (glibc keeps freed heap chunks resident;
// a released cache would otherwise still count in RSS). Cheap; called after a release.
void return_free_memory();

inline double to_mib(size_t bytes) {
  return static_cast<double>(bytes) / (1024.0 * 1024.0);
}

}  // namespace molt
