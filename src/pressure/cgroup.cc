// cgroup memory readers. v2 first (a cgroup2 mount from /proc/self/mountinfo and the "0::"
// line of /proc/self/cgroup); v1's memory controller as a fallback. The process's cgroup path
// P lives at mount point / (P relative to the mount's root): a container's bind mount of its
// own cgroup has root "/docker/<id>", not "/".
#include <charconv>
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

// An absolute path of the real system, read under `root`.
fs::path under_root(const fs::path& root, const std::string& abs) {
  return root / fs::path(abs).relative_path();
}

// Strict: a torn or corrupted file must not read as a smaller number.
uint64_t parse_u64(const std::string& text, const std::string& source) {
  const size_t b = text.find_first_not_of(" \t\n");
  const size_t e = text.find_last_not_of(" \t\n");
  const std::string word = b == std::string::npos ? "" : text.substr(b, e - b + 1);
  uint64_t v = 0;
  const auto [end, ec] = std::from_chars(word.data(), word.data() + word.size(), v);
  if (word.empty() || ec != std::errc() || end != word.data() + word.size())
    fail("{}: '{}' is not a byte count", source, word.substr(0, 40));
  return v;
}

// mountinfo escapes space, tab, newline and backslash as \ooo.
std::string unescape_octal(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    const auto octal = [&](size_t k) { return k < s.size() && s[k] >= '0' && s[k] <= '7'; };
    if (s[i] == '\\' && octal(i + 1) && octal(i + 2) && octal(i + 3)) {
      out += static_cast<char>((s[i + 1] - '0') * 64 + (s[i + 2] - '0') * 8 + (s[i + 3] - '0'));
      i += 3;
    } else {
      out += s[i];
    }
  }
  return out;
}

struct CgroupEntry {
  std::string controllers, path;
};

// /proc/self/cgroup: "hierarchy-id:controllers:path" per line; v2 is "0::path".
std::vector<CgroupEntry> parse_proc_cgroup(const std::string& text, const std::string& source) {
  std::vector<CgroupEntry> out;
  std::istringstream in(text);
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    if (line.empty()) continue;
    const size_t a = line.find(':'), b = a == std::string::npos ? a : line.find(':', a + 1);
    if (b == std::string::npos)
      fail("{}: line {}: '{}' is not 'id:controllers:path'", source, n, line);
    const std::string id = line.substr(0, a), ctl = line.substr(a + 1, b - a - 1);
    if (id == "0" && !ctl.empty())
      fail("{}: line {}: hierarchy 0 (v2) with controllers '{}'", source, n, ctl);
    out.push_back({id == "0" ? "" : ctl, line.substr(b + 1)});
  }
  return out;
}

bool has_word(const std::string& comma_list, const std::string& word) {
  return ("," + comma_list + ",").find("," + word + ",") != std::string::npos;
}

// This process's cgroup in one hierarchy: v2 (the cgroup2 mounts) or v1 (the "cgroup" mounts
// with the memory controller). *reason says why not when nothing could be read.
std::optional<CgroupMemory> find_in_hierarchy(int version, const std::vector<MountEntry>& mounts,
                                              const std::vector<CgroupEntry>& entries,
                                              const fs::path& root, const fs::path& cgroup_file,
                                              std::string* reason) {
  const std::string controller = version == 2 ? "" : "memory";
  const CgroupEntry* entry = nullptr;
  for (const CgroupEntry& e : entries) {
    if (version == 2 ? e.controllers.empty() : has_word(e.controllers, controller)) {
      entry = &e;
      break;
    }
  }
  std::vector<std::string> tried;
  for (const MountEntry& m : mounts) {
    if (version == 2 ? m.fstype != "cgroup2"
                     : m.fstype != "cgroup" || !has_word(m.super_options, controller))
      continue;
    if (!entry) {
      *reason = fmt::format("{} has no {} entry", cgroup_file.string(),
                            version == 2 ? "v2 (0::)" : "memory");
      return std::nullopt;
    }
    const auto rel = relative_to_mount_root(entry->path, m.root);
    if (!rel) {
      tried.push_back(fmt::format("the mount at {} has root {}, which does not contain {}",
                                  m.mount_point, m.root, entry->path));
      continue;
    }
    fs::path dir = under_root(root, m.mount_point);
    if (!rel->empty()) dir /= *rel;
    std::string why;
    if (auto cg = read_cgroup_files(version, dir, &why)) return cg;
    tried.push_back(fmt::format("{}: {} (memory controller not enabled there)", dir.string(), why));
  }
  if (tried.empty()) {
    *reason = version == 2 ? "no cgroup2 mount" : "no v1 memory hierarchy";
  } else {
    *reason = fmt::format("{}", fmt::join(tried, "; "));
  }
  return std::nullopt;
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

std::vector<MountEntry> parse_mountinfo(const std::string& text, const std::string& source) {
  std::vector<MountEntry> out;
  std::istringstream in(text);
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    std::istringstream ls(line);
    std::vector<std::string> f;
    for (std::string w; ls >> w;) f.push_back(w);
    if (f.empty()) continue;
    // id parent major:minor root mount-point options [optional fields...] - type source super
    size_t dash = 6;
    while (dash < f.size() && f[dash] != "-") ++dash;
    if (f.size() < 6 || dash + 2 >= f.size()) {
      fail(
          "{}: line {}: expected 'id parent major:minor root mount-point options [tags] - "
          "type source [options]', got '{}'",
          source, n, line.substr(0, 120));
    }
    out.push_back({unescape_octal(f[3]), unescape_octal(f[4]), f[dash + 1],
                   unescape_octal(f[dash + 2]), dash + 3 < f.size() ? f[dash + 3] : ""});
  }
  return out;
}

