#include "server/server_budget.h"

#include <fmt/core.h>

#include <cmath>
#include <limits>

namespace molt::server {

ServerBudget::ServerBudget(std::unique_ptr<BudgetSource> base) : base_(std::move(base)) {}

double ServerBudget::budget_mib(const BudgetQuery& q) {
  std::lock_guard lock(m_);
  last_ = q;
  if (fixed_) return *fixed_;
  if (trace_) {
    if (!trace_started_) {  // the trace's time starts at the first round after it was set
      trace_started_ = true;
      trace_step0_ = q.step;
      trace_ms0_ = q.elapsed_ms;
    }
    BudgetQuery t = q;
    t.step -= trace_step0_;
    t.elapsed_ms -= trace_ms0_;
    return trace_->budget_mib(t);
  }
  return base_ ? base_->budget_mib(q) : std::numeric_limits<double>::infinity();
}

void ServerBudget::idle(double poll_ms) {
  if (base_) base_->idle(poll_ms);
}

std::string ServerBudget::describe() const {
  std::lock_guard lock(m_);
  if (fixed_)
    return std::isinf(*fixed_) ? "no limit (set by a client)"
                               : fmt::format("fixed {:.2f} MiB (set by a client)", *fixed_);
  if (trace_) return trace_->describe() + " (set by a client)";
  return base_ ? base_->describe() : "no limit";
}

void ServerBudget::set_fixed(double mib) {
  std::lock_guard lock(m_);
  trace_.reset();
  fixed_ = mib;
}

void ServerBudget::set_trace(PressureTrace trace) {
  std::lock_guard lock(m_);
  fixed_.reset();
  trace_ = std::make_unique<TraceBudget>(std::move(trace));
  trace_started_ = false;
}

double ServerBudget::peek() {
  BudgetQuery q;
  {
    std::lock_guard lock(m_);
    q = last_;
  }
  return budget_mib(q);
}

void ServerBudget::reset() {
  std::lock_guard lock(m_);
  fixed_.reset();
  trace_.reset();
}

}  // namespace molt::server
