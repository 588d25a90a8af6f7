// molt bench decode: prefill and decode speed of one model, beside the memory-bandwidth bound.
#include <fmt/core.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <random>

#include "command.h"
#include "molt/common/error.h"
#include "molt/kernels/threads.h"
#include "molt/model/model.h"

namespace molt::cli {
namespace {

struct BenchDecodeArgs {
  std::string model;
  int threads = 2;
  int prompt_tokens = 128;
  int tokens = 32;
  bool json = false;
};

// Bytes of weights a decode step reads: every layer matrix once plus the lm_head (the
// embedding row read is negligible), norms and biases.
double weight_bytes_per_token(const Model& m) {
  double b = static_cast<double>(m.weights().lm_head.bytes());
  for (const LayerWeights& L : m.weights().layers) {
    for (const WeightMatrix* w : {&L.q, &L.k, &L.v, &L.o, &L.gate, &L.up, &L.down}) b += w->bytes();
  }
  return b;
}

void run(const BenchDecodeArgs& a) {
  set_num_threads(a.threads);
  auto model = Model::load(a.model);
  const ModelConfig& c = model->config();
  std::mt19937 rng(1);
  std::uniform_int_distribution<int32_t> tok(
      0, static_cast<int32_t>(std::min<int64_t>(c.vocab_size, 150000) - 1));
  std::vector<int32_t> prompt(static_cast<size_t>(a.prompt_tokens));
  for (auto& t : prompt) t = tok(rng);

  using clock = std::chrono::steady_clock;
  // Warm-up: touch every weight page once so the figures are not page-fault bound.
  {
    KVCache warm = model->new_cache(8);
    model->decode(prompt[0], warm);
  }
  KVCache cache = model->new_cache(a.prompt_tokens + a.tokens + 1);
  const auto t0 = clock::now();
  std::vector<float> logits = model->prefill(prompt, cache);
  const auto t1 = clock::now();
  int32_t next = tok(rng);
  for (int i = 0; i < a.tokens; ++i) {
    logits = model->decode(next, cache);
    next = tok(rng);
  }
  const auto t2 = clock::now();
  const double prefill_tok_s = a.prompt_tokens / std::chrono::duration<double>(t1 - t0).count();
  const double decode_tok_s = a.tokens / std::chrono::duration<double>(t2 - t1).count();
  const double bytes = weight_bytes_per_token(*model);
  nlohmann::json j = {{"model", a.model},
                      {"threads", a.threads},
                      {"prompt_tokens", a.prompt_tokens},
                      {"tokens", a.tokens},
                      {"prefill_tok_s", prefill_tok_s},
                      {"decode_tok_s", decode_tok_s},
                      {"weight_bytes_per_token", bytes},
                      {"decode_gb_s", decode_tok_s * bytes / 1e9},
                      {"peak_rss_mib", peak_rss_mib()}};
  if (a.json) {
    fmt::print("{}\n", j.dump());
  } else {
    fmt::print("prefill  {:8.1f} tok/s  ({} tokens)\n", prefill_tok_s, a.prompt_tokens);
    fmt::print("decode   {:8.2f} tok/s  ({:.2f} GB/s of weights, {:.1f} MB per token)\n",
               decode_tok_s, decode_tok_s * bytes / 1e9, bytes / 1e6);
    fmt::print("peak RSS {:8.1f} MiB\n", peak_rss_mib());
  }
}

const bool registered = register_command([](CLI::App& root) {
  auto a = std::make_shared<BenchDecodeArgs>();
  CLI::App* s = group(root, "bench", "Benchmarks that print figures")
                    ->add_subcommand("decode", "Prefill and decode speed of one model");
  s->add_option("--model", a->model, "checkpoint directory")->required();
  s->add_option("--threads", a->threads, "threads (0 = all cores)")->check(CLI::NonNegativeNumber);
  s->add_option("--prompt-tokens", a->prompt_tokens, "prefill length")->check(CLI::PositiveNumber);
  s->add_option("--tokens", a->tokens, "decode steps")->check(CLI::PositiveNumber);
  s->add_flag("--json", a->json, "one JSON object");
  s->callback([a] { run(*a); });
});

}  // namespace
}  // namespace molt::cli
