// C API: errors, options, ladders and their budget.
#include <cmath>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "capi/internal.h"

namespace fs = std::filesystem;
using molt::capi::Failure;
using molt::capi::guard;
using molt::capi::phase;
using molt::capi::refuse;

namespace molt::capi {
namespace {

thread_local std::string t_error;

// The raw value a C caller stored: loading an out-of-range enum as molt_policy is undefined in
// C++, so the field is read as the int it is and checked before it becomes one.
Policy policy_of(int p) {
  switch (p) {
    case MOLT_POLICY_HOLD:
      return Policy::kHold;
    case MOLT_POLICY_SMALL:
      return Policy::kSmall;
    case MOLT_POLICY_REPREFILL:
      return Policy::kReprefill;
    case MOLT_POLICY_RELEASE_REPREFILL:
      return Policy::kReleaseReprefill;
    case MOLT_POLICY_MOLT:
      return Policy::kMolt;
    case MOLT_POLICY_HEAL:
      return Policy::kHeal;
    case MOLT_POLICY_AUTO:
      return Policy::kAuto;
  }
  refuse(MOLT_ERR_OPTIONS, "options.policy: {} is not a molt_policy", p);
}

}  // namespace

void set_error(const char* message) noexcept {
  try {
    t_error = message;
  } catch (...) {
    t_error.clear();  // no memory for the message: an empty one beats none
  }
}

void LadderBudget::set(std::shared_ptr<BudgetSource> source) {
  std::lock_guard<std::mutex> lock(m_);
  push_ = dynamic_cast<PushBudget*>(source.get());
  source_ = std::move(source);
}

void LadderBudget::push(double mib) {
  std::lock_guard<std::mutex> lock(m_);
  if (push_ != nullptr) {
    push_->set_mib(mib);
    return;
  }
  auto p = std::make_shared<PushBudget>(mib);
  push_ = p.get();
  source_ = std::move(p);
}

std::shared_ptr<BudgetSource> LadderBudget::current() const {
  std::lock_guard<std::mutex> lock(m_);
  return source_;
}

SessionOptions session_options(const molt_options* options) {
  const molt_options o = options != nullptr ? *options : molt_default_options();
  SessionOptions s;
  int policy = 0;
  static_assert(sizeof policy == sizeof o.policy);
  std::memcpy(&policy, &o.policy, sizeof policy);
  s.policy = policy_of(policy);
  s.max_tokens = o.max_tokens;
  s.sampling.temperature = o.temperature;
  s.sampling.top_p = o.top_p;
  s.sampling.top_k = o.top_k;
  s.sampling.seed = o.seed;
  s.stop_at_eos = o.stop_at_eos != 0;
  s.prefill_chunk = o.prefill_chunk;
  s.heal_chunk = o.heal_chunk;
  if (o.threads < 0) refuse(MOLT_ERR_OPTIONS, "options.threads: must be >= 0 (got {})", o.threads);
  if (o.json != nullptr && o.json[0] != '\0') {
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(o.json);
    } catch (const nlohmann::json::exception& e) {
      refuse(MOLT_ERR_OPTIONS, "options.json: not valid JSON: {}", e.what());
    }
    return phase(MOLT_ERR_OPTIONS, [&] { return options_from_json(j, s, "options.json"); });
  }
  phase(MOLT_ERR_OPTIONS, [&] {
    try {
      s.validate();
    } catch (const Error& e) {
      fail("options: {}", e.what());
    }
  });
  return s;
}

}  // namespace molt::capi

