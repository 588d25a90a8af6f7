#include <fstream>
#include <sstream>

#include "molt/common/error.h"
#include "molt/pressure/live.h"

namespace molt {

uint64_t parse_meminfo_field(const std::string& text, const std::string& key,
                             const std::string& source) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key + ":", 0) != 0) continue;
    std::istringstream ls(line.substr(key.size() + 1));
    uint64_t kb = 0;
    std::string unit;
    if (!(ls >> kb >> unit) || unit != "kB") fail("{}: {}: cannot read '{}'", source, key, line);
    return kb * 1024;
  }
  fail("{}: no {} line", source, key);
}

std::optional<uint64_t> read_mem_available(std::string* why_not) {
  std::ifstream f("/proc/meminfo");
  if (!f) {
    if (why_not) *why_not = "/proc/meminfo is absent";
    return std::nullopt;
  }
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string text = ss.str();
  if (text.find("MemAvailable:") == std::string::npos) {
    if (why_not) *why_not = "/proc/meminfo has no MemAvailable (kernel before 3.14)";
    return std::nullopt;
  }
  return parse_meminfo_field(text, "MemAvailable", "/proc/meminfo");
}

}  // namespace molt
