// How the scheduler puts a tenant's cache where the planner wants it with the public runtime
// API: a generation that starts on a chosen rung (its context prefilled there), and a cache moved
// into a smaller allocation after a shed. Both end in Generation::resume. Private to scheduler/.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "molt/ladder/ladder.h"
#include "molt/runtime/generation.h"
#include "molt/runtime/options.h"

namespace molt::sched {

// The options a tenant's generation runs with: the scheduler's capacity and remaining tokens,
// no shedding or moving up of its own. Throws for policies that do not migrate (hold, small).
SessionOptions tenant_options(SessionOptions o, int64_t capacity, int64_t max_tokens);

// Prefills all but the last id of `window` on rung r and resumes there (the last id is decoded
// first); the rung is loaded. o.capacity must hold the window and one more.
std::unique_ptr<Generation> start_on(Ladder& ladder, int rung, std::span<const int32_t> window,
                                     const SessionOptions& o);

// Sheds `drop` positions after the first `sink` of g's cache (RoPE-shifted, Generation::shed),
// drops them from `window` (g's context + pending id) and moves the rest into a cache of
// o.capacity positions on the same rung, which must be loaded. Returns the generation that
// continues; g can be destroyed.
std::unique_ptr<Generation> shed_into(Ladder& ladder, Generation& g, std::vector<int32_t>& window,
                                      int64_t sink, int64_t drop, const SessionOptions& o);

}  // namespace molt::sched
