// A generation run to its end, its events forwarded to a sink.
#include "molt/runtime/session.h"

#include "molt/common/error.h"

namespace molt {

Session::Session(Ladder& ladder, BudgetSource& budget, EventSink& sink, SessionOptions options)
    : ladder_(ladder), budget_(budget), sink_(sink), o_(std::move(options)) {
  o_.validate();
}

Session::~Session() = default;

SessionResult Session::run(std::span<const int32_t> prompt) {
  Generation g(ladder_, &budget_, prompt, o_);
  while (!g.finished()) {
    const Step s = g.step();
    emit(s, sink_);
    if (s.kind == StepKind::kWaiting) budget_.idle(o_.poll_ms);
  }
  SessionResult r;
  r.tokens.assign(g.answer().begin(), g.answer().end());
  r.rungs = g.answer_rungs();
  r.migrations = g.migrations();
  r.done = g.summary();
  return r;
}

}  // namespace molt
