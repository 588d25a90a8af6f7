// molt transfer needle: a fact planted in the prompt, the switch forced right before the
// answer (DESIGN.md §6 needle accuracy). The sender reads the prompt; its cache crosses to
// the receiver, which decodes the answer greedily. Exact match, beside both rungs reading the
// prompt themselves and the zero / token-identity floors.
#include <fmt/core.h>
#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "cmd_transfer_util.h"
#include "command.h"
#include "floor_cli.h"
#include "molt/bench/answer.h"
#include "molt/bench/needles.h"
#include "molt/bench/transfer_bench.h"
#include "molt/bench/transfer_report.h"
#include "molt/common/error.h"
#include "molt/kernels/threads.h"

namespace molt::cli {
namespace {

struct NeedleArgs {
  std::string from, to, maps, needles;
  int64_t context = 700, count = 30;
  std::vector<int> recompute, anchors;
  bool floors = true;
  FloorFlags floor;
  int threads = 2;
  bool json = false;
};

void run(const NeedleArgs& a) {
  set_num_threads(a.threads);
  // Each side is a one-rung ladder, so every answer decodes through the one generation loop.
  auto sender_ladder = Ladder::single(a.from), receiver_ladder = Ladder::single(a.to);
  sender_ladder->rung(0).load();
  receiver_ladder->rung(0).load();
  const Model& sender = sender_ladder->rung(0).model();
  const Model& receiver = receiver_ladder->rung(0).model();
  auto map = CacheMap::load(a.maps, sender, receiver);
  // The floors' means come from calibration text: needle prompts hold the answer.
  ConditionSet set = transfer_conditions(*map, sender, receiver, a.recompute, a.anchors);
  nlohmann::json floor_source;
  if (a.floors) {
    const TokenFloor floor =
        resolve_floor(a.floor, a.maps, a.to, receiver, FloorWindows::of_map(map->data()));
    add_floors(set, receiver, floor);
    floor_source = floor.provenance();
  } else {
    refuse_floor_flags(a.floor, "with --no-floors");
  }
  auto tok = Tokenizer::load(a.from);
  const nlohmann::json counts =
      transfer_needles(*sender_ladder, 0, *receiver_ladder, 0, *tok, set, !a.recompute.empty(),
                       read_needles(a.needles, a.context, a.count));
  const nlohmann::json& rows = counts.at("conditions");
  const double mean_tokens = counts.at("mean_prompt_tokens").get<double>();
  const int64_t count = counts.at("count").get<int64_t>();
  nlohmann::json j = {{"from", a.from},
                      {"to", a.to},
                      {"maps", a.maps},
                      {"needles", a.needles},
                      {"context", a.context},
                      {"count", count},
                      {"mean_prompt_tokens", mean_tokens},
                      {"token_identity_floor", floor_source},
                      {"conditions", rows}};
  if (a.json) {
    // The files measured on, checksummed after the measurement (as `molt bench decode` does).
    j["sha256"] = transfer_run_sha256(a.from, a.to, a.maps, a.needles);
    fmt::print("{}\n", j.dump());
    return;
  }
  fmt::print(
      "{} → {} with {}: {} needles at context {} (mean {:.0f} prompt tokens), switch right "
      "before the answer\n",
      rung_name(a.from), rung_name(a.to), a.maps, count, a.context, mean_tokens);
  for (const nlohmann::json& r : rows) {
    fmt::print("{:<28} {:>3}/{:<3} {:.3f}\n", r.at("condition").get<std::string>(),
               r.at("correct").get<int64_t>(), count, r.at("accuracy").get<double>());
  }
}

const bool registered = register_command([](CLI::App& root) {
  auto a = std::make_shared<NeedleArgs>();
  CLI::App* s =
      group(root, "transfer", "Carry a KV cache between rungs")
          ->add_subcommand("needle", "Needle accuracy with the switch right before the answer");
  s->add_option("--from", a->from, "sender checkpoint directory (its tokenizer is used)")
      ->required();
  s->add_option("--to", a->to, "receiver checkpoint directory")->required();
  s->add_option("--maps", a->maps, "map directory")->required();
  s->add_option("--needles", a->needles, "JSON lines {prompt, answer, context}")->required();
  s->add_option("--context", a->context, "use the needles of this context length");
  s->add_option("--count", a->count, "at most this many needles")->check(CLI::PositiveNumber);
  s->add_option("--recompute-layers", a->recompute, "also map + recompute of r layers (list)")
      ->delimiter(',');
  s->add_option("--anchors", a->anchors, "also map + a anchors (list)")->delimiter(',');
  s->add_flag("!--no-floors", a->floors, "skip the zero and token-identity floors");
  add_floor_flags(s, a->floor);
  s->add_option("--threads", a->threads, "threads (0 = all cores)")->check(CLI::NonNegativeNumber);
  s->add_flag("--json", a->json, "one JSON object");
  s->callback([a] { run(*a); });
});

}  // namespace
}  // namespace molt::cli
