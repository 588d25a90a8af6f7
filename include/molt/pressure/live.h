// Live Linux memory signals: cgroup limits and events (v2: memory.max / memory.high /
// memory.current / memory.events; v1 memory.limit_in_bytes / usage_in_bytes as a fallback),
// pressure stall information (/proc/pressure/memory, with a poll() trigger) and MemAvailable.
// Every reader says why it is unavailable instead of failing: containers and older kernels
// lack some of them.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "molt/pressure/budget.h"

namespace molt {

struct CgroupMemory {
  int version = 2;
  std::filesystem::path dir;
  std::optional<uint64_t> max;   // hard limit (v2 memory.max, v1 limit_in_bytes); nullopt = none
  std::optional<uint64_t> high;  // throttle limit (v2 memory.high, v1 soft limit); nullopt = none
  uint64_t current = 0;          // bytes charged now
  std::map<std::string, uint64_t> events;  // v2 memory.events; v1: failcnt, oom_kill
  // The tighter of max and high, when either is set.
  std::optional<uint64_t> limit() const;
};

// The cgroup of this process; nullopt and a reason in *why_not when there is none to read.
std::optional<CgroupMemory> read_cgroup_memory(std::string* why_not);
// Parses a limit file's content: a number of bytes, or "max" (v1: ≥ 2^62) = no limit.
std::optional<uint64_t> parse_cgroup_limit(const std::string& text, const std::string& source);
// Parses "key value" lines (memory.events, memory.stat).
std::map<std::string, uint64_t> parse_key_values(const std::string& text,
                                                 const std::string& source);

struct PsiLine {
  double avg10 = 0, avg60 = 0, avg300 = 0;  // percent of wall time stalled
  uint64_t total_us = 0;
};
struct PsiMemory {
  PsiLine some, full;
};
PsiMemory parse_psi(const std::string& text, const std::string& source);
std::optional<PsiMemory> read_psi_memory(std::string* why_not);

// A PSI trigger: the kernel wakes poll() when tasks stalled on memory for `stall_us` within
// any `window_us` (unprivileged processes need a window that is a multiple of 2 s).
class PsiTrigger {
 public:
  static std::unique_ptr<PsiTrigger> open(uint64_t stall_us, uint64_t window_us,
                                          std::string* why_not);
  ~PsiTrigger();
  // True when the trigger fired; waits at most timeout_ms (0: just looks).
  bool fired(int timeout_ms);

 private:
  explicit PsiTrigger(int fd) : fd_(fd) {}
  int fd_ = -1;
};

// MemAvailable of /proc/meminfo in bytes.
std::optional<uint64_t> read_mem_available(std::string* why_not);
uint64_t parse_meminfo_field(const std::string& text, const std::string& key,
                             const std::string& source);

struct LiveOptions {
  double reserve_mib = 64;   // kept free for everything else
  double squeeze = 0.8;      // on a PSI trigger or a new cgroup high/max event: budget =
  double squeeze_ms = 2000;  //   squeeze × what is used now, for squeeze_ms
  uint64_t psi_stall_us = 150000, psi_window_us = 2000000;
};

// Budget = what the session uses + the smallest headroom among the sources present (cgroup
// limit − charged, MemAvailable) − reserve; squeezed while the kernel reports pressure.
class LiveBudget : public BudgetSource {
 public:
  explicit LiveBudget(const LiveOptions& o = {});
  ~LiveBudget() override;
  double budget_mib(const BudgetQuery& q) override;
  void idle(double poll_ms) override;
  std::string describe() const override;
  // One line per source: what it reads, or why it is skipped.
  const std::vector<std::string>& notes() const { return notes_; }

 private:
  LiveOptions o_;
  bool cgroup_ = false, meminfo_ = false;
  std::unique_ptr<PsiTrigger> trigger_;
  uint64_t last_events_ = 0;
  bool pending_ = false;  // a trigger that fired while idle
  std::chrono::steady_clock::time_point squeezed_until_{};
  std::vector<std::string> notes_;
};

}  // namespace molt
