// molt bench decode: prefill and decode speed of one model, beside the memory-bandwidth bound.
#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <vector>

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
  int rounds = 5;
  bool interleave = false;
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
  load_options.interleave = a.interleave;
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
  const double prefill_s = std::chrono::duration<double>(clock::now() - t0).count();
  const double prefill_tok_s = a.prompt_tokens / prefill_s;
  // The bound's bandwidth is timed in the same seconds as the decode: with --bandwidth every
  // decode step is followed by one STREAM triad pass (arrays made once, 3 × 64 MiB). This VM's
  // bandwidth moves by a third within seconds (host neighbours), so a triad taken before or
  // after the decode, or the best of a few passes, measures a different moment. Each round's
  // figures are rates over its own seconds (steps ÷ decode time, pass bytes ÷ triad time), and
  // x bound is the median of the rounds' paired ratios. The best single pass (STREAM's own
  // statistic) is reported beside it.
  const int rounds = a.bandwidth ? std::min(a.rounds, a.tokens) : 1;
  const double bytes = weight_bytes_per_token(*model);
  std::unique_ptr<TriadProbe> probe;
  double triad_best_s = 1e30;
  if (a.bandwidth) {
    probe = std::make_unique<TriadProbe>(64);
    probe->pass();  // warm-up
  }
  std::vector<double> round_tok_s, round_triad, round_ratio;
  double decode_s = 0.0;
  int32_t next = tok(rng);
  for (int r = 0; r < rounds; ++r) {
    const int n = a.tokens * (r + 1) / rounds - a.tokens * r / rounds;
    double s = 0.0, triad_s = 0.0;
    for (int i = 0; i < n; ++i) {
      const auto s0 = clock::now();
      logits = model->decode(next, cache);
      s += std::chrono::duration<double>(clock::now() - s0).count();
      next = tok(rng);
      if (probe) {
        const double t = probe->pass();
        triad_s += t;
        triad_best_s = std::min(triad_best_s, t);
      }
    }
    decode_s += s;
    round_tok_s.push_back(n / s);
    if (probe) {
      round_triad.push_back(n * probe->bytes_per_pass() / triad_s / 1e9);
      round_ratio.push_back(n / s * bytes / 1e9 / round_triad.back());
    }
  }
  const double decode_tok_s = a.tokens / decode_s;
  const auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    const size_t h = v.size() / 2;
    return v.size() % 2 ? v[h] : 0.5 * (v[h - 1] + v[h]);
  };
  const double triad = a.bandwidth ? median(round_triad) : 0.0;
  const double x_bound = a.bandwidth ? median(round_ratio) : 0.0;
  const double triad_best = probe ? probe->bytes_per_pass() / triad_best_s / 1e9 : 0.0;
  // The first layer's q projection stands for the model's linears.
  const WeightMatrix q0 =
      model->weights().layers.empty() ? WeightMatrix{} : model->weights().layers[0].q;
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
      {"layout", q0.rows8 ? "rows8" : "rows"},
      {"load_s", load_s},
      {"weight_dtype", std::string(dtype_name(q0.dtype))},
      {"weight_bits", q0.quantized() ? q0.bits : 8 * static_cast<int>(dtype_size(q0.dtype))},
      {"group_size", q0.group_size},
      {"prefill_gflop_s", linear_flops(*model, a.prompt_tokens) / prefill_s / 1e9}};
  if (a.bandwidth) {
    j["triad_gb_s"] = triad;
    j["bound_tok_s"] = triad * 1e9 / bytes;
    j["x_bound"] = x_bound;
    j["triad_best_gb_s"] = triad_best;
    j["x_bound_best_triad"] = decode_tok_s * bytes / 1e9 / triad_best;
    j["rounds"] = nlohmann::json::array();
    for (size_t r = 0; r < round_ratio.size(); ++r) {
      j["rounds"].push_back({{"decode_tok_s", round_tok_s[r]},
                             {"triad_gb_s", round_triad[r]},
                             {"x_bound", round_ratio[r]}});
    }
  }
  if (a.json) {
    fmt::print("{}\n", j.dump());
  } else {
    fmt::print("prefill  {:8.1f} tok/s  ({} tokens)\n", prefill_tok_s, a.prompt_tokens);
    fmt::print("decode   {:8.2f} tok/s  ({:.2f} GB/s of weights, {:.1f} MB per token)\n",
               decode_tok_s, decode_tok_s * bytes / 1e9, bytes / 1e6);
    if (a.bandwidth) {
      fmt::print(
          "triad    {:8.2f} GB/s  (a pass after every step; median of {} rounds; bound {:.2f} "
          "tok/s)\n",
          triad, round_triad.size(), triad * 1e9 / bytes);
      fmt::print("x bound  {:8.2f}       (median of the rounds' decode GB/s / triad GB/s)\n",
                 x_bound);
      fmt::print("best     {:8.2f} GB/s  (fastest single triad pass; decode at {:.2f} of it)\n",
                 triad_best, decode_tok_s * bytes / 1e9 / triad_best);
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
  s->add_flag("--interleave", a->interleave,
              "MLX weights with rows interleaved by 8 (a heap copy made at load; faster "
              "decode on x86)");
  s->add_flag("--bandwidth", a->bandwidth,
              "also time a STREAM triad pass after every decode step and report the bound");
  s->add_option(
       "--rounds", a->rounds,
       "with --bandwidth: decode rounds, each paired with the triad passes run between its "
       "steps")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  s->callback([a] { run(*a); });
});

}  // namespace
}  // namespace molt::cli
