// Live Linux memory signals: cgroup limits and events (v2: memory.max / memory.high /
// memory.current / memory.events; v1 memory.limit_in_bytes / usage_in_bytes as a fallback),
// pressure stall information (/proc/pressure/memory, with a poll() trigger) and MemAvailable.
// Every reader says why it is unavailable instead of failing: containers and older kernels
// lack some of them. Malformed content is an Error naming the file.
//
// Each reader takes the directory that stands for "/" (default "/"), so tests run them on a
// fake tree: root/proc/self/mountinfo, root/proc/self/cgroup, root/<mount point>,
// root/proc/pressure/memory, root/proc/meminfo.
#pragma once

#include <cstdint>
#include <deque>
#include <filesystem>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "molt/pressure/budget.h"

namespace molt {

struct CgroupMemory {
  int version = 2;
  std::filesystem::path dir;     // as read, i.e. under the root the reader was given
  std::optional<uint64_t> max;   // hard limit (v2 memory.max, v1 limit_in_bytes); nullopt = none
  std::optional<uint64_t> high;  // throttle limit (v2 memory.high, v1 soft limit); nullopt = none
  uint64_t current = 0;          // bytes charged now
  std::map<std::string, uint64_t> events;  // v2 memory.events; v1: failcnt, oom_kill
  std::vector<std::string> files;          // names of the files that were read
  // The tighter of max and high, when either is set.
  std::optional<uint64_t> limit() const;
};

// The cgroup of this process; nullopt and a reason in *why_not when there is none to read.
std::optional<CgroupMemory> read_cgroup_memory(std::string* why_not,
                                               const std::filesystem::path& root = "/");
// The memory files of one cgroup directory (version 2 or 1); nullopt and a reason when the
// charge file (memory.current / memory.usage_in_bytes) is unreadable.
std::optional<CgroupMemory> read_cgroup_files(int version, const std::filesystem::path& dir,
                                              std::string* why_not);
// Parses a limit file's content: a number of bytes, or "max" (v1: ≥ 2^62) = no limit.
std::optional<uint64_t> parse_cgroup_limit(const std::string& text, const std::string& source);
// Parses "key value" lines (memory.events, memory.stat).
std::map<std::string, uint64_t> parse_key_values(const std::string& text,
                                                 const std::string& source);

// One line of /proc/self/mountinfo (proc(5)); paths with their \ooo escapes decoded.
struct MountEntry {
  std::string root;         // the directory of the filesystem that is mounted (4th field)
  std::string mount_point;  // where it is mounted (5th field)
  std::string fstype, source, super_options;
};
std::vector<MountEntry> parse_mountinfo(const std::string& text, const std::string& source);
// A cgroup path (from /proc/self/cgroup) relative to a mount's root: "" for the root itself,
// nullopt when the path is not under it (that mount cannot reach the cgroup).
std::optional<std::filesystem::path> relative_to_mount_root(const std::string& cgroup_path,
                                                            const std::string& mount_root);

struct PsiLine {
  double avg10 = 0, avg60 = 0, avg300 = 0;  // percent of wall time stalled
  uint64_t total_us = 0;
};
struct PsiMemory {
  PsiLine some, full;
};
PsiMemory parse_psi(const std::string& text, const std::string& source);
std::optional<PsiMemory> read_psi_memory(std::string* why_not,
                                         const std::filesystem::path& root = "/");

// A PSI trigger: the kernel wakes poll() when tasks stalled on memory for `stall_us` within
// any `window_us` (unprivileged processes need a window that is a multiple of 2 s). Only a
// file on procfs can carry one; anything else (a fake tree) is refused with a reason.
class PsiTrigger {
 public:
  static std::unique_ptr<PsiTrigger> open(uint64_t stall_us, uint64_t window_us,
                                          std::string* why_not,
                                          const std::filesystem::path& root = "/");
  ~PsiTrigger();
  // True when the trigger fired; waits at most timeout_ms (0: just looks).
  bool fired(int timeout_ms);

 private:
  explicit PsiTrigger(int fd) : fd_(fd) {}
  int fd_ = -1;
};

// MemAvailable of /proc/meminfo in bytes.
std::optional<uint64_t> read_mem_available(std::string* why_not,
                                           const std::filesystem::path& root = "/");
uint64_t parse_meminfo_field(const std::string& text, const std::string& key,
                             const std::string& source);

struct LiveOptions {
  double reserve_mib = 64;   // kept free for everything else
  double squeeze = 0.8;      // on pressure (PSI stall, a new cgroup high/max event): budget =
  double squeeze_ms = 2000;  //   squeeze × what is used now, for squeeze_ms
  // Pressure: `some` stalled ≥ psi_stall_us within psi_window_us (the trigger), or a rise of
  // the some total= counter by ≥ psi_stall_us since the previous check or within the window.
  uint64_t psi_stall_us = 150000, psi_window_us = 2000000;
  std::filesystem::path root = "/";  // where /proc and /sys are read (tests: a fake tree)
  std::function<double()> now_ms;    // the clock for squeeze_ms and the window; empty = steady
};

// Budget = what the session uses + the smallest headroom among the sources present (cgroup
// limit − charged, MemAvailable) − reserve; squeezed while the kernel reports pressure. A
// source that fails after construction keeps its last known value (with a warning), so a
// budget check never throws.
class LiveBudget : public BudgetSource {
 public:
  LiveBudget() : LiveBudget(LiveOptions{}) {}
  explicit LiveBudget(const LiveOptions& o);
  ~LiveBudget() override;
  double budget_mib(const BudgetQuery& q) override;
  void idle(double poll_ms) override;
  std::string describe() const override;
  // One line per source: what it reads, or why it is skipped.
  const std::vector<std::string>& notes() const { return notes_; }
  // One line per source that failed after construction (the first failure only).
  const std::vector<std::string>& warnings() const { return warnings_; }

 private:
  // A source's state between checks.
  struct Source {
    bool present = false;  // read at construction
    bool failing = false;  // its last read failed
    bool warned = false;
    double headroom_mib = 0;  // last known (cgroup, MemAvailable); +inf = no limit
  };
  struct PsiSample {
    double at_ms = 0;
    uint64_t total_us = 0;
  };
  double now_ms() const;
  void fault(Source& s, const std::string& what, const std::string& problem,
             const std::string& keeps);
  bool cgroup_check();
  bool psi_check(double now);
  void meminfo_check();

  LiveOptions o_;
  int64_t checks_ = 0;  // budget checks so far (warnings say since which)
  Source cgroup_, meminfo_, psi_;
  CgroupMemory cg_;  // what construction found: version, dir, files
  std::unique_ptr<PsiTrigger> trigger_;
  std::deque<PsiSample> psi_samples_;  // the previous check's and those within the window
  uint64_t last_events_ = 0;
  bool pending_ = false;  // a trigger that fired while idle
  double squeezed_until_ms_ = -std::numeric_limits<double>::infinity();
  std::vector<std::string> notes_, warnings_;
};

}  // namespace molt
