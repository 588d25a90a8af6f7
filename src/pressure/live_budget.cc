// The live budget: headroom from the sources this machine has, squeezed while the kernel
// reports pressure.
#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <thread>

#include "molt/pressure/live.h"

namespace molt {
namespace {

constexpr double kMiB = 1024.0 * 1024.0;

uint64_t event_count(const CgroupMemory& m) {
  uint64_t n = 0;
  for (const char* k : {"high", "max", "oom", "oom_kill"}) {
    auto it = m.events.find(k);
    if (it != m.events.end()) n += it->second;
  }
  return n;
}

}  // namespace

LiveBudget::LiveBudget(const LiveOptions& o) : o_(o) {
  std::string why;
  if (auto cg = read_cgroup_memory(&why)) {
    cgroup_ = true;
    last_events_ = event_count(*cg);
    const auto lim = cg->limit();
    notes_.push_back(fmt::format("cgroup v{} {}: charged {:.0f} MiB, limit {}", cg->version,
                                 cg->dir.string(), cg->current / kMiB,
                                 lim ? fmt::format("{:.0f} MiB", *lim / kMiB) : "none"));
  } else {
    notes_.push_back("cgroup: skipped: " + why);
  }
  if (auto avail = read_mem_available(&why)) {
    meminfo_ = true;
    notes_.push_back(fmt::format("MemAvailable: {:.0f} MiB", *avail / kMiB));
  } else {
    notes_.push_back("MemAvailable: skipped: " + why);
  }
  if (auto psi = read_psi_memory(&why)) {
    trigger_ = PsiTrigger::open(o.psi_stall_us, o.psi_window_us, &why);
    notes_.push_back(
        trigger_ ? fmt::format("PSI memory: some avg10 {:.2f}%; trigger {} µs stalled per {} µs",
                               psi->some.avg10, o.psi_stall_us, o.psi_window_us)
                 : fmt::format("PSI memory: some avg10 {:.2f}%; trigger skipped: {}",
                               psi->some.avg10, why));
  } else {
    notes_.push_back("PSI: skipped: " + why);
  }
}

LiveBudget::~LiveBudget() = default;

double LiveBudget::budget_mib(const BudgetQuery& q) {
  double headroom = std::numeric_limits<double>::infinity();
  bool squeeze = false;
  if (cgroup_) {
    if (auto cg = read_cgroup_memory(nullptr)) {
      if (auto lim = cg->limit()) {
        headroom = std::min(headroom,
                            (static_cast<double>(*lim) - static_cast<double>(cg->current)) / kMiB);
      }
      const uint64_t events = event_count(*cg);
      squeeze = events > last_events_;
      last_events_ = events;
    }
  }
  if (meminfo_) {
    if (auto avail = read_mem_available(nullptr)) headroom = std::min(headroom, *avail / kMiB);
  }
  if (pending_ || (trigger_ && trigger_->fired(0))) squeeze = true;
  pending_ = false;
  const auto now = std::chrono::steady_clock::now();
  if (squeeze) {
    squeezed_until_ = now + std::chrono::microseconds(static_cast<int64_t>(o_.squeeze_ms * 1000));
  }
  double budget = q.used_mib + headroom - o_.reserve_mib;
  if (now < squeezed_until_) budget = std::min(budget, o_.squeeze * q.used_mib);
  return std::max(0.0, budget);
}

void LiveBudget::idle(double poll_ms) {
  if (trigger_) {
    pending_ = trigger_->fired(static_cast<int>(poll_ms)) || pending_;  // wakes early on pressure
  } else {
    std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(poll_ms));
  }
}

std::string LiveBudget::describe() const {
  return "live (" + fmt::format("{}", fmt::join(notes_, "; ")) + ")";
}

}  // namespace molt
