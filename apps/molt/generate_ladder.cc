// `molt generate --ladder`: one generation on an elastic ladder under a moving budget.
#include <fmt/format.h>

#include <limits>

#include "command.h"
#include "ladder_cli.h"
#include "molt/common/error.h"
#include "molt/kernels/threads.h"
#include "molt/pressure/live.h"

namespace molt::cli {

std::unique_ptr<BudgetSource> budget_source(const LadderFlags& f, std::FILE* notes) {
  if (!f.trace.empty() && f.live) fail("give --trace FILE or --live, not both");
  if (!f.trace.empty()) return std::make_unique<TraceBudget>(PressureTrace::load(f.trace));
  if (f.live) {
    auto live = std::make_unique<LiveBudget>();
    if (notes) {
      for (const std::string& n : live->notes()) fmt::print(notes, "live: {}\n", n);
    }
    return live;
  }
  return std::make_unique<FunctionBudget>(
      [](const BudgetQuery&) { return std::numeric_limits<double>::infinity(); }, "no limit");
}

void run_ladder_generate(const LadderFlags& f, const LadderRun& r) {
  set_num_threads(r.threads);
  auto ladder = Ladder::open(f.ladder);
  SessionOptions o = session_options(f);
  o.max_tokens = r.max_tokens;
  o.sampling = r.sampling;
  o.stop_at_eos = !r.ignore_eos;
  const std::vector<int32_t> prompt = encode_prompt(*ladder, r.prompt, r.chat, r.ids, &o.stop_ids);
  auto budget = budget_source(f, f.json ? nullptr : stderr);

  if (f.json) {
    JsonPrinter out(stdout);
    Session(*ladder, *budget, out, o).run(prompt);
    return;
  }
  ladder->reshape(FootprintShape{
      o.prefill_chunk, static_cast<int64_t>(prompt.size()) + o.max_tokens, num_threads()});
  fmt::print(stderr, "ladder {} ({}), policy {}, budget: {}\n", ladder->name(),
             ladder->tokenizer_note(), f.policy, budget->describe());
  print_ladder(stderr, *ladder, static_cast<int64_t>(prompt.size()) + o.max_tokens);
  fmt::print(stderr, "prompt: {} tokens\n", prompt.size());
  StreamPrinter out(stdout);
  Session(*ladder, *budget, out, o).run(prompt);
}

}  // namespace molt::cli
