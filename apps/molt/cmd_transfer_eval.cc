// molt transfer eval: how well a map's carried cache serves the receiver (DESIGN.md §6),
// beside the zero-cache and token-identity-cache floors (the latter's means from calibration
// text: the route's stored floor, or --floor-corpus).
#include <fmt/core.h>
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "cmd_transfer_util.h"
#include "command.h"
#include "floor_cli.h"
#include "molt/bench/transfer_bench.h"
#include "molt/bench/transfer_report.h"
#include "molt/common/error.h"
#include "molt/kernels/threads.h"
#include "molt/transfer/eval.h"
#include "molt/transfer/map_file.h"
#include "molt/transfer/transfer.h"

namespace molt::cli {
namespace {

struct EvalArgs {
  std::string from, to, maps, text_file, ids_file;
  int64_t prefix = 768, continuation = 256, windows = 4;
  std::vector<int> recompute, anchors;
  bool floors = true;
  FloorFlags floor;
  int threads = 2;
  bool json = false;
};

void run(const EvalArgs& a) {
  if (a.text_file.empty() == a.ids_file.empty())
    fail("give exactly one of --text-file and --ids-file");
  set_num_threads(a.threads);
  auto sender = Model::load(a.from);
  auto receiver = Model::load(a.to);
  auto map = CacheMap::load(a.maps, *sender, *receiver);
  ConditionSet set = transfer_conditions(*map, *sender, *receiver, a.recompute, a.anchors);
  nlohmann::json floor_source;
  if (a.floors) {
    const TokenFloor floor =
        resolve_floor(a.floor, a.maps, a.to, *receiver, FloorWindows::of_map(map->data()));
    add_floors(set, *receiver, floor);
    floor_source = floor.provenance();
  } else {
    refuse_floor_flags(a.floor, "with --no-floors");
  }
  const std::filesystem::path file = a.text_file.empty() ? a.ids_file : a.text_file;
  Corpus corpus = open_corpus(file, !a.ids_file.empty(), a.from, a.to);
  const int64_t T = a.prefix + a.continuation;
  std::vector<std::vector<int32_t>> windows;
  std::vector<int32_t> w;
  while (static_cast<int64_t>(windows.size()) < a.windows && corpus.stream->next_window(T, w)) {
    windows.push_back(w);
  }
  if (windows.empty()) {
    fail("{}: fewer than {} tokens (--prefix {} + --continuation {})", file.string(), T, a.prefix,
         a.continuation);
  }
  const int64_t vocab = std::min(sender->config().vocab_size, receiver->config().vocab_size);
  for (const auto& win : windows) {
    for (int32_t t : win) {
      if (t >= vocab)
        fail("{}: token id {} is outside the models' vocabulary ({})", file.string(), t, vocab);
    }
  }

  const TransferEval ev = evaluate_transfer(*sender, *receiver, windows, a.prefix, set.conditions,
                                            !a.recompute.empty());

  nlohmann::json j = {{"from", a.from},
                      {"to", a.to},
                      {"maps", a.maps},
                      {"method", map->method()},
                      {"k", map->data().info.value("k", nlohmann::json())},
                      {"windows", ev.windows},
                      {"prefix", ev.prefix},
                      {"scored_tokens", ev.scored_tokens},
                      {"native_nll", ev.native_nll},
                      {"sender_nll", ev.sender_nll},
                      {"native_seam_kl", ev.native_seam_kl},
                      {"token_identity_floor", floor_source}};
  j["conditions"] = condition_scores_json(ev);
  j["features"] = map->data().features.to_json();
  if (a.json) {
    // The files measured on, checksummed after the measurement (as `molt bench decode` does).
    j["sha256"] = transfer_run_sha256(a.from, a.to, a.maps, file);
    fmt::print("{}\n", j.dump());
    return;
  }
  fmt::print("{} → {} with {} ({}), {} windows: prefix {} tokens, {} tokens scored after it\n",
             rung_name(a.from), rung_name(a.to), a.maps, map->method(), ev.windows, ev.prefix,
             ev.scored_tokens);
  fmt::print("receiver native NLL {:.4f} (sender {:.4f}) nats/token\n\n", ev.native_nll,
             ev.sender_nll);
  fmt::print("{:<28} {:>10} {:>10} {:>13} {:>10}\n", "condition", "NLL", "NLL gap", "transfer KL",
             "seam KL");
  fmt::print("{:<28} {:>10.4f} {:>10} {:>13} {:>10.4f}\n", "native re-prefill (floor)",
             ev.native_nll, "0", "0", ev.native_seam_kl);
  for (const ConditionScore& c : ev.conditions) {
    fmt::print("{:<28} {:>10.4f} {:>+10.4f} {:>13.4f} {:>10.4f}\n", c.name, c.nll, c.nll_gap,
               c.transfer_kl, c.seam_kl);
  }
  fmt::print(
      "\nNLL gap = NLL − native; transfer KL = KL(native ‖ condition) and seam KL = "
      "KL(sender ‖ condition) at the first position after the switch.\n");
  if (a.floors) {
    fmt::print("Token-identity means: {} over {} (calibration text, not these windows).\n",
               floor_source["file"].is_null() ? "fitted now" : floor_source["file"].dump(),
               floor_source.value("corpus", std::string("?")));
  }
}

const bool registered = register_command([](CLI::App& root) {
  auto a = std::make_shared<EvalArgs>();
  CLI::App* s =
      group(root, "transfer", "Carry a KV cache between rungs")
          ->add_subcommand("eval",
                           "Prefix NLL gap, transfer and seam divergence of a map, beside floors");
  s->add_option("--from", a->from, "sender checkpoint directory")->required();
  s->add_option("--to", a->to, "receiver checkpoint directory")->required();
  s->add_option("--maps", a->maps, "map directory (molt fit --out)")->required();
  s->add_option("--text-file", a->text_file,
                "evaluation text (tokenized with the sender's tokenizer)");
  s->add_option("--ids-file", a->ids_file, "evaluation token ids, whitespace-separated");
  s->add_option("--prefix", a->prefix, "tokens carried across")->check(CLI::PositiveNumber);
  s->add_option("--continuation", a->continuation, "tokens read after the switch")
      ->check(CLI::Range(2, 1 << 20));
  s->add_option("--windows", a->windows, "evaluation windows")->check(CLI::PositiveNumber);
  s->add_option("--recompute-layers", a->recompute,
                "also evaluate map + recompute of r layers (list)")
      ->delimiter(',');
  s->add_option("--anchors", a->anchors, "also evaluate map + a anchors (list)")->delimiter(',');
  s->add_flag("!--no-floors", a->floors, "skip the zero and token-identity floors");
  add_floor_flags(s, a->floor);
  s->add_option("--threads", a->threads, "threads (0 = all cores)")->check(CLI::NonNegativeNumber);
  s->add_flag("--json", a->json, "one JSON object");
  s->callback([a] { run(*a); });
});

}  // namespace
}  // namespace molt::cli
