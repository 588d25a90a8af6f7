// Budget sources by spec, and the two simple ones (fixed, pushed by the app).
#include "molt/pressure/budget_spec.h"

#include <fmt/format.h>

#include <charconv>
#include <chrono>
#include <cmath>
#include <limits>

#include "molt/common/error.h"
#include "molt/pressure/live.h"

namespace molt {
namespace {

constexpr const char* kForms = "trace:FILE, live, fixed:MIB, push, push:MIB or none";

std::string mib_text(double mib) {
  return std::isinf(mib) ? std::string("no limit") : fmt::format("{:.1f} MiB", mib);
}

double parse_mib(std::string_view spec, std::string_view text) {
  double v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size() || !(v >= 0) ||
      std::isinf(v)) {
    fail("budget '{}': '{}' is not a budget in MiB (a number >= 0)", spec, text);
  }
  return v;
}

}  // namespace

FixedBudget::FixedBudget(double mib) : mib_(mib) {
  if (!(mib >= 0)) fail("fixed budget: {} MiB is not a budget (a number >= 0)", mib);
}

std::string FixedBudget::describe() const {
  return std::isinf(mib_) ? "no limit" : fmt::format("fixed {}", mib_text(mib_));
}

PushBudget::PushBudget(double initial_mib) : mib_(std::numeric_limits<double>::infinity()) {
  set_mib(initial_mib);
}

void PushBudget::set_mib(double mib) {
  if (!(mib >= 0)) fail("pushed budget: {} MiB is not a budget (a number >= 0)", mib);
  mib_.store(mib, std::memory_order_release);
  {
    std::lock_guard<std::mutex> lock(m_);
    ++pushes_;
  }
  pushed_.notify_all();
}

void PushBudget::idle(double poll_ms) {
  std::unique_lock<std::mutex> lock(m_);
  const uint64_t seen = pushes_;
  pushed_.wait_for(lock, std::chrono::duration<double, std::milli>(poll_ms),
                   [&] { return pushes_ != seen; });
}

std::string PushBudget::describe() const {
  return fmt::format("pushed by the app (now {})", mib_text(mib()));
}

std::unique_ptr<BudgetSource> open_budget_source(std::string_view spec,
                                                 std::vector<std::string>* notes) {
  const size_t colon = spec.find(':');
  const std::string_view kind = spec.substr(0, colon);
  const std::string_view arg = colon == std::string_view::npos ? "" : spec.substr(colon + 1);
  const bool has_arg = colon != std::string_view::npos;
  if (spec.empty() || spec == "none") {
    return std::make_unique<FixedBudget>(std::numeric_limits<double>::infinity());
  }
  if (kind == "trace" && has_arg && !arg.empty()) {
    return std::make_unique<TraceBudget>(PressureTrace::load(std::string(arg)));
  }
  if (spec == "live") {
    auto live = std::make_unique<LiveBudget>();
    if (notes) notes->insert(notes->end(), live->notes().begin(), live->notes().end());
    return live;
  }
  if (kind == "fixed" && has_arg) return std::make_unique<FixedBudget>(parse_mib(spec, arg));
  if (kind == "push") {
    return std::make_unique<PushBudget>(has_arg ? parse_mib(spec, arg)
                                                : std::numeric_limits<double>::infinity());
  }
  fail("budget '{}': expected {}", spec, kForms);
}

}  // namespace molt
