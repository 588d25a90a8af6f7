#include "molt/bench/decode_bench.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <random>
#include <vector>

#include "molt/common/error.h"
#include "molt/kernels/bandwidth.h"
#include "molt/kernels/kv_rows.h"
#include "molt/kernels/linear.h"
#include "molt/kernels/ops.h"
#include "molt/kernels/quant.h"
#include "molt/kernels/threads.h"
#include "molt/ladder/process_memory.h"
#include "molt/model/model.h"
#include "molt/runtime/metrics.h"

namespace molt {
namespace {

// Bytes of weights a decode step reads: every layer matrix once plus the lm_head, with their
// scales and biases when quantised (the embedding row read, norms and biases are negligible).
double weight_bytes_per_token(const Model& m) {
  double b = static_cast<double>(m.weights().lm_head.bytes());
  for (const LayerWeights& L : m.weights().layers) {
    for (const WeightMatrix* w : {&L.q, &L.k, &L.v, &L.o, &L.gate, &L.up, &L.down}) b += w->bytes();
  }
  return b;
}

int32_t argmax(std::span<const float> v) {
  return static_cast<int32_t>(std::max_element(v.begin(), v.end()) - v.begin());
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t h = v.size() / 2;
  return v.size() % 2 ? v[h] : 0.5 * (v[h - 1] + v[h]);
}

struct BatchFigures {
  double batch_tok_s = 0, single_tok_s = 0;  // aggregate over the N sequences, both ways
  std::vector<double> round_batch, round_single;
  bool identical = true;  // every sequence's tokens equal batched and alone
  int64_t first_mismatch = -1;
};

// N sequences (prompts of different lengths) decoded greedily a.tokens steps, batched
// (decode_batch, one pass over the weights per step) and one at a time (decode on copies of the
// same prefilled caches), side by side: every step is one round (a batched step, and one step
// of each sequence alone), rounds alternate which goes first, so the machine's drift
// (neighbours, other builds) falls on both alike; bursts last longer than a round.
BatchFigures bench_batch(const Model& m, const DecodeBenchOptions& a, std::mt19937& rng) {
  using clock = std::chrono::steady_clock;
  const ModelConfig& c = m.config();
  const int64_t N = a.batch, V = c.vocab_size;
  std::uniform_int_distribution<int32_t> tok(
      0, static_cast<int32_t>(std::min<int64_t>(V, 150000) - 1));
  std::vector<KVCache> batched, alone;
  std::vector<KVCache*> ptrs;
  std::vector<float> batch_logits(static_cast<size_t>(N * V)), logits(static_cast<size_t>(V));
  std::vector<int32_t> next_b(static_cast<size_t>(N)), next_a(static_cast<size_t>(N));
  for (int64_t i = 0; i < N; ++i) {
    const int64_t len = std::max<int64_t>(1, a.prompt_tokens * (N - i) / N);
    std::vector<int32_t> prompt(static_cast<size_t>(len));
    for (auto& t : prompt) t = tok(rng);
    batched.push_back(m.new_cache(len + a.tokens + 1, false, a.kv_dtype));
    m.forward(prompt, batched.back(), {}, logits);
    alone.push_back(batched.back().copy());
    next_b[static_cast<size_t>(i)] = next_a[static_cast<size_t>(i)] = argmax(logits);
  }
  ptrs.reserve(batched.size());
  for (KVCache& k : batched) ptrs.push_back(&k);
  // Warm-up of the batched path on throwaway caches (kernel buffers sized for N rows).
  {
    std::vector<KVCache> warm;
    std::vector<KVCache*> wp;
    warm.reserve(static_cast<size_t>(N));
    wp.reserve(static_cast<size_t>(N));
    for (int64_t i = 0; i < N; ++i) warm.push_back(m.new_cache(2, false, a.kv_dtype));
    for (KVCache& k : warm) wp.push_back(&k);
    m.decode_batch(next_b, wp, batch_logits);
  }
  std::vector<std::vector<int32_t>> out_b(static_cast<size_t>(N)), out_a(static_cast<size_t>(N));
  auto run_batched = [&](int n) {
    for (int s = 0; s < n; ++s) {
      m.decode_batch(next_b, ptrs, batch_logits);
      for (int64_t i = 0; i < N; ++i) {
        next_b[static_cast<size_t>(i)] =
            argmax(std::span<const float>(batch_logits).subspan(static_cast<size_t>(i * V), V));
        out_b[static_cast<size_t>(i)].push_back(next_b[static_cast<size_t>(i)]);
      }
    }
  };
  auto run_alone = [&](int n) {
    for (int64_t i = 0; i < N; ++i) {
      for (int s = 0; s < n; ++s) {
        m.decode(next_a[static_cast<size_t>(i)], alone[static_cast<size_t>(i)], logits);
        next_a[static_cast<size_t>(i)] = argmax(logits);
        out_a[static_cast<size_t>(i)].push_back(next_a[static_cast<size_t>(i)]);
      }
    }
  };
  BatchFigures f;
  const int rounds = a.tokens;
  double batch_s = 0, single_s = 0;
  for (int r = 0; r < rounds; ++r) {
    const int n = a.tokens * (r + 1) / rounds - a.tokens * r / rounds;
    double tb = 0, ta = 0;
    for (int part = 0; part < 2; ++part) {
      const bool batched_part = (part == 0) == (r % 2 == 0);
      const auto t0 = clock::now();
      if (batched_part) {
        run_batched(n);
      } else {
        run_alone(n);
      }
      (batched_part ? tb : ta) = std::chrono::duration<double>(clock::now() - t0).count();
    }
    batch_s += tb;
    single_s += ta;
    f.round_batch.push_back(static_cast<double>(N * n) / tb);
    f.round_single.push_back(static_cast<double>(N * n) / ta);
  }
  f.batch_tok_s = static_cast<double>(N * a.tokens) / batch_s;
  f.single_tok_s = static_cast<double>(N * a.tokens) / single_s;
  for (int64_t i = 0; i < N && f.identical; ++i) {
    if (out_b[static_cast<size_t>(i)] != out_a[static_cast<size_t>(i)]) {
      f.identical = false;
      f.first_mismatch = i;
    }
  }
  return f;
}

}  // namespace

nlohmann::json run_decode_bench(const std::filesystem::path& path, const DecodeBenchOptions& a) {
  if (a.batch > 1 && a.bandwidth) fail("bench decode: --batch and --bandwidth are separate runs");
  LoadOptions load_options;
  load_options.precision = parse_precision(a.precision);
  load_options.layout = a.layout;
  const auto l0 = std::chrono::steady_clock::now();
  auto model = Model::load(path, load_options);
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
    KVCache warm = model->new_cache(8, false, a.kv_dtype);
    model->decode(prompt[0], warm);
  }
  KVCache cache = model->new_cache(a.prompt_tokens + a.tokens + 1, false, a.kv_dtype);
  const auto t0 = clock::now();
  std::vector<float> logits = model->prefill(prompt, cache);
  const double prefill_s = std::chrono::duration<double>(clock::now() - t0).count();
  // Decode writes into one logits buffer, as the runtime's step does, not into a fresh 600 KB
  // vector per step (zeroed each time: ~30 us of a 0.5B token in a profile, below the noise of
  // tok/s in 6 alternating pairs).
  logits.resize(static_cast<size_t>(model->config().vocab_size));
  const double prefill_tok_s = a.prompt_tokens / prefill_s;
  // The bound's bandwidth is timed in the same seconds as the decode: with --bandwidth every
  // decode step is followed by one STREAM triad pass (arrays made once, 3 × 64 MiB). This VM's
  // bandwidth moves by a third within seconds (host neighbours), so a triad taken before or
  // after the decode, or the best of a few passes, measures a different moment. Each round's
  // figures are rates over its own seconds (steps ÷ decode time, pass bytes ÷ triad time), and
  // x bound is the median of the rounds' paired ratios. The best single pass (STREAM's own
  // statistic) is reported beside it.
  // With --batch the single-sequence figure is the batch's side-by-side one (no loop here).
  const int rounds = a.batch > 1 ? 0 : a.bandwidth ? std::min(a.rounds, a.tokens) : 1;
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
      model->decode(next, cache, logits);
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
  BatchFigures batch;
  if (a.batch > 1) batch = bench_batch(*model, a, rng);
  const double decode_tok_s = a.batch > 1 ? batch.single_tok_s : a.tokens / decode_s;
  const FlopCount flops = prefill_flop_count(model->config(), a.prompt_tokens);
  const double triad = a.bandwidth ? median(round_triad) : 0.0;
  const double x_bound = a.bandwidth ? median(round_ratio) : 0.0;
  const double triad_best = probe ? probe->bytes_per_pass() / triad_best_s / 1e9 : 0.0;
  // The first layer's q projection stands for the model's linears.
  const WeightMatrix q0 =
      model->weights().layers.empty() ? WeightMatrix{} : model->weights().layers[0].q;
  nlohmann::json j = {
      {"model", path.string()},
      {"threads", num_threads()},
      {"prompt_tokens", a.prompt_tokens},
      {"tokens", a.tokens},
      {"prefill_tok_s", prefill_tok_s},
      {"gemm", gemm_path_name(q0.dtype)},
      {"simd", simd_target_name()},
      {"quant_kernel", q0.quantized() ? qmatvec_kernel_name() : "none (dense weights)"},
      {"kv_dtype", kv_dtype_name(a.kv_dtype)},
      {"kv_bytes_per_token", cache.kv_bytes_per_token()},
      {"decode_tok_s", decode_tok_s},
      {"weight_bytes_per_token", bytes},
      {"decode_gb_s", decode_tok_s * bytes / 1e9},
      {"peak_rss_mib", to_mib(read_process_memory().peak_bytes)},
      {"precision", a.precision},
      {"layout", q0.rows8 ? "rows8" : "rows"},
      {"layout_note", model->layout_note()},
      {"load_s", load_s},
      {"weight_dtype", std::string(dtype_name(q0.dtype))},
      {"weight_bits", q0.quantized() ? q0.bits : 8 * static_cast<int>(dtype_size(q0.dtype))},
      {"group_size", q0.group_size},
      {"prefill_s", prefill_s},
      // What the FLOP count is of, so a recorded figure can be recounted (performance_trace_test).
      {"config",
       {{"hidden_size", c.hidden_size},
        {"intermediate_size", c.intermediate_size},
        {"num_hidden_layers", c.num_hidden_layers},
        {"num_attention_heads", c.num_attention_heads},
        {"num_key_value_heads", c.num_key_value_heads},
        {"head_dim", c.head_dim},
        {"vocab_size", c.vocab_size}}},
      {"prefill_flops", flops.total()},
      {"prefill_flops_linear", flops.linear},
      {"prefill_flops_attention", flops.attention},
      {"prefill_flops_lm_head", flops.lm_head},
      {"prefill_gflop_s", flops.total() / prefill_s / 1e9}};
  if (a.bandwidth) {
    j["triad_gb_s"] = triad;
    j["bound_tok_s"] = triad * 1e9 / bytes;
    j["x_bound"] = x_bound;
    j["triad_best_gb_s"] = triad_best;
    j["triad_pass_bytes"] = probe->bytes_per_pass();
    j["x_bound_best_triad"] = decode_tok_s * bytes / 1e9 / triad_best;
    j["rounds"] = nlohmann::json::array();
    for (size_t r = 0; r < round_ratio.size(); ++r) {
      j["rounds"].push_back({{"decode_tok_s", round_tok_s[r]},
                             {"triad_gb_s", round_triad[r]},
                             {"x_bound", round_ratio[r]}});
    }
  }
  if (a.batch > 1) {
    std::vector<double> ratios;
    for (size_t r = 0; r < batch.round_batch.size(); ++r) {
      ratios.push_back(batch.round_batch[r] / batch.round_single[r]);
    }
    j["batch"] = a.batch;
    j["batch_decode_tok_s"] = batch.batch_tok_s;    // aggregate, N sequences together
    j["single_decode_tok_s"] = batch.single_tok_s;  // the same N sequences one at a time
    j["batch_speedup"] = batch.batch_tok_s / batch.single_tok_s;
    j["batch_speedup_median_round"] = median(ratios);
    j["batch_tokens_identical"] = batch.identical;
    j["batch_rounds"] = nlohmann::json::array();
    for (size_t r = 0; r < ratios.size(); ++r) {
      j["batch_rounds"].push_back({{"batch_decode_tok_s", batch.round_batch[r]},
                                   {"single_decode_tok_s", batch.round_single[r]},
                                   {"batch_speedup", ratios[r]}});
    }
  }
  // Batched decode must not change a token: figures from a run where it did are no figures.
  if (!batch.identical) {
    fail("bench decode: batched tokens of sequence {} differ from decoding it alone",
         batch.first_mismatch);
  }
  return j;
}

}  // namespace molt
