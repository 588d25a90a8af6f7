// The server's budget: its configured source (--trace, --live, --budget-mib, none) unless a
// client overrides it (POST /v1/molt/budget) with a fixed value or a trace of its own, which
// then starts at the next round. Read by the engine thread, set from HTTP threads.
#pragma once

#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "molt/pressure/budget.h"
#include "molt/pressure/trace.h"

namespace molt::server {

class ServerBudget : public BudgetSource {
 public:
  explicit ServerBudget(std::unique_ptr<BudgetSource> base);  // null: no limit
  double budget_mib(const BudgetQuery& q) override;
  void idle(double poll_ms) override;
  std::string describe() const override;

  void set_fixed(double mib);  // infinity: no limit
  void set_trace(PressureTrace trace);
  void reset();  // back to the configured source
  // What the source says for the last round's query (a reply to a client that just set it).
  double peek();

 private:
  std::unique_ptr<BudgetSource> base_;
  mutable std::mutex m_;
  std::optional<double> fixed_;
  std::unique_ptr<TraceBudget> trace_;
  int64_t trace_step0_ = 0;
  double trace_ms0_ = 0;
  BudgetQuery last_;
  bool trace_started_ = false;
};

}  // namespace molt::server
