// One generation run to its end: the loop over Generation::step() (generation.h) that the CLI
// and the demo use, calling the budget source's idle() while parked and forwarding every event
// to a sink. It loads nothing but the rung it starts on and releases nothing at its end: the
// ladder's owner releases unused rungs (Ladder::release_unused).
//
//   auto ladder = molt::Ladder::open("models/tiny-ladder/ladder.json");
//   molt::TraceBudget budget(molt::PressureTrace::load("traces/spike_mid_answer.json"));
//   molt::SessionOptions o;  o.policy = molt::Policy::kMolt;
//   MyPrinter out;  // a molt::EventSink
//   molt::SessionResult r = molt::Session(*ladder, budget, out, o).run(prompt_ids);
//
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "molt/ladder/ladder.h"
#include "molt/model/sampler.h"
#include "molt/pressure/budget.h"
#include "molt/runtime/events.h"
#include "molt/runtime/generation.h"
#include "molt/runtime/options.h"
#include "molt/runtime/policy.h"
#include "molt/transfer/transfer.h"

namespace molt {

struct SessionResult {
  std::vector<int32_t> tokens;     // the answer
  std::vector<std::string> rungs;  // which rung produced each token
  std::vector<MigrationEvent> migrations;
  DoneEvent done;
};

class Session {
 public:
  Session(Ladder& ladder, BudgetSource& budget, EventSink& sink, SessionOptions options);
  ~Session();
  SessionResult run(std::span<const int32_t> prompt);

 private:
  Ladder& ladder_;
  BudgetSource& budget_;
  EventSink& sink_;
  SessionOptions o_;
};

}  // namespace molt
