// molt generate: stream tokens from one model or an elastic ladder.
#include <fmt/core.h>

#include <cstdio>

#include "command.h"
#include "ladder_cli.h"
#include "molt/common/error.h"
#include "molt/kernels/threads.h"
#include "molt/model/model.h"

namespace molt::cli {
namespace {

struct GenerateArgs {
  std::string model, ids;
  std::string prompt;  // text prompt (ladder mode; single-model mode reads --ids)
  bool chat = false;
  LadderFlags ladder;  // --ladder and friends: see ladder_cli.h
  int max_tokens = 64;
  SamplingParams sampling;
  bool ignore_eos = false;
  int threads = 0;
  std::string precision = "native";
  std::string layout = "auto";
};

void run(const GenerateArgs& a) {
  if (a.model.empty() == a.ladder.ladder.empty())
    fail("give --model DIR (one model) or --ladder FILE (an elastic ladder), not both");
  if (!a.ladder.ladder.empty() && a.precision != "native") {
    fail("--precision applies to --model only (a ladder's rungs are stored at their precision)");
  }
  if (!a.ladder.ladder.empty() && a.layout != "auto") {
    fail("--layout applies to --model only (a ladder's rungs load with layout auto)");
  }
  set_num_threads(a.threads);
  // A single model is a one-rung ladder: one decode loop for both.
  LoadOptions load;
  load.precision = parse_precision(a.precision);
  load.layout = parse_weight_layout(a.layout);
  auto ladder = a.model.empty() ? Ladder::open(a.ladder.ladder) : Ladder::single(a.model, load);
  run_generate(*ladder, a.ladder,
               {a.prompt, a.ids, a.chat, a.max_tokens, a.sampling, a.ignore_eos, a.threads},
               /*single=*/!a.model.empty());
}

const bool registered = register_command([](CLI::App& root) {
  auto a = std::make_shared<GenerateArgs>();
  CLI::App* s = root.add_subcommand("generate", "Generate tokens from a model");
  s->add_option("--model", a->model, "checkpoint directory");
  s->add_option("--ids", a->ids, "prompt token ids, e.g. \"1 2 3\"");
  s->add_option("--prompt", a->prompt,
                "prompt text (tokenized with the model's or ladder's tokenizer)");
  s->add_flag("--chat", a->chat, "wrap the prompt in the Qwen2.5 chat template");
  add_ladder_flags(s, a->ladder);
  s->add_option("--max-tokens", a->max_tokens, "tokens to generate")->check(CLI::PositiveNumber);
  s->add_option("--temperature", a->sampling.temperature, "0 = greedy")
      ->check(CLI::NonNegativeNumber);
  s->add_option("--top-k", a->sampling.top_k, "keep the k most likely (0 = off)")
      ->check(CLI::NonNegativeNumber);
  s->add_option("--top-p", a->sampling.top_p, "nucleus mass (1 = off)")
      ->check(CLI::Range(1e-6, 1.0));
  s->add_option("--repetition-penalty", a->sampling.repetition_penalty, "1 = off")
      ->check(CLI::PositiveNumber);
  s->add_option("--seed", a->sampling.seed, "sampling seed");
  s->add_flag("--ignore-eos", a->ignore_eos, "keep going past end-of-sequence tokens");
  s->add_option("--threads", a->threads, "threads (0 = all cores)")->check(CLI::NonNegativeNumber);
  s->add_option("--precision", a->precision,
                "native (as stored), int8, q4 or q8: quantise a dense checkpoint at load")
      ->capture_default_str();
  add_layout_option(s, a->layout);
  s->callback([a] { run(*a); });
});

}  // namespace
}  // namespace molt::cli
