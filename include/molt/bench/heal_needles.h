// Heal, measured (DESIGN.md §6 needle accuracy; issue "heal measured"): the switch happens after
// a needle's body, the receiver then reads h more tokens of held-out prose before the question
// arrives, one decode step each, and heal re-prefills the carried positions natively in chunks
// between those steps. Needle accuracy against h for the receiver reading everything itself,
// the map alone (molt) and the map + heal; and what heal costs: decode steps until the cache is
// native, and the ms it adds to each decode step meanwhile, per chunk size.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json_fwd.hpp>
#include <span>
#include <vector>

#include "molt/bench/needles.h"
#include "molt/ladder/ladder.h"
#include "molt/tokenizer/tokenizer.h"
#include "molt/transfer/transfer.h"

namespace molt {

struct HealNeedleOptions {
  std::vector<int64_t> after = {0, 8, 32, 128, 512};  // h: tokens read between switch and question
  int64_t chunk = 64;                                 // heal's chunk for the accuracy rows
  std::vector<int64_t> cost_chunks = {16, 64, 256, 1024};  // the schedules whose cost is measured
  int64_t cost_needles = 5;  // needles each cost chunk is timed on (to the end of heal)
};

// One planted-fact question split where the switch goes: `body` (carried by the map) holds the
// fact, `question` (read by the receiver) is the prompt's last paragraph, ending right before
// the answer. Throws naming the needle when its prompt has no blank line to split at.
struct HealNeedle {
  std::vector<int32_t> body, question;
  std::string answer;
  int64_t answer_tokens = 0;
};
std::vector<HealNeedle> split_needles(const Tokenizer& tok, std::span<const NeedleItem> items);

// `sender` and `receiver` are one-rung ladders (the answers decode through the generation loop),
// `tok` their tokenizer;
// `filler` the ids of held-out prose the interludes are cut from (at least max(after) + 1 ids).
// `progress(done, total)` after each needle. Returns {"after": [...], "rows": [{h, native,
// molt, heal}], "cost": [{chunk, steps_to_native, heal_ms_per_step, decode_ms_per_step, ...}]}.
nlohmann::json measure_heal_needles(Ladder& sender, Ladder& receiver, const CacheMap& map,
                                    const Tokenizer& tok, std::span<const HealNeedle> needles,
                                    std::span<const int32_t> filler, const HealNeedleOptions& o,
                                    const std::function<void(int64_t, int64_t)>& progress = {});

}  // namespace molt
