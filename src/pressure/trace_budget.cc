#include <fmt/core.h>

#include <chrono>
#include <thread>

#include "molt/pressure/budget.h"

namespace molt {

double TraceBudget::budget_mib(const BudgetQuery& q) {
  const double at = trace_.unit == TraceUnit::kTokens ? static_cast<double>(q.step) : q.elapsed_ms;
  return trace_.budget_mib(at, q.reference_mib);
}

void TraceBudget::idle(double poll_ms) {
  if (trace_.unit == TraceUnit::kMs) {
    std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(poll_ms));
  }
}

std::string TraceBudget::describe() const {
  return fmt::format("trace {} ({} points, unit {})", trace_.name, trace_.points.size(),
                     trace_.unit == TraceUnit::kTokens ? "tokens" : "ms");
}

}  // namespace molt