extern "C" {

const char* molt_status_name(molt_status status) {
  switch (status) {
    case MOLT_OK:
      return "ok";
    case MOLT_ERR_INVALID_ARGUMENT:
      return "invalid argument";
    case MOLT_ERR_NOT_FOUND:
      return "not found";
    case MOLT_ERR_OPTIONS:
      return "bad options";
    case MOLT_ERR_LOAD:
      return "cannot load";
    case MOLT_ERR_GENERATION:
      return "generation failed";
    case MOLT_ERR_OUT_OF_MEMORY:
      return "out of memory";
    case MOLT_ERR_INTERNAL:
      return "internal error";
  }
  return "unknown status";
}

const char* molt_last_error(void) {
  return molt::capi::t_error.c_str();
}

const char* molt_version(void) {
  return MOLT_VERSION;
}

molt_options molt_default_options(void) {
  const molt::SessionOptions d;
  molt_options o{};
  o.policy = MOLT_POLICY_MOLT;
  o.max_tokens = static_cast<int32_t>(d.max_tokens);
  o.temperature = d.sampling.temperature;
  o.top_p = d.sampling.top_p;
  o.top_k = d.sampling.top_k;
  o.seed = d.sampling.seed;
  o.stop_at_eos = d.stop_at_eos ? 1 : 0;
  o.prefill_chunk = static_cast<int32_t>(d.prefill_chunk);
  o.heal_chunk = static_cast<int32_t>(d.heal_chunk);
  o.threads = 0;
  o.json = nullptr;
  return o;
}

molt_status molt_ladder_open(const char* path, molt_ladder** out) {
  return guard(MOLT_ERR_LOAD, [&] {
    if (out == nullptr) refuse(MOLT_ERR_INVALID_ARGUMENT, "molt_ladder_open: out is NULL");
    *out = nullptr;
    if (path == nullptr || path[0] == '\0') {
      refuse(MOLT_ERR_INVALID_ARGUMENT, "molt_ladder_open: no path given");
    }
    const fs::path p(path);
    std::error_code ec;
    if (!fs::exists(p, ec)) refuse(MOLT_ERR_NOT_FOUND, "{}: no such file or directory", path);
    auto state = std::make_shared<molt::capi::LadderState>();
    if (!fs::is_directory(p, ec)) {
      state->ladder = molt::Ladder::open(p);
    } else if (fs::exists(p / "ladder.json", ec)) {
      state->ladder = molt::Ladder::open(p / "ladder.json");
    } else if (fs::exists(p / "config.json", ec)) {
      state->ladder = molt::Ladder::single(p);
    } else {
      refuse(MOLT_ERR_NOT_FOUND,
             "{}: neither a ladder (ladder.json) nor a model directory (config.json)", path);
    }
    *out = new molt_ladder{std::move(state)};
  });
}

void molt_ladder_free(molt_ladder* ladder) {
  delete ladder;  // the state lives on while generations hold it
}

int32_t molt_ladder_rung_count(const molt_ladder* ladder) {
  if (ladder == nullptr) {
    molt::capi::set_error("molt_ladder_rung_count: ladder is NULL");
    return 0;
  }
  return ladder->state->ladder->size();
}

const char* molt_ladder_rung_name(const molt_ladder* ladder, int32_t index) {
  const char* name = nullptr;
  guard(MOLT_ERR_INVALID_ARGUMENT, [&] {
    if (ladder == nullptr) {
      refuse(MOLT_ERR_INVALID_ARGUMENT, "molt_ladder_rung_name: ladder is NULL");
    }
    const molt::Ladder& l = *ladder->state->ladder;
    if (index < 0 || index >= l.size()) {
      refuse(MOLT_ERR_INVALID_ARGUMENT, "molt_ladder_rung_name: no rung {} (the ladder has {})",
             index, l.size());
    }
    name = l.rung(index).name().c_str();
  });
  return name;
}

molt_status molt_ladder_set_budget_source(molt_ladder* ladder, const char* spec) {
  return guard(MOLT_ERR_INVALID_ARGUMENT, [&] {
    if (ladder == nullptr) {
      refuse(MOLT_ERR_INVALID_ARGUMENT, "molt_ladder_set_budget_source: ladder is NULL");
    }
    if (spec == nullptr) {
      refuse(MOLT_ERR_INVALID_ARGUMENT, "molt_ladder_set_budget_source: spec is NULL");
    }
    const std::string_view s(spec);
    std::error_code ec;
    if (s.starts_with("trace:") && s.size() > 6 && !fs::exists(fs::path(s.substr(6)), ec)) {
      refuse(MOLT_ERR_NOT_FOUND, "{}: pressure trace not found", s.substr(6));
    }
    auto source = phase(s.starts_with("trace:") ? MOLT_ERR_LOAD : MOLT_ERR_INVALID_ARGUMENT,
                        [&] { return molt::open_budget_source(s); });
    ladder->state->budget.set(std::shared_ptr<molt::BudgetSource>(std::move(source)));
  });
}

molt_status molt_set_budget_mib(molt_ladder* ladder, double mib) {
  return guard(MOLT_ERR_INVALID_ARGUMENT, [&] {
    if (ladder == nullptr) refuse(MOLT_ERR_INVALID_ARGUMENT, "molt_set_budget_mib: ladder is NULL");
    if (!(mib >= 0)) {
      refuse(MOLT_ERR_INVALID_ARGUMENT, "molt_set_budget_mib: {} MiB is not a budget (>= 0)", mib);
    }
    ladder->state->budget.push(mib);
  });
}

molt_status molt_ladder_release_unused(molt_ladder* ladder, int32_t* released) {
  return guard(MOLT_ERR_INTERNAL, [&] {
    if (ladder == nullptr) {
      refuse(MOLT_ERR_INVALID_ARGUMENT, "molt_ladder_release_unused: ladder is NULL");
    }
    const int n = ladder->state->ladder->release_unused();
    if (released != nullptr) *released = n;
  });
}

}  // extern "C"
