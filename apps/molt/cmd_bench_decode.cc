// molt bench decode: prefill and decode speed of one model, beside the memory-bandwidth bound.
#include <fmt/core.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <random>

#include "command.h"
#include "molt/common/error.h"
#include "molt/kernels/bandwidth.h"
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
  std::string precision = "native";
  bool bandwidth = false;
};

// Bytes of weights a decode step reads: every layer matrix once plus the lm_head, with their
// scales and biases when quantised (the embedding row read, norms and biases are negligible).
double weight_bytes_per_token(const Model& m) {
  double b = static_cast<double>(m.weights().lm_head.bytes());
  for (const LayerWeights& L : m.weights().layers) {
    for (const WeightMatrix* w : {&L.q, &L.k, &L.v, &L.o, &L.gate, &L.up, &L.down}) b += w->bytes();
  }
  return b;
}

// FLOPs of the linears for n tokens (2 per weight per token); attention is left out.
double linear_flops(const Model& m, int64_t n) {
  double p = static_cast<double>(m.weights().lm_head.rows * m.weights().lm_head.cols);
  for (const LayerWeights& L : m.weights().layers) {
    for (const WeightMatrix* w : {&L.q, &L.k, &L.v, &L.o, &L.gate, &L.up, &L.down}) {
      p += static_cast<double>(w->rows * w->cols);
    }
  }
  return 2.0 * p * static_cast<double>(n);
}

void run(const BenchDecodeArgs& a) {
  set_num_threads(a.threads);
  LoadOptions load_options;
  load_options.precision = parse_precision(a.precision);
  const auto l0 = std::chrono::steady_clock::now();
  auto model = Model::load(a.model, load_options);
  const double load_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - l0).count();
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
  // The bound of this run: STREAM triad right after the decode, best of 5.
  const double triad = a.bandwidth ? measure_triad_bandwidth_gbs(128, 5) : 0.0;
  const double prefill_s = std::chrono::duration<double>(t1 - t0).count();
  const double prefill_tok_s = a.prompt_tokens / prefill_s;
  const double decode_tok_s = a.tokens / std::chrono::duration<double>(t2 - t1).count();
  const double bytes = weight_bytes_per_token(*model);
  nlohmann::json j = {
      {"model", a.model},
      {"threads", a.threads},
      {"prompt_tokens", a.prompt_tokens},
      {"tokens", a.tokens},
      {"prefill_tok_s", prefill_tok_s},
      {"decode_tok_s", decode_tok_s},
      {"weight_bytes_per_token", bytes},
      {"decode_gb_s", decode_tok_s * bytes / 1e9},
      {"peak_rss_mib", peak_rss_mib()},
      {"precision", a.precision},
      {"load_s", load_s},
      {"weight_dtype",
       std::string(dtype_name(
           model->weights().layers.empty() ? DType::F32 : model->weights().layers[0].q.dtype))},
      {"prefill_gflop_s", linear_flops(*model, a.prompt_tokens) / prefill_s / 1e9}};
  if (a.bandwidth) {
    j["triad_gb_s"] = triad;
    j["bound_tok_s"] = triad * 1e9 / bytes;
    j["x_bound"] = decode_tok_s * bytes / 1e9 / triad;
  }
  if (a.json) {
    fmt::print("{}\n", j.dump());
  } else {
    fmt::print("prefill  {:8.1f} tok/s  ({} tokens)\n", prefill_tok_s, a.prompt_tokens);
    fmt::print("decode   {:8.2f} tok/s  ({:.2f} GB/s of weights, {:.1f} MB per token)\n",
               decode_tok_s, decode_tok_s * bytes / 1e9, bytes / 1e6);
    if (a.bandwidth) {
      fmt::print("triad    {:8.2f} GB/s  (bound {:.2f} tok/s; decode at {:.2f}x the bound)\n",
                 triad, triad * 1e9 / bytes, decode_tok_s * bytes / 1e9 / triad);
    }
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
  s->add_option("--precision", a->precision,
                "native (as stored), int8, q4 or q8: quantise a dense checkpoint at load")
      ->capture_default_str();
  s->add_flag("--bandwidth", a->bandwidth,
              "also measure the STREAM triad after the decode and report the bound");
  s->callback([a] { run(*a); });
});

}  // namespace
}  // namespace molt::cli
