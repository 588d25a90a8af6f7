// What stands behind the C API's handles, and the one error path every entry point takes: run
// the body, turn any exception into a status and the thread's message (molt.h "Errors").
#pragma once

#include <fmt/format.h>

#include <memory>
#include <mutex>
#include <new>
#include <string>

#include "molt/common/error.h"
#include "molt/ladder/ladder.h"
#include "molt/molt.h"
#include "molt/pressure/budget_spec.h"
#include "molt/runtime/options.h"

namespace molt::capi {

// An error with the status it maps to.
struct Failure {
  molt_status code;
  std::string message;
};

template <typename... Args>
[[noreturn]] void refuse(molt_status code, fmt::format_string<Args...> f, Args&&... args) {
  throw Failure{code, fmt::format(f, std::forward<Args>(args)...)};
}

void set_error(const char* message) noexcept;

// Runs `body`; a molt::Error inside becomes `code` (the entry point knows what failed).
template <typename F>
molt_status guard(molt_status code, F&& body) noexcept {
  try {
    body();
    return MOLT_OK;
  } catch (const Failure& e) {
    set_error(e.message.c_str());
    return e.code;
  } catch (const Error& e) {
    set_error(e.what());
    return code;
  } catch (const std::bad_alloc&) {
    set_error("out of memory");
    return MOLT_ERR_OUT_OF_MEMORY;
  } catch (const std::exception& e) {
    set_error(e.what());
    return MOLT_ERR_INTERNAL;
  } catch (...) {
    set_error("unknown error");
    return MOLT_ERR_INTERNAL;
  }
}

// Runs `body`, giving a molt::Error inside the status `code` (one phase of an entry point).
template <typename F>
auto phase(molt_status code, F&& body) -> decltype(body()) {
  try {
    return body();
  } catch (const Error& e) {
    throw Failure{code, e.what()};
  }
}

// The ladder's budget as generations see it: one source at a time, swapped under a lock so an
// app can push a value (or the stepping thread change the source) while generations hold a
// pointer to this forwarder.
class LadderBudget : public BudgetSource {
 public:
  LadderBudget() { set(open_budget_source("none")); }
  double budget_mib(const BudgetQuery& q) override { return current()->budget_mib(q); }
  void idle(double poll_ms) override { current()->idle(poll_ms); }
  std::string describe() const override { return current()->describe(); }
  void set(std::shared_ptr<BudgetSource> source);
  // The app's number: into the current push source, or a new one replacing another kind.
  void push(double mib);

 private:
  std::shared_ptr<BudgetSource> current() const;
  mutable std::mutex m_;
  std::shared_ptr<BudgetSource> source_;
  PushBudget* push_ = nullptr;  // source_ when it is a push source
};

// Shared by the ladder handle and every generation started on it (molt.h "Lifetime").
struct LadderState {
  std::unique_ptr<Ladder> ladder;
  LadderBudget budget;
};

SessionOptions session_options(const molt_options* options);

}  // namespace molt::capi

struct molt_ladder {
  std::shared_ptr<molt::capi::LadderState> state;
};
