// The live budget: headroom from the sources this machine has, squeezed while the kernel
// reports pressure. Sources are found once, at construction; a check re-reads only what was
// found, and a source that breaks later keeps its last value so the decode loop never sees an
// exception from the OS.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <thread>

#include "molt/pressure/live.h"

namespace molt {
namespace {

constexpr double kMiB = 1024.0 * 1024.0;
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr size_t kMaxPsiSamples = 4096;  // checks faster than the clock moves must not grow it

uint64_t event_count(const CgroupMemory& m) {
  uint64_t n = 0;
  for (const char* k : {"high", "max", "oom", "oom_kill"}) {
    auto it = m.events.find(k);
    if (it != m.events.end()) n += it->second;
  }
  return n;
}

double headroom_mib(const CgroupMemory& m) {
  const auto lim = m.limit();
  return lim ? (static_cast<double>(*lim) - static_cast<double>(m.current)) / kMiB : kInf;
}

std::string mib_text(double mib) {
  return std::isfinite(mib) ? fmt::format("{:.0f} MiB", mib) : "none (no limit)";
}

}  // namespace

LiveBudget::LiveBudget(const LiveOptions& o) : o_(o) {
  // Malformed content skips the source with the parse error: a budget is still possible from
  // the others.
  std::string why;
  try {
    if (auto cg = read_cgroup_memory(&why, o_.root)) {
      cg_ = *cg;
      cgroup_.present = true;
      cgroup_.headroom_mib = headroom_mib(*cg);
      last_events_ = event_count(*cg);
      const auto lim = cg->limit();
      notes_.push_back(fmt::format("cgroup v{} {}: charged {:.0f} MiB, limit {}", cg->version,
                                   cg->dir.string(), cg->current / kMiB,
                                   lim ? fmt::format("{:.0f} MiB", *lim / kMiB) : "none"));
    } else {
      notes_.push_back("cgroup: skipped: " + why);
    }
  } catch (const std::exception& e) {
    notes_.push_back(fmt::format("cgroup: skipped: {}", e.what()));
  }
  try {
    if (auto avail = read_mem_available(&why, o_.root)) {
      meminfo_.present = true;
      meminfo_.headroom_mib = *avail / kMiB;
      notes_.push_back(fmt::format("MemAvailable: {:.0f} MiB", *avail / kMiB));
    } else {
      notes_.push_back("MemAvailable: skipped: " + why);
    }
  } catch (const std::exception& e) {
    notes_.push_back(fmt::format("MemAvailable: skipped: {}", e.what()));
  }
  try {
    if (auto psi = read_psi_memory(&why, o_.root)) {
      psi_.present = true;
      psi_samples_.push_back({now_ms(), psi->some.total_us});
      trigger_ = PsiTrigger::open(o_.psi_stall_us, o_.psi_window_us, &why, o_.root);
      // The counter works wherever the file reads (also on a fake tree); the trigger also
      // wakes idle() early.
      const std::string counter =
          fmt::format("some total= rising ≥ {} µs since the previous check or within {} µs",
                      o_.psi_stall_us, o_.psi_window_us);
      notes_.push_back(
          trigger_
              ? fmt::format("PSI memory: some avg10 {:.2f}%; detectors: poll() trigger {} µs "
                            "stalled per {} µs, and {}",
                            psi->some.avg10, o_.psi_stall_us, o_.psi_window_us, counter)
              : fmt::format("PSI memory: some avg10 {:.2f}%; detector: {} (trigger skipped: {})",
                            psi->some.avg10, counter, why));
    } else {
      notes_.push_back("PSI: skipped: " + why);
    }
  } catch (const std::exception& e) {
    notes_.push_back(fmt::format("PSI: skipped: {}", e.what()));
  }
}

LiveBudget::~LiveBudget() = default;

double LiveBudget::now_ms() const {
  if (o_.now_ms) return o_.now_ms();
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void LiveBudget::fault(Source& s, const std::string& what, const std::string& problem,
                       const std::string& keeps) {
  s.failing = true;
  if (s.warned) return;  // once per source: a broken file would otherwise warn every token
  s.warned = true;
  warnings_.push_back(fmt::format("{}: {} since check {}; {}", what, problem, checks_, keeps));
}

bool LiveBudget::cgroup_check() {
  std::optional<CgroupMemory> cg;
  std::string problem;
  try {
    cg = read_cgroup_files(cg_.version, cg_.dir, &problem);
    // A file that was there at construction and is gone now is a fault, not "no limit".
    for (const std::string& f : cg_.files) {
      if (cg && std::find(cg->files.begin(), cg->files.end(), f) == cg->files.end()) {
        problem = f + " unreadable";
        cg.reset();
      }
    }
  } catch (const std::exception& e) {
    problem = fmt::format("unparsable ({})", e.what());
  }
  if (!cg) {
    fault(cgroup_, fmt::format("cgroup v{} {}", cg_.version, cg_.dir.string()), problem,
          "using the last known headroom " + mib_text(cgroup_.headroom_mib));
    return false;
  }
  cgroup_.failing = false;
  cgroup_.headroom_mib = headroom_mib(*cg);
  const uint64_t events = event_count(*cg);
  const bool rose = events > last_events_;
  last_events_ = events;
  return rose;
}

void LiveBudget::meminfo_check() {
  std::string problem = "unreadable";
  try {
    if (auto avail = read_mem_available(nullptr, o_.root)) {
      meminfo_.failing = false;
      meminfo_.headroom_mib = *avail / kMiB;
      return;
    }
  } catch (const std::exception& e) {
    problem = fmt::format("unparsable ({})", e.what());
  }
  fault(meminfo_, "MemAvailable " + (o_.root / "proc/meminfo").string(), problem,
        "using the last known headroom " + mib_text(meminfo_.headroom_mib));
}

bool LiveBudget::psi_check(double now) {
  std::optional<PsiMemory> psi;
  std::string problem = "unreadable";
  try {
    psi = read_psi_memory(nullptr, o_.root);
  } catch (const std::exception& e) {
    problem = fmt::format("unparsable ({})", e.what());
  }
  if (!psi) {
    fault(psi_, "PSI " + (o_.root / "proc/pressure/memory").string(), problem,
          "its total= counter signals no pressure until it reads again");
    return false;
  }
  const uint64_t total = psi->some.total_us;
  // After an outage (or a counter that went back) the old baseline says nothing about now.
  if (psi_.failing || psi_samples_.empty() || total < psi_samples_.back().total_us) {
    psi_.failing = false;
    psi_samples_.assign(1, {now, total});
    return false;
  }
  psi_samples_.push_back({now, total});
  // Keep the previous check, and the newest check at least a window old: the rise then covers
  // both "between two checks" and "within the window" (checks every few ms see small steps).
  const double window_ms = static_cast<double>(o_.psi_window_us) / 1000.0;
  while (psi_samples_.size() > 2 && psi_samples_[1].at_ms <= now - window_ms)
    psi_samples_.pop_front();
  while (psi_samples_.size() > kMaxPsiSamples) psi_samples_.pop_front();
  if (total - psi_samples_.front().total_us < o_.psi_stall_us) return false;
  psi_samples_.assign(1, {now, total});  // one stall squeezes once, as the trigger would
  return true;
}

double LiveBudget::budget_mib(const BudgetQuery& q) {
  ++checks_;
  const double now = now_ms();
  bool squeeze = false;
  if (cgroup_.present) squeeze = cgroup_check() || squeeze;
  if (meminfo_.present) meminfo_check();
  if (psi_.present) squeeze = psi_check(now) || squeeze;
  if (pending_ || (trigger_ && trigger_->fired(0))) squeeze = true;
  pending_ = false;
  if (squeeze) squeezed_until_ms_ = now + o_.squeeze_ms;
  double headroom = kInf;
  if (cgroup_.present) headroom = std::min(headroom, cgroup_.headroom_mib);
  if (meminfo_.present) headroom = std::min(headroom, meminfo_.headroom_mib);
  double budget = q.used_mib + headroom - o_.reserve_mib;
  if (now < squeezed_until_ms_) budget = std::min(budget, o_.squeeze * q.used_mib);
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
  std::string s = fmt::format("live ({})", fmt::join(notes_, "; "));
  if (!warnings_.empty()) s += fmt::format(" warnings: {}", fmt::join(warnings_, "; "));
  return s;
}

}  // namespace molt
