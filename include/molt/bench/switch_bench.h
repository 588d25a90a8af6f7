// Switch cost against context (issue "molt bench run"; DESIGN.md §6 switch cost): one
// migration per policy, route and context length through the runtime's own migrate()
// (runtime/switch_cost.h), with the receiver's files warm in the page cache and cold (evicted
// with posix_fadvise before the switch), and the FLOPs saved against the receiver's re-prefill.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json_fwd.hpp>
#include <span>
#include <string>
#include <vector>

#include "molt/ladder/ladder.h"
#include "molt/runtime/policy.h"

namespace molt {

struct SwitchBenchOptions {
  std::vector<std::pair<std::string, std::string>> routes;  // (from, to) rung names
  std::vector<int64_t> contexts = {256, 1024, 2048};
  std::vector<Policy> policies = {Policy::kMolt, Policy::kHeal, Policy::kReprefill,
                                  Policy::kReleaseReprefill};
  int repeats = 3;  // per cell; the median is reported beside every run
  // The sender's cache filled with fixed values instead of prefilled (every policy's cost is
  // independent of them): for real geometries, whose sender prefill would outlast the switch.
  bool fill_sender = false;
};

// Writes a map with the geometry of route from → to and k source layers per receiver layer,
// filled with small random values, where the route's map folder is absent (returns whether it
// wrote one): its cost is that of a fitted map with the same k, for geometries that cannot be
// calibrated here (synthetic weights at the real Qwen2.5 shapes).
bool write_shape_map(const Ladder& l, int from, int to, int64_t k);

// Drops a folder's files from the page cache (what a cold start reads from storage); returns
// the files it could advise. Best effort: pages mapped elsewhere stay.
int evict_page_cache(const std::string& dir);

// `text`: ids of held-out prose the contexts are cut from (at least max(contexts) + 1).
// {"contexts", "repeats", "rows": [{from, to, context, policy, cache: "warm"|"cold", ms,
// runs: [...], load_ms, carry_ms, first_decode_ms, flops_saved, peak_mib, ran}]}.
nlohmann::json run_switch_bench(Ladder& ladder, std::span<const int32_t> text,
                                const SwitchBenchOptions& o,
                                const std::function<void(int64_t, int64_t)>& progress = {});

}  // namespace molt
