#include "molt/bench/transfer_bench.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "molt/bench/answer.h"
#include "molt/common/error.h"
#include "molt/runtime/route_setup.h"
#include "molt/tokenizer/tokenizer.h"
#include "molt/transfer/corpus.h"
#include "molt/transfer/eval.h"
#include "molt/transfer/map_file.h"
#include "molt/transfer/token_floor.h"
#include "molt/transfer/transfer.h"

namespace molt {

namespace fs = std::filesystem;
using json = nlohmann::json;

json condition_scores_json(const TransferEval& ev) {
  json cs = json::array();
  for (const ConditionScore& c : ev.conditions) {
    cs.push_back({{"condition", c.name},
                  {"nll", c.nll},
                  {"nll_gap", c.nll_gap},
                  {"transfer_kl", c.transfer_kl},
                  {"seam_kl", c.seam_kl},
                  {"window_nll_gaps", c.window_gaps}});
  }
  return cs;
}

json transfer_needles(Ladder& sender_ladder, int sender_rung, Ladder& receiver_ladder,
                      int receiver_rung, const Tokenizer& tok, const ConditionSet& set,
                      bool sender_hidden, const std::vector<NeedleItem>& items) {
  struct Needle {
    std::vector<int32_t> prompt;
    std::string answer;
    int64_t answer_tokens = 0;
  };
  sender_ladder.rung(sender_rung).load();
  receiver_ladder.rung(receiver_rung).load();
  const Model& sender = sender_ladder.rung(sender_rung).model();
  const Model& receiver = receiver_ladder.rung(receiver_rung).model();
  std::vector<Needle> needles;
  for (const NeedleItem& item : items) {
    Needle n;
    n.prompt = tok.encode(item.prompt);
    n.answer = item.answer;
    n.answer_tokens = static_cast<int64_t>(tok.encode(n.answer).size());
    if (n.prompt.size() < 2 || n.answer_tokens == 0) {
      fail("needle {}: empty prompt or answer", needles.size());
    }
    needles.push_back(std::move(n));
  }
  if (needles.empty()) fail("transfer needles: no needles");
  auto answer = [&](Ladder& l, int rung, KVCache cache, const Needle& n) {
    return tok.decode(greedy_answer_from(l, rung, std::move(cache), n.prompt, n.answer_tokens));
  };
  std::vector<std::string> names = {"sender reads the prompt", "receiver reads the prompt"};
  for (const Condition& c : set.conditions) names.push_back(c.name);
  std::vector<int64_t> correct(names.size(), 0);
  double mean_tokens = 0;
  for (const Needle& n : needles) {
    const std::span<const int32_t> head(n.prompt.data(), n.prompt.size() - 1);
    const int64_t cap = static_cast<int64_t>(n.prompt.size()) + n.answer_tokens;
    mean_tokens += static_cast<double>(n.prompt.size()) / static_cast<double>(needles.size());
    KVCache src = sender.new_cache(cap, sender_hidden);
    sender.forward(head, src, {});
    std::vector<std::string> got;
    got.push_back(answer(sender_ladder, sender_rung, src.copy(), n));
    {
      KVCache native = receiver.new_cache(cap);
      receiver.forward(head, native, {});
      got.push_back(answer(receiver_ladder, receiver_rung, std::move(native), n));
    }
    for (const Condition& c : set.conditions) {
      KVCache dst = receiver.new_cache(cap);
      c.fill(src, head, dst);
      got.push_back(answer(receiver_ladder, receiver_rung, std::move(dst), n));
    }
    for (size_t i = 0; i < got.size(); ++i) correct[i] += needle_answer_matches(got[i], n.answer);
  }
  const double N = static_cast<double>(needles.size());
  json rows = json::array();
  for (size_t i = 0; i < names.size(); ++i) {
    rows.push_back(
        {{"condition", names[i]}, {"correct", correct[i]}, {"accuracy", correct[i] / N}});
  }
  return {{"count", needles.size()}, {"mean_prompt_tokens", mean_tokens}, {"conditions", rows}};
}

namespace {

constexpr const char* kTokenIdentityName = "token-identity cache";  // add_floors' name
constexpr const char* kReferenceRidgeName = "reference ridge (no token features)";

// The comparison maps committed beside a route's (tools/tiny-ladder/routes.sh), where present:
// the reference ridge (no token features), the depth remap, a ridge map on rotated keys (the
// RoPE sandwich's ablation) and, on a precision route, a cross-size ridge map (the diagonal
// re-alignment's).
std::vector<std::pair<std::string, fs::path>> ablation_maps(const fs::path& maps) {
  std::vector<std::pair<std::string, fs::path>> out;
  for (const auto& [suffix, label] :
       {std::pair{"ridge", kReferenceRidgeName}, std::pair{"depth", "depth remap"},
        std::pair{"rope", "naive map on rotated keys (no RoPE sandwich)"},
        std::pair{"cross", "cross-size ridge map (no diagonal re-alignment)"}}) {
    const fs::path dir =
        maps.parent_path() / "ablations" / (maps.filename().string() + "-" + suffix);
    if (fs::is_directory(dir)) out.emplace_back(label, dir);
  }
  return out;
}

json map_files_sha256(const fs::path& dir) {
  json out = json::object();
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.is_regular_file()) out[e.path().filename().string()] = sha256_file(e.path());
  }
  return out;
}

}  // namespace

