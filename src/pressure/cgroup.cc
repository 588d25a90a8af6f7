// cgroup memory readers. v2 first (the cgroup2 mount from /proc/self/mountinfo and the "0::"
// line of /proc/self/cgroup); v1's memory controller as a fallback.
#include <fstream>
#include <sstream>

#include "molt/common/error.h"
#include "molt/pressure/live.h"

namespace molt {
namespace {

namespace fs = std::filesystem;

std::optional<std::string> slurp(const fs::path& p) {
  std::ifstream f(p);
  if (!f) return std::nullopt;
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Mount point of a filesystem type ("cgroup2"), or of a cgroup v1 hierarchy with `option`.
std::optional<fs::path> mount_point(const std::string& fstype, const std::string& option) {
  const auto text = slurp("/proc/self/mountinfo");
  if (!text) return std::nullopt;
  std::istringstream in(*text);
  std::string line;
  while (std::getline(in, line)) {
    const size_t dash = line.find(" - ");
    if (dash == std::string::npos) continue;
    std::istringstream pre(line.substr(0, dash)), post(line.substr(dash + 3));
    std::string id, parent, dev, root, mnt, type, source, opts;
    pre >> id >> parent >> dev >> root >> mnt;
    post >> type >> source >> opts;
    if (type != fstype) continue;
    if (!option.empty() && ("," + opts + ",").find("," + option + ",") == std::string::npos)
      continue;
    return fs::path(mnt);
  }
  return std::nullopt;
}

// This process's path in the hierarchy whose controllers field matches (v2: "").
std::optional<std::string> cgroup_path(const std::string& controller) {
  const auto text = slurp("/proc/self/cgroup");
  if (!text) return std::nullopt;
  std::istringstream in(*text);
  std::string line;
  while (std::getline(in, line)) {
    const size_t a = line.find(':'), b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    const std::string ctl = line.substr(a + 1, b - a - 1);
    if (ctl == controller || ("," + ctl + ",").find("," + controller + ",") != std::string::npos) {
      if (controller.empty() && ctl != "") continue;
      return line.substr(b + 1);
    }
  }
  return std::nullopt;
}

uint64_t parse_u64(const std::string& text, const std::string& source) {
  std::istringstream in(text);
  uint64_t v = 0;
  if (!(in >> v)) fail("{}: '{}' is not a byte count", source, text.substr(0, 40));
  return v;
}

}  // namespace

std::optional<uint64_t> CgroupMemory::limit() const {
  if (max && high) return std::min(*max, *high);
  return max ? max : high;
}

std::optional<uint64_t> parse_cgroup_limit(const std::string& text, const std::string& source) {
  std::istringstream in(text);
  std::string word;
  in >> word;
  if (word == "max") return std::nullopt;
  const uint64_t v = parse_u64(word, source);
  if (v >= (uint64_t{1} << 62)) return std::nullopt;  // v1 writes "unlimited" as ~2^63
  return v;
}

std::map<std::string, uint64_t> parse_key_values(const std::string& text,
                                                 const std::string& source) {
  std::map<std::string, uint64_t> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream ls(line);
    std::string key, value;
    if (!(ls >> key)) continue;
    if (!(ls >> value)) fail("{}: line '{}' has no value", source, line);
    out[key] = parse_u64(value, fmt::format("{}: {}", source, key));
  }
  return out;
}

std::optional<CgroupMemory> read_cgroup_memory(std::string* why_not) {
  // v2
  std::string v2_reason;
  if (auto mnt = mount_point("cgroup2", ""); !mnt) {
    v2_reason = "no cgroup2 mount";
  } else if (auto rel = cgroup_path(""); !rel) {
    v2_reason = "/proc/self/cgroup has no v2 (0::) entry";
  } else {
    const fs::path dir = *mnt / fs::path(*rel).relative_path();
    const auto current = slurp(dir / "memory.current");
    if (!current) {
      v2_reason =
          fmt::format("{} has no memory.current (memory controller not enabled)", dir.string());
    } else {
      CgroupMemory m;
      m.version = 2;
      m.dir = dir;
      m.current = parse_u64(*current, (dir / "memory.current").string());
      if (auto t = slurp(dir / "memory.max"))
        m.max = parse_cgroup_limit(*t, (dir / "memory.max").string());
      if (auto t = slurp(dir / "memory.high"))
        m.high = parse_cgroup_limit(*t, (dir / "memory.high").string());
      if (auto t = slurp(dir / "memory.events"))
        m.events = parse_key_values(*t, (dir / "memory.events").string());
      return m;
    }
  }
  // v1 memory controller
  std::string v1_reason;
  if (auto mnt = mount_point("cgroup", "memory"); !mnt) {
    v1_reason = "no v1 memory hierarchy";
  } else if (auto rel = cgroup_path("memory"); !rel) {
    v1_reason = "/proc/self/cgroup has no memory entry";
  } else {
    const fs::path dir = *mnt / fs::path(*rel).relative_path();
    const auto usage = slurp(dir / "memory.usage_in_bytes");
    if (!usage) {
      v1_reason = fmt::format("{}/memory.usage_in_bytes is not readable", dir.string());
    } else {
      CgroupMemory m;
      m.version = 1;
      m.dir = dir;
      m.current = parse_u64(*usage, (dir / "memory.usage_in_bytes").string());
      if (auto t = slurp(dir / "memory.limit_in_bytes"))
        m.max = parse_cgroup_limit(*t, (dir / "memory.limit_in_bytes").string());
      if (auto t = slurp(dir / "memory.soft_limit_in_bytes"))
        m.high = parse_cgroup_limit(*t, (dir / "memory.soft_limit_in_bytes").string());
      if (auto t = slurp(dir / "memory.failcnt"))
        m.events["max"] = parse_u64(*t, (dir / "memory.failcnt").string());
      if (auto t = slurp(dir / "memory.oom_control")) {
        auto kv = parse_key_values(*t, (dir / "memory.oom_control").string());
        if (kv.count("oom_kill")) m.events["oom_kill"] = kv["oom_kill"];
      }
      return m;
    }
  }
  if (why_not) *why_not = fmt::format("cgroup v2: {}; cgroup v1: {}", v2_reason, v1_reason);
  return std::nullopt;
}

}  // namespace molt
