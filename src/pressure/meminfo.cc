// MemAvailable from /proc/meminfo: what the kernel could give without swapping.
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

std::optional<uint64_t> read_mem_available(std::string* why_not,
                                           const std::filesystem::path& root) {
  const std::filesystem::path path = root / "proc/meminfo";
  std::ifstream f(path);
  if (!f) {
    if (why_not) *why_not = fmt::format("{} is absent", path.string());
    return std::nullopt;
  }
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string text = ss.str();
  if (text.find("MemAvailable:") == std::string::npos) {
    if (why_not)
      *why_not = fmt::format("{} has no MemAvailable (kernel before 3.14)", path.string());
    return std::nullopt;
  }
  return parse_meminfo_field(text, "MemAvailable", path.string());
}

}  // namespace molt
