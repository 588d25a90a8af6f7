// A budget source named by a short spec string, so every front end (CLI flags, a server's
// request, the C API) offers the same ones:
//
//   trace:FILE   a pressure trace replayed against the generation's clock
//   live         this machine's signals (cgroup, PSI, MemAvailable)
//   fixed:MIB    a constant budget
//   push[:MIB]   a value the app sets from any thread (iOS/Android-style memory warnings);
//                no limit until the first push unless MIB is given
//   none         no limit (also the empty string)
#pragma once

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "molt/pressure/budget.h"

namespace molt {

// A constant budget (infinite: no limit). Nothing changes while parked, so idle returns at once.
class FixedBudget : public BudgetSource {
 public:
  explicit FixedBudget(double mib);
  double budget_mib(const BudgetQuery&) override { return mib_; }
  void idle(double) override {}
  std::string describe() const override;

 private:
  double mib_;
};

// The app's own number. set_mib may be called from any thread while another steps the
// generation: the value is atomic, and idle() wakes early when a new value arrives.
class PushBudget : public BudgetSource {
 public:
  explicit PushBudget(double initial_mib);
  // Throws molt::Error for a negative or NaN value (infinity: no limit).
  void set_mib(double mib);
  double mib() const { return mib_.load(std::memory_order_acquire); }
  double budget_mib(const BudgetQuery&) override { return mib(); }
  // Waits up to poll_ms for a push.
  void idle(double poll_ms) override;
  std::string describe() const override;

 private:
  std::atomic<double> mib_;
  std::mutex m_;
  std::condition_variable pushed_;
  uint64_t pushes_ = 0;  // guarded by m_
};

// The source `spec` names (see the top of this file). Errors name the spec and list the forms;
// a trace file's own errors name the file. `notes` (optional) receives what a live source
// reads or skips, one line each.
std::unique_ptr<BudgetSource> open_budget_source(std::string_view spec,
                                                 std::vector<std::string>* notes = nullptr);

}  // namespace molt
