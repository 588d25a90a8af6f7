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

struct Needle {
  std::vector<int32_t> prompt;
  std::string answer;
  int64_t answer_tokens = 0;
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
  auto answer = [&](Ladder& l, KVCache cache, const Needle& n) {
    return tok->decode(greedy_answer_from(l, 0, std::move(cache), n.prompt, n.answer_tokens));
  };
  std::vector<Needle> needles;
  for (const NeedleItem& item : read_needles(a.needles, a.context, a.count)) {
    Needle n;
    n.prompt = tok->encode(item.prompt);
    n.answer = item.answer;
    n.answer_tokens = static_cast<int64_t>(tok->encode(n.answer).size());
    if (n.prompt.size() < 2 || n.answer_tokens == 0) {
      fail("{}: needle {}: empty prompt or answer", a.needles, needles.size());
    }
    needles.push_back(std::move(n));
  }

  std::vector<std::string> names = {"sender reads the prompt", "receiver reads the prompt"};
  for (const Condition& c : set.conditions) names.push_back(c.name);
  std::vector<int64_t> correct(names.size(), 0);
  double mean_tokens = 0;
  for (const Needle& n : needles) {
    const std::span<const int32_t> head(n.prompt.data(), n.prompt.size() - 1);
    const int64_t cap = static_cast<int64_t>(n.prompt.size()) + n.answer_tokens;
    mean_tokens += static_cast<double>(n.prompt.size()) / static_cast<double>(needles.size());
    KVCache src = sender.new_cache(cap, /*keep_hidden=*/!a.recompute.empty());
    sender.forward(head, src, {});
    std::vector<std::string> got;
    {
      got.push_back(answer(*sender_ladder, src.copy(), n));
      KVCache native = receiver.new_cache(cap);
      receiver.forward(head, native, {});
      got.push_back(answer(*receiver_ladder, std::move(native), n));
    }
    for (const Condition& c : set.conditions) {
      KVCache dst = receiver.new_cache(cap);
      c.fill(src, head, dst);
      got.push_back(answer(*receiver_ladder, std::move(dst), n));
    }
    for (size_t i = 0; i < got.size(); ++i) correct[i] += needle_answer_matches(got[i], n.answer);
  }
  const double N = static_cast<double>(needles.size());
  nlohmann::json rows = nlohmann::json::array();
  for (size_t i = 0; i < names.size(); ++i) {
    rows.push_back(
        {{"condition", names[i]}, {"correct", correct[i]}, {"accuracy", correct[i] / N}});
  }
  nlohmann::json j = {{"from", a.from},
                      {"to", a.to},
                      {"maps", a.maps},
                      {"needles", a.needles},
                      {"context", a.context},
                      {"count", needles.size()},
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
      rung_name(a.from), rung_name(a.to), a.maps, needles.size(), a.context, mean_tokens);
  for (size_t i = 0; i < names.size(); ++i) {
    fmt::print("{:<28} {:>3}/{:<3} {:.3f}\n", names[i], correct[i], needles.size(), correct[i] / N);
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
