// molt generate: stream tokens from one model.
#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <optional>

#include "command.h"
#include "ladder_cli.h"
#include "molt/common/error.h"
#include "molt/kernels/threads.h"
#include "molt/model/model.h"
#include "molt/model/sampler.h"
#include "molt/tokenizer/chat_template.h"
#include "molt/tokenizer/tokenizer.h"

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
  bool interleave = false;
};

void run(const GenerateArgs& a) {
  if (!a.ladder.ladder.empty()) {
    run_ladder_generate(
        a.ladder, {a.prompt, a.ids, a.chat, a.max_tokens, a.sampling, a.ignore_eos, a.threads});
    return;
  }
  if (a.model.empty()) fail("give --model DIR (one model) or --ladder FILE (an elastic ladder)");
  set_num_threads(a.threads);
  LoadOptions load_options;
  load_options.precision = parse_precision(a.precision);
  load_options.interleave = a.interleave;
  auto model = Model::load(a.model, load_options);
  const ModelConfig& c = model->config();
  // Text in, text out when a prompt is given (the tokenizer comes from the model directory);
  // ids in, ids out otherwise, so synthetic checkpoints need no tokenizer.
  std::unique_ptr<Tokenizer> tok;
  std::vector<int32_t> history;
  if (!a.prompt.empty()) {
    if (!a.ids.empty()) fail("give --prompt or --ids, not both");
    tok = Tokenizer::load(a.model);
    const std::string text =
        a.chat ? apply_chat_template({{"user", a.prompt}}, /*add_generation_prompt=*/true)
               : a.prompt;
    history = tok->encode(text);
  } else {
    if (a.chat) fail("--chat needs --prompt");
    history = parse_ids(a.ids, "--ids");
  }
  if (history.empty()) fail("no prompt: give --prompt TEXT or --ids \"i j k\"");
  std::optional<StreamDecoder> text_out;
  if (tok) text_out.emplace(*tok, /*skip_special=*/true);
  // Embedding rows past the tokenizer's ids are padding (Qwen2.5: 151665..151935): never sample.
  const int64_t sampleable = tok ? std::min(tok->vocab_size(), c.vocab_size) : c.vocab_size;
  Sampler sampler(a.sampling);
  KVCache cache = model->new_cache(static_cast<int64_t>(history.size()) + a.max_tokens);

  using clock = std::chrono::steady_clock;
  const auto t0 = clock::now();
  std::vector<float> logits = model->prefill(history, cache);
  const auto t1 = clock::now();
  int generated = 0;
  for (; generated < a.max_tokens; ++generated) {
    std::fill(logits.begin() + sampleable, logits.end(), -INFINITY);
    const int32_t next = sampler.sample(logits, history);
    history.push_back(next);
    if (text_out) {
      fmt::print("{}", text_out->push(next));
    } else {
      fmt::print("{}{}", generated ? " " : "", next);
    }
    std::fflush(stdout);
    const bool eos =
        std::find(c.eos_token_ids.begin(), c.eos_token_ids.end(), next) != c.eos_token_ids.end();
    if (eos && !a.ignore_eos) {
      ++generated;
      break;
    }
    if (generated + 1 < a.max_tokens) logits = model->decode(next, cache);
  }
  const auto t2 = clock::now();
  const double prefill_s = std::chrono::duration<double>(t1 - t0).count();
  const double decode_s = std::chrono::duration<double>(t2 - t1).count();
  if (text_out) fmt::print("{}", text_out->flush());
  fmt::print("\n");
  std::fflush(stdout);
  fmt::print(stderr, "{} prompt tokens in {:.1f} ms, {} tokens generated at {:.1f} tok/s\n",
             history.size() - generated, prefill_s * 1e3, generated,
             generated > 1 ? (generated - 1) / decode_s : 0.0);
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
  s->add_flag("--interleave", a->interleave,
              "MLX weights with rows interleaved by 8 (a heap copy made at load; faster "
              "decode on x86)");
  s->callback([a] { run(*a); });
});

}  // namespace
}  // namespace molt::cli
