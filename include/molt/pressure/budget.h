// Where the memory budget comes from: a trace file, a live OS signal, or a test's function.
// The runtime asks between every two tokens.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "molt/pressure/trace.h"

namespace molt {

struct BudgetQuery {
  int64_t step = 0;          // session steps so far (tokens, plus parked checks)
  double elapsed_ms = 0;     // since the session started
  double reference_mib = 0;  // the top rung's footprint for this session (relative traces)
  double used_mib = 0;       // what the session's accounting says it holds now
};

class BudgetSource {
 public:
  virtual ~BudgetSource() = default;
  // MiB the session's rungs (weights + KV + scratch) may use now.
  virtual double budget_mib(const BudgetQuery& q) = 0;
  // Called while parked between two checks: sleeps for a wall-clock source, returns at once
  // for a step-clocked one.
  virtual void idle(double poll_ms) = 0;
  virtual std::string describe() const = 0;
};

// A trace file replayed against the session clock.
class TraceBudget : public BudgetSource {
 public:
  explicit TraceBudget(PressureTrace trace) : trace_(std::move(trace)) {}
  double budget_mib(const BudgetQuery& q) override;
  void idle(double poll_ms) override;
  std::string describe() const override;
  const PressureTrace& trace() const { return trace_; }

 private:
  PressureTrace trace_;
};

// Any function of the query (tests, scripted pressure).
class FunctionBudget : public BudgetSource {
 public:
  explicit FunctionBudget(std::function<double(const BudgetQuery&)> f,
                          std::string name = "function")
      : f_(std::move(f)), name_(std::move(name)) {}
  double budget_mib(const BudgetQuery& q) override { return f_(q); }
  void idle(double) override {}
  std::string describe() const override { return name_; }

 private:
  std::function<double(const BudgetQuery&)> f_;
  std::string name_;
};

}  // namespace molt