json run_transfer_bench(Ladder& ladder, const fs::path& text, const fs::path& needles_file,
                        const TransferBenchOptions& o,
                        const std::function<void(int64_t, int64_t)>& progress) {
  std::vector<const ManifestRoute*> routes;
  for (const ManifestRoute& r : ladder.manifest().routes) {
    if (r.method == "maps" && r.maps.filename() == r.from + "-" + r.to && r.maps_present()) {
      routes.push_back(&r);
    }
  }
  const int64_t total = std::ssize(routes) * (1 + std::ssize(o.needles));
  int64_t done = 0;
  json out = {{"prefix", o.prefix},     {"continuation", o.continuation},
              {"windows", o.windows},   {"recompute", o.recompute},
              {"anchors", o.anchors},   {"needle_recompute", o.needle_recompute},
              {"routes", json::array()}};
  for (const ManifestRoute* route : routes) {
    const int from = ladder.index(route->from), to = ladder.index(route->to);
    ladder.rung(from).load();
    ladder.rung(to).load();
    const Model& sender = ladder.rung(from).model();
    const Model& receiver = ladder.rung(to).model();
    auto map = CacheMap::load(route->maps, sender, receiver);
    const json& info = map->data().info;
    json r = {{"from", route->from},
              {"to", route->to},
              {"maps", fs::relative(route->maps, fs::absolute(ladder.manifest().file).parent_path())
                           .generic_string()},
              {"method", map->method()},
              {"k", info.value("k", json())},
              {"residuals", info.value("residuals", json())},
              {"map_sha256", map_files_sha256(route->maps)}};
    const bool floor = has_token_floor(route->maps);
    std::unique_ptr<TokenFloor> token_floor;
    if (floor) token_floor = std::make_unique<TokenFloor>(read_token_floor(route->maps));
    r["floor"] = floor ? token_floor->provenance() : json();

    // Prefix NLL on held-out windows: the map, recompute, anchors, the comparison maps, floors.
    // Recompute where the map has the boundary map it needs; a precision rung's diagonal map
    // has neither recompute nor anchors to compare (as tools/tiny-ladder/routes.sh).
    auto available = [&](const std::vector<int>& want) {
      std::vector<int> have;
      for (int n : want) {
        for (const BoundaryMap& bm : map->data().boundaries) {
          if (bm.r == n) have.push_back(n);
        }
      }
      return have;
    };
    const bool diagonal = map->method() == "diagonal";
    const std::vector<int> recompute = available(o.recompute);
    const std::vector<int> anchors = diagonal ? std::vector<int>{} : o.anchors;
    const std::vector<int> needle_recompute = available(o.needle_recompute);
    r["recompute"] = recompute;
    r["anchors"] = anchors;
    ConditionSet set = transfer_conditions(*map, sender, receiver, recompute, anchors);
    std::vector<std::unique_ptr<CacheMap>> alt_maps;  // the comparison conditions' fillers
    for (const auto& [label, dir] : ablation_maps(route->maps)) {
      alt_maps.push_back(CacheMap::load(dir, sender, receiver));
      // A map alone (no recompute, anchors or floors): one condition, its filler refers to the
      // map and the models only.
      Condition c =
          std::move(transfer_conditions(*alt_maps.back(), sender, receiver, {}, {}).conditions[0]);
      c.name = label;
      set.conditions.push_back(std::move(c));
      r["ablation_sha256"][label] = map_files_sha256(dir);
    }
    if (floor) add_floors(set, receiver, *token_floor);
    Corpus corpus = open_corpus(text, false, ladder.rung(from).path(), ladder.rung(to).path());
    std::vector<std::vector<int32_t>> windows;
    std::vector<int32_t> w;
    while (std::ssize(windows) < o.windows &&
           corpus.stream->next_window(o.prefix + o.continuation, w)) {
      windows.push_back(w);
    }
    if (windows.empty()) {
      fail("{}: fewer than {} tokens (prefix {} + continuation {})", text.string(),
           o.prefix + o.continuation, o.prefix, o.continuation);
    }
    const TransferEval ev =
        evaluate_transfer(sender, receiver, windows, o.prefix, set.conditions, !recompute.empty());
    json cs = condition_scores_json(ev);
    // Each gap as a share of the token-identity floor's and of the reference ridge's: how much
    // of what a cache without the sender's context loses the map wins back (issue 21).
    for (const auto& [field, name] : {std::pair{"gap_vs_token_identity", kTokenIdentityName},
                                      std::pair{"gap_vs_reference_ridge", kReferenceRidgeName}}) {
      for (const ConditionScore& base : ev.conditions) {
        if (base.name != name || base.nll_gap <= 0) continue;
        for (json& c : cs) c[field] = c.at("nll_gap").get<double>() / base.nll_gap;
      }
    }
    r["eval"] = {{"windows", ev.windows},
                 {"scored_tokens", ev.scored_tokens},
                 {"native_nll", ev.native_nll},
                 {"sender_nll", ev.sender_nll},
                 {"native_seam_kl", ev.native_seam_kl},
                 {"conditions", cs}};
    if (progress) progress(++done, total);

    // Needles with the switch right before the answer.
    ConditionSet nset = transfer_conditions(*map, sender, receiver, needle_recompute, {});
    if (floor) add_floors(nset, receiver, *token_floor);
    r["needles"] = json::array();
    for (const auto& [context, count] : o.needles) {
      if (ladder.tokenizer() == nullptr) fail("{}: no tokenizer", ladder.manifest().file.string());
      json n =
          transfer_needles(ladder, from, ladder, to, *ladder.tokenizer(), nset,
                           !needle_recompute.empty(), read_needles(needles_file, context, count));
      n["context"] = context;
      r["needles"].push_back(n);
      if (progress) progress(++done, total);
    }
    out["routes"].push_back(r);
  }
  return out;
}

}  // namespace molt
