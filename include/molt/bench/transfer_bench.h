// Transfer per route (issue "molt bench run"; DESIGN.md §6): for every route with a map of its
// own, the map's fit residuals per layer (its metadata), the prefix-NLL gap of the map, with
// recompute and anchors, beside the zero and token-identity floors (the floor's means from
// calibration text, stored beside the map), and needle accuracy with the switch right before
// the answer at ~700 and ~2,000 tokens under each condition.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <utility>
#include <vector>

#include "molt/bench/needles.h"
#include "molt/ladder/ladder.h"
#include "molt/transfer/conditions.h"

namespace molt {

class Tokenizer;
struct TransferEval;

struct TransferBenchOptions {
  int64_t prefix = 768, continuation = 256, windows = 16;  // as tools/tiny-ladder/routes.sh
  std::vector<int> recompute = {1, 2};
  std::vector<int> anchors = {16};
  std::vector<std::pair<int64_t, int64_t>> needles = {{700, 20}, {2048, 10}};  // context, count
  std::vector<int> needle_recompute = {2};
};

// [{condition, nll, nll_gap, transfer_kl, seam_kl, window_nll_gaps}] of an evaluation, as
// `molt transfer eval --json` and `molt bench run` write them.
nlohmann::json condition_scores_json(const TransferEval& ev);

// Needles answered greedily after the switch right before the answer: the sender reads the
// prompt (no switch), the receiver reads it (re-prefill), then each condition of `set` fills
// the receiver's cache from the sender's. {"count", "mean_prompt_tokens", "conditions":
// [{condition, correct, accuracy}]}. `sender_hidden`: the set recomputes layers.
nlohmann::json transfer_needles(Ladder& sender, int sender_rung, Ladder& receiver,
                                int receiver_rung, const Tokenizer& tok, const ConditionSet& set,
                                bool sender_hidden, const std::vector<NeedleItem>& items);

// {"prefix", "continuation", "windows", "routes": [{from, to, maps, method, k, residuals,
// floor, eval: {native_nll, sender_nll, native_seam_kl, scored_tokens, conditions}, needles:
// [{context, ...transfer_needles}]}]}. `text`: held-out prose; `needles`: the needle file.
nlohmann::json run_transfer_bench(Ladder& ladder, const std::filesystem::path& text,
                                  const std::filesystem::path& needles,
                                  const TransferBenchOptions& o,
                                  const std::function<void(int64_t, int64_t)>& progress = {});

}  // namespace molt
