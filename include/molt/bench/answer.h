// Greedy answers for the evaluations (needles), decoded through the one generation loop
// (runtime/generation.h) like every front end.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "molt/ladder/ladder.h"
#include "molt/model/kv_cache.h"

namespace molt {

// The `n` greedy tokens after `prompt` on rung `rung`, the prompt read natively by the rung
// into a cache of K and V rows of type kv.
std::vector<int32_t> greedy_answer(Ladder& ladder, int rung, std::span<const int32_t> prompt,
                                   int64_t n, KvDType kv = KvDType::kF32);
// The same from a cache the caller filled with prompt[0, size − 1) (carried by a map, a floor,
// or the rung's own prefill): the last prompt id is decoded first. The cache must have room
// for n more positions.
std::vector<int32_t> greedy_answer_from(Ladder& ladder, int rung, KVCache cache,
                                        std::span<const int32_t> prompt, int64_t n);

}  // namespace molt
