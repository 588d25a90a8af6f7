// `molt generate`: one generation on a ladder (or a single model, a one-rung ladder) under a
// moving budget.
#include <fmt/format.h>

#include <chrono>

#include "command.h"
#include "ladder_cli.h"
#include "molt/common/error.h"
#include "molt/kernels/threads.h"
#include "molt/pressure/budget_spec.h"
#include "molt/runtime/generation.h"

namespace molt::cli {

std::unique_ptr<BudgetSource> budget_source(const LadderFlags& f, std::FILE* notes) {
  if (!f.trace.empty() && f.live) fail("give --trace FILE or --live, not both");
  std::vector<std::string> lines;
  auto source = open_budget_source(f.live            ? "live"
                                   : f.trace.empty() ? "none"
                                                     : "trace:" + f.trace,
                                   &lines);
  for (const std::string& n : lines) {
    if (notes) fmt::print(notes, "live: {}\n", n);
  }
  return source;
}

namespace {

// One model's stream as plain text (or ids when the prompt was ids): tokens to stdout, what
// the budget did to stderr, the speed line last.
class PlainPrinter : public EventSink {
 public:
  explicit PlainPrinter(bool ids) : ids_(ids) {}
  void on_token(const TokenEvent& e) override {
    if (ids_) {
      fmt::print("{}{}", e.index ? " " : "", e.token_id);
    } else {
      fmt::print("{}", e.text);
    }
    std::fflush(stdout);
  }
  void on_park(const ParkEvent& e) override {
    fmt::print(stderr, "parked: budget {:.1f} MiB < {:.1f} MiB\n", e.budget_mib, e.need_mib);
  }
  void on_resume(const ResumeEvent& e) override {
    fmt::print(stderr, "resumed after {} checks\n", e.waited_steps);
  }
  void on_done(const DoneEvent& e) override {
    if (!ids_) fmt::print("{}", e.tail);
    fmt::print("\n");
    std::fflush(stdout);
    if (e.killed) fmt::print(stderr, "killed: over the budget past the grace\n");
  }

 private:
  bool ids_;
};

}  // namespace

void run_generate(Ladder& ladder, const LadderFlags& f, const LadderRun& r, bool single) {
  if (!r.ids.empty() && !r.prompt.empty()) fail("give --prompt or --ids, not both");
  if (r.chat && r.prompt.empty()) fail("--chat needs --prompt");
  SessionOptions o = session_options(f);
  o.max_tokens = r.max_tokens;
  o.sampling = r.sampling;
  o.stop_at_eos = !r.ignore_eos;
  o.validate();
  const std::vector<int32_t> prompt = encode_prompt(ladder, r.prompt, r.chat, r.ids, &o.stop_ids);
  auto budget = budget_source(f, f.json ? nullptr : stderr);
  const int64_t context = static_cast<int64_t>(prompt.size()) + o.max_tokens;
  ladder.reshape(FootprintShape{o.prefill_chunk, context, num_threads(), o.kv_dtype});
  std::unique_ptr<EventSink> out;
  if (f.json) {
    out = std::make_unique<JsonLineSink>(stdout);
  } else if (single) {
    out = std::make_unique<PlainPrinter>(r.prompt.empty());
  } else {
    fmt::print(stderr, "ladder {} ({}), policy {}, budget: {}\n", ladder.name(),
               ladder.tokenizer_note(), f.policy, budget->describe());
    print_ladder(stderr, ladder, context);
    fmt::print(stderr, "prompt: {} tokens\n", prompt.size());
    out = std::make_unique<StreamPrinter>(stdout);
  }
  // The loop of Session::run, timed: the first step reads the prompt.
  using clock = std::chrono::steady_clock;
  Generation g(ladder, budget.get(), prompt, o);
  const auto t0 = clock::now();
  clock::time_point t1 = t0;
  while (!g.finished()) {
    const Step s = g.step();
    if (g.tokens() == 1 && s.token) t1 = clock::now();
    emit(s, *out);
    if (s.kind == StepKind::kWaiting) budget->idle(o.poll_ms);
  }
  const double prefill_s = std::chrono::duration<double>(t1 - t0).count();
  const double decode_s = std::chrono::duration<double>(clock::now() - t1).count();
  if (single && !f.json) {
    fmt::print(stderr, "{} prompt tokens in {:.1f} ms, {} tokens generated at {:.1f} tok/s\n",
               prompt.size(), prefill_s * 1e3, g.tokens(),
               g.tokens() > 1 ? static_cast<double>(g.tokens() - 1) / decode_s : 0.0);
  }
}

}  // namespace molt::cli
