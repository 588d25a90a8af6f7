// molt bench switch: the cost of one migration (budget cut → receiver's first logits) by
// policy and context length, through the runtime's own migrate().
// With --json the first line is the provenance: the SHA-256 of every file measured on.
#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "command.h"
#include "molt/bench/switch_bench.h"
#include "molt/bench/switch_report.h"
#include "molt/common/error.h"
#include "molt/kernels/threads.h"
#include "molt/runtime/session.h"
#include "molt/runtime/switch_cost.h"
#include "molt/transfer/map_file.h"

namespace molt::cli {
namespace {

struct SwitchArgs {
  std::string ladder, from, to;
  std::vector<int64_t> contexts = {256, 1024, 2000};
  std::vector<std::string> policies = {"molt", "reprefill", "release-reprefill"};
  int repeat = 3;
  bool fill_sender = false, json = false;
  int64_t shape_map_k = 0;
  int threads = 0;
};

void run(const SwitchArgs& a) {
  set_num_threads(a.threads);
  auto l = Ladder::open(a.ladder);
  const int from = l->index(a.from), to = l->index(a.to);
  if (a.shape_map_k > 0 && write_shape_map(*l, from, to, a.shape_map_k)) {
    fmt::print(stderr, "wrote a shape-only map (k = {}) to {}\n", a.shape_map_k,
               l->route(from, to)->maps.string());
  }
  if (a.json) fmt::print("{}\n", switch_provenance(*l, from, to).dump());
  if (!a.json) {
    fmt::print("switch {} → {} on {} ({} threads; median of {}; sender cache {})\n", a.from, a.to,
               l->name(), num_threads(), a.repeat, a.fill_sender ? "filled" : "prefilled natively");
    fmt::print("{:>8}  {:<18} {:>10} {:>9} {:>9} {:>9} {:>12} {:>10}\n", "context", "policy",
               "switch ms", "load ms", "carry ms", "decode", "FLOPs saved", "peak MiB");
  }
  std::mt19937 rng(1);
  for (int64_t n : a.contexts) {
    std::vector<int32_t> ids(static_cast<size_t>(n + 1));
    for (auto& t : ids) t = static_cast<int32_t>(rng() % static_cast<uint32_t>(l->vocab_size()));
    for (const std::string& p : a.policies) {
      SwitchCostOptions o;
      o.policy = parse_policy(p);
      o.native_sender_cache = !a.fill_sender;
      std::vector<MigrationEvent> runs;
      runs.reserve(static_cast<size_t>(a.repeat));
      for (int i = 0; i < a.repeat; ++i) runs.push_back(measure_switch(*l, from, to, ids, o));
      std::sort(runs.begin(), runs.end(), [](const auto& x, const auto& y) { return x.ms < y.ms; });
      const MigrationEvent& m = runs[runs.size() / 2];
      if (a.json) {
        nlohmann::json j = to_json(m);
        j["event"] = "switch_cost";
        j["threads"] = num_threads();
        fmt::print("{}\n", j.dump());
      } else {
        fmt::print("{:>8}  {:<18} {:>10.1f} {:>9.1f} {:>9.1f} {:>9.1f} {:>11.1f}% {:>10.1f}{}\n", n,
                   m.policy, m.ms, m.load_ms, m.carry_ms, m.first_decode_ms, 100 * m.flops_saved,
                   m.peak_mib, m.policy != p ? "  (" + m.note + ")" : "");
      }
      std::fflush(stdout);
    }
  }
}

const bool registered = register_command([](CLI::App& root) {
  auto a = std::make_shared<SwitchArgs>();
  CLI::App* s =
      group(root, "bench", "Benchmarks that print figures")
          ->add_subcommand("switch", "Cost of one migration by policy and context length");
  s->add_option("--ladder", a->ladder, "ladder manifest")->required();
  s->add_option("--from", a->from, "sender rung")->required();
  s->add_option("--to", a->to, "receiver rung")->required();
  s->add_option("--contexts", a->contexts, "context lengths")->delimiter(',');
  s->add_option("--policies", a->policies, "policies")
      ->delimiter(',')
      ->check(CLI::IsMember(policy_names()));
  s->add_option("--repeat", a->repeat, "runs per cell (median)")->check(CLI::PositiveNumber);
  s->add_flag("--fill-sender", a->fill_sender, "fill the sender's cache instead of prefilling it");
  s->add_option("--shape-map", a->shape_map_k,
                "write a random map with k sources where the route has none");
  s->add_flag("--json", a->json,
              "a provenance line (SHA-256 of the files), then one object per cell");
  s->add_option("--threads", a->threads, "threads (0 = all cores)")->check(CLI::NonNegativeNumber);
  s->callback([a] { run(*a); });

  auto in = std::make_shared<std::string>(), out = std::make_shared<std::string>();
  CLI::App* r =
      group(root, "bench", "Benchmarks that print figures")
          ->add_subcommand("switch-report",
                           "docs/SWITCHING.md from the JSON of scripts/switch-figures.sh");
  r->add_option("--in", *in, "figures folder (docs/figures/switch)")->required();
  r->add_option("--out", *out, "page to write")->required();
  r->callback([in, out] {
    const std::string md = switch_report(*in);
    std::ofstream f(*out, std::ios::binary);
    if (!(f << md)) fail("switch-report: cannot write {}", *out);
  });
});

}  // namespace
}  // namespace molt::cli
