// /proc readers for the resident set. smaps_rollup sums every mapping (one file read); statm
// is the cheap fallback on kernels before 4.14.
#include "molt/ladder/process_memory.h"

#include <unistd.h>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <fstream>
#include <sstream>
#include <string>

namespace molt {
namespace {

// "Key:   1234 kB" lines → bytes; 0 when absent.
size_t kib_field(const std::string& text, const std::string& key) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key, 0) == 0 && line.size() > key.size() && line[key.size()] == ':') {
      return std::stoull(line.substr(key.size() + 1)) * 1024;
    }
  }
  return 0;
}

std::string slurp(const std::string& path) {
  std::ifstream f(path);
  if (!f) return {};
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

}  // namespace

ProcessMemory read_process_memory() {
  ProcessMemory m;
  const std::string rollup = slurp("/proc/self/smaps_rollup");
  if (!rollup.empty()) {
    m.source = "smaps_rollup";
    m.rss_bytes = kib_field(rollup, "Rss");
    m.anon_bytes = kib_field(rollup, "Anonymous");
    m.file_bytes = m.rss_bytes > m.anon_bytes ? m.rss_bytes - m.anon_bytes : 0;
  } else {
    m.source = "statm";
    std::istringstream in(slurp("/proc/self/statm"));
    size_t size = 0, resident = 0, shared = 0;
    in >> size >> resident >> shared;
    const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    m.rss_bytes = resident * page;
    m.file_bytes = shared * page;
    m.anon_bytes = m.rss_bytes > m.file_bytes ? m.rss_bytes - m.file_bytes : 0;
  }
  m.peak_bytes = kib_field(slurp("/proc/self/status"), "VmHWM");
  return m;
}

void return_free_memory() {
#if defined(__GLIBC__)
  malloc_trim(0);
#endif
}

bool reset_peak_rss() {
  std::ofstream f("/proc/self/clear_refs");
  if (!f) return false;
  f << "5";
  f.flush();
  return static_cast<bool>(f);
}

}  // namespace molt
