// molt bench decode: prefill and decode speed of one model, beside the memory-bandwidth bound;
// with --batch N, N sequences decoded together against the same sequences one at a time.
#include <fmt/core.h>

#include <memory>
#include <nlohmann/json.hpp>

#include "command.h"
#include "molt/bench/decode_bench.h"
#include "molt/bench/performance_report.h"
#include "molt/kernels/kv_rows.h"
#include "molt/kernels/linear.h"
#include "molt/kernels/threads.h"
#include "molt/runtime/options.h"

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
  std::string layout = "auto";
  int batch = 1;
  std::string gemm;  // empty: as the process started (MOLT_GEMM, else auto)
  std::string kv_dtype{kv_dtype_name(SessionOptions{}.kv_dtype)};  // the product's default
};

void run(const BenchDecodeArgs& a) {
  set_num_threads(a.threads);
  if (!a.gemm.empty()) set_gemm_precision(parse_gemm_precision(a.gemm, "--gemm"));
  DecodeBenchOptions o;
  o.prompt_tokens = a.prompt_tokens;
  o.tokens = a.tokens;
  o.precision = a.precision;
  o.layout = parse_weight_layout(a.layout);
  o.bandwidth = a.bandwidth;
  o.rounds = a.rounds;
  o.batch = a.batch;
  o.kv_dtype = parse_kv_dtype(a.kv_dtype, "--kv-dtype");
  nlohmann::json j = run_decode_bench(a.model, o);

  if (a.json) {
    // The files measured on, checksummed after the timing (reading them takes seconds at 1.5B).
    j["sha256"] = checkpoint_sha256(a.model);
    fmt::print("{}\n", j.dump());
  } else {
    auto f = [&](const char* key) { return j.at(key).get<double>(); };
    fmt::print("prefill  {:8.1f} tok/s  ({} tokens, GEMM {}, {} K/V cache, SIMD {})\n",
               f("prefill_tok_s"), a.prompt_tokens, j.at("gemm").get<std::string>(), a.kv_dtype,
               j.at("simd").get<std::string>());
    fmt::print(
        "decode   {:8.2f} tok/s  ({:.2f} GB/s of weights, {:.1f} MB per token, quantised kernel "
        "{})\n",
        f("decode_tok_s"), f("decode_gb_s"), f("weight_bytes_per_token") / 1e6,
        j.at("quant_kernel").get<std::string>());
    if (const std::string note = j.at("layout_note").get<std::string>(); !note.empty()) {
      fmt::print("layout   {}\n", note);
    }
    if (a.batch > 1) {
      fmt::print(
          "batch    {:8.2f} tok/s  ({} sequences together; one at a time {:.2f} tok/s, "
          "alternating step by step)\n",
          f("batch_decode_tok_s"), a.batch, f("single_decode_tok_s"));
      fmt::print(
          "x single {:8.2f}       (median of the {} steps' ratios {:.2f}); tokens identical\n",
          f("batch_speedup"), j.at("batch_rounds").size(), f("batch_speedup_median_round"));
    }
    if (a.bandwidth) {
      fmt::print(
          "triad    {:8.2f} GB/s  (a pass after every step; median of {} rounds; bound {:.2f} "
          "tok/s)\n",
          f("triad_gb_s"), j.at("rounds").size(), f("bound_tok_s"));
      fmt::print("x bound  {:8.2f}       (median of the rounds' decode GB/s / triad GB/s)\n",
                 f("x_bound"));
      fmt::print("best     {:8.2f} GB/s  (fastest single triad pass; decode at {:.2f} of it)\n",
                 f("triad_best_gb_s"), f("x_bound_best_triad"));
    }
    fmt::print("peak RSS {:8.1f} MiB\n", f("peak_rss_mib"));
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
  s->add_option("--gemm", a->gemm,
                "prefill arithmetic for 16-bit and quantised weights: auto (bf16 where the CPU "
                "has bf16 dot products), f32 or bf16 (default: MOLT_GEMM, else auto)")
      ->check(CLI::IsMember({"auto", "f32", "bf16"}));
  s->add_option("--kv-dtype", a->kv_dtype, "K and V rows of the cache: f16 | f32 | int8")
      ->check(CLI::IsMember({"f32", "f16", "int8"}))
      ->capture_default_str();
  s->add_option("--precision", a->precision,
                "native (as stored), int8, q4 or q8: quantise a dense checkpoint at load")
      ->capture_default_str();
  add_layout_option(s, a->layout);
  s->add_option("--batch", a->batch,
                "decode N sequences together (one pass over the weights per step) beside the "
                "same N one at a time, alternating step by step, and report both")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
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