std::optional<fs::path> relative_to_mount_root(const std::string& cgroup_path,
                                               const std::string& mount_root) {
  // A path outside the reader's cgroup namespace shows as "/../.."; it is under no mount.
  const fs::path p(cgroup_path), r(mount_root);
  for (const fs::path& part : p)
    if (part == "..") return std::nullopt;
  auto pi = p.begin();
  for (const fs::path& part : r) {
    if (part.empty() || part == "/") continue;  // the root and trailing slashes
    while (pi != p.end() && (pi->empty() || *pi == "/")) ++pi;
    if (pi == p.end() || *pi != part) return std::nullopt;
    ++pi;
  }
  fs::path rel;
  for (; pi != p.end(); ++pi)
    if (!pi->empty() && *pi != "/") rel /= *pi;
  return rel;
}

std::optional<CgroupMemory> read_cgroup_files(int version, const fs::path& dir,
                                              std::string* why_not) {
  CgroupMemory m;
  m.version = version;
  m.dir = dir;
  const auto read = [&](const char* name) {
    auto text = slurp(dir / name);
    if (text) m.files.push_back(name);
    return text;
  };
  const auto at = [&](const char* name) { return (dir / name).string(); };
  const char* charged = version == 2 ? "memory.current" : "memory.usage_in_bytes";
  const auto current = read(charged);
  if (!current) {
    if (why_not) *why_not = fmt::format("{} unreadable", charged);
    return std::nullopt;
  }
  m.current = parse_u64(*current, at(charged));
  if (version == 2) {
    if (auto t = read("memory.max")) m.max = parse_cgroup_limit(*t, at("memory.max"));
    if (auto t = read("memory.high")) m.high = parse_cgroup_limit(*t, at("memory.high"));
    if (auto t = read("memory.events")) m.events = parse_key_values(*t, at("memory.events"));
  } else {
    if (auto t = read("memory.limit_in_bytes"))
      m.max = parse_cgroup_limit(*t, at("memory.limit_in_bytes"));
    if (auto t = read("memory.soft_limit_in_bytes"))
      m.high = parse_cgroup_limit(*t, at("memory.soft_limit_in_bytes"));
    if (auto t = read("memory.failcnt")) m.events["max"] = parse_u64(*t, at("memory.failcnt"));
    if (auto t = read("memory.oom_control")) {
      auto kv = parse_key_values(*t, at("memory.oom_control"));
      if (kv.count("oom_kill")) m.events["oom_kill"] = kv["oom_kill"];
    }
  }
  return m;
}

std::optional<CgroupMemory> read_cgroup_memory(std::string* why_not, const fs::path& root) {
  const fs::path mountinfo = root / "proc/self/mountinfo", cgroup = root / "proc/self/cgroup";
  const auto say = [&](std::string why) {
    if (why_not) *why_not = std::move(why);
    return std::nullopt;
  };
  const auto mi_text = slurp(mountinfo);
  if (!mi_text) return say(fmt::format("{} unreadable", mountinfo.string()));
  const auto cg_text = slurp(cgroup);
  if (!cg_text) return say(fmt::format("{} unreadable", cgroup.string()));
  const auto mounts = parse_mountinfo(*mi_text, mountinfo.string());
  const auto entries = parse_proc_cgroup(*cg_text, cgroup.string());
  std::string v2, v1;
  if (auto m = find_in_hierarchy(2, mounts, entries, root, cgroup, &v2)) return m;
  if (auto m = find_in_hierarchy(1, mounts, entries, root, cgroup, &v1)) return m;
  return say(fmt::format("cgroup v2: {}; cgroup v1: {}", v2, v1));
}

}  // namespace molt
