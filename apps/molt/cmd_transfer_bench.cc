// molt bench transfer: time applying a map to a cache against the receiver re-reading the
// same tokens (prefill), the cost a migration avoids.
#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <nlohmann/json.hpp>
#include <random>

#include "cmd_transfer_util.h"
#include "command.h"
#include "molt/common/error.h"
#include "molt/kernels/threads.h"
#include "molt/ladder/process_memory.h"
#include "molt/runtime/metrics.h"
#include "molt/transfer/map_file.h"
#include "molt/transfer/transfer.h"

namespace molt::cli {
namespace {

struct BenchArgs {
  std::string from, to, maps;
  int64_t context = 1024;
  int threads = 2, repeat = 3, prefill_repeat = 1, recompute = 0, anchors = 0;
  uint32_t seed = 1;
  bool json = false;
};

using clock_type = std::chrono::steady_clock;
double ms_since(clock_type::time_point t) {
  return std::chrono::duration<double, std::milli>(clock_type::now() - t).count();
}

void run(const BenchArgs& a) {
  set_num_threads(a.threads);
  auto sender = Model::load(a.from);
  auto receiver = Model::load(a.to);
  auto map = CacheMap::load(a.maps, *sender, *receiver);
  const int64_t n = a.context;
  if (a.anchors > n) fail("--anchors {} exceeds --context {}", a.anchors, n);
  const int64_t vocab =
      std::min<int64_t>({sender->config().vocab_size, receiver->config().vocab_size, 150000});
  std::mt19937 rng(a.seed);
  std::uniform_int_distribution<int32_t> tok(0, static_cast<int32_t>(vocab - 1));
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (auto& t : ids) t = tok(rng);

  auto t0 = clock_type::now();
  KVCache src = sender->new_cache(n, /*keep_hidden=*/a.recompute > 0);
  sender->forward(ids, src, {});
  const double sender_ms = ms_since(t0);

  TransferOptions o;
  o.recompute_layers = a.recompute;
  o.anchors = a.anchors;
  KVCache dst = receiver->new_cache(n);
  map->apply(*sender, src, *receiver, ids, o, dst);  // warm-up: touch pages, size buffers
  {
    KVCache warm = receiver->new_cache(8);  // touch the receiver's weights once
    receiver->forward(std::span<const int32_t>(ids.data(), 4), warm, {});
  }
  // Interleaved, so that both see the same machine load.
  std::vector<double> apply_ms, prefill_ms;
  for (int i = 0; i < std::max(a.repeat, a.prefill_repeat); ++i) {
    if (i < a.repeat) {
      dst.clear();
      t0 = clock_type::now();
      map->apply(*sender, src, *receiver, ids, o, dst);
      apply_ms.push_back(ms_since(t0));
    }
    if (i < a.prefill_repeat) {
      KVCache c = receiver->new_cache(n);
      t0 = clock_type::now();
      receiver->prefill(ids, c);
      prefill_ms.push_back(ms_since(t0));
    }
  }
  std::sort(apply_ms.begin(), apply_ms.end());
  std::sort(prefill_ms.begin(), prefill_ms.end());

  const double apply = apply_ms.front(), prefill = prefill_ms.front();
  const double map_flops = transfer_flops(*map, receiver->config(), n);
  const double pf_flops = prefill_flops(receiver->config(), n);
  const nlohmann::json j = {{"from", a.from},
                            {"to", a.to},
                            {"maps", a.maps},
                            {"method", map->method()},
                            {"k", map->data().info.value("k", nlohmann::json())},
                            {"context", n},
                            {"threads", a.threads},
                            {"recompute_layers", a.recompute},
                            {"anchors", a.anchors},
                            {"apply_ms", apply},
                            {"apply_ms_median", apply_ms[apply_ms.size() / 2]},
                            {"reprefill_ms", prefill},
                            {"reprefill_ms_median", prefill_ms[prefill_ms.size() / 2]},
                            {"ratio", apply / prefill},
                            {"speedup", prefill / apply},
                            {"map_gflop", map_flops / 1e9},
                            {"reprefill_gflop", pf_flops / 1e9},
                            {"flops_saved_gflop", (pf_flops - map_flops) / 1e9},
                            {"sender_prefill_ms", sender_ms},
                            {"peak_rss_mib", to_mib(read_process_memory().peak_bytes)}};
  if (a.json) {
    fmt::print("{}\n", j.dump());
    return;
  }
  fmt::print("{} → {} ({}, k = {}), {} tokens, {} threads\n", rung_name(a.from), rung_name(a.to),
             map->method(), j["k"].dump(), n, a.threads);
  fmt::print("map apply         {:10.1f} ms  ({:.2f} GFLOP; best of {})\n", apply, map_flops / 1e9,
             a.repeat);
  fmt::print("receiver prefill  {:10.1f} ms  ({:.2f} GFLOP; best of {})\n", prefill, pf_flops / 1e9,
             a.prefill_repeat);
  fmt::print("ratio             {:10.4f}     (apply / re-prefill; {:.1f}× faster)\n",
             apply / prefill, prefill / apply);
  fmt::print("peak RSS          {:10.1f} MiB\n", to_mib(read_process_memory().peak_bytes));
}

const bool registered = register_command([](CLI::App& root) {
  auto a = std::make_shared<BenchArgs>();
  CLI::App* s =
      group(root, "bench", "Benchmarks that print figures")
          ->add_subcommand("transfer", "Map application vs the receiver re-reading the tokens");
  s->add_option("--from", a->from, "sender checkpoint directory")->required();
  s->add_option("--to", a->to, "receiver checkpoint directory")->required();
  s->add_option("--maps", a->maps, "map directory")->required();
  s->add_option("--context", a->context, "cache length in tokens")->check(CLI::PositiveNumber);
  s->add_option("--threads", a->threads, "threads (0 = all cores)")->check(CLI::NonNegativeNumber);
  s->add_option("--repeat", a->repeat, "timed map applications (best is reported)")
      ->check(CLI::PositiveNumber);
  s->add_option("--prefill-repeat", a->prefill_repeat, "timed re-prefills")
      ->check(CLI::PositiveNumber);
  s->add_option("--recompute-layers", a->recompute, "recompute the receiver's last r layers")
      ->check(CLI::NonNegativeNumber);
  s->add_option("--anchors", a->anchors, "re-run the last a tokens natively")
      ->check(CLI::NonNegativeNumber);
  s->add_option("--seed", a->seed, "seed of the random tokens");
  s->add_flag("--json", a->json, "one JSON object");
  s->callback([a] { run(*a); });
});

}  // namespace
}  // namespace molt::cli
