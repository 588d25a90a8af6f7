// Switch cost (DESIGN.md §6): the wall time of one migration from the budget cut to the
// receiver's first logits, measured through the same migrate() a session uses.
#pragma once

#include <cstdint>
#include <span>

#include "molt/ladder/ladder.h"
#include "molt/runtime/events.h"
#include "molt/runtime/policy.h"
#include "molt/transfer/transfer.h"

namespace molt {

struct SwitchCostOptions {
  Policy policy = Policy::kMolt;
  // true: the sender's cache comes from a native prefill of the context; false: it is filled
  // with fixed values (the cost of every policy is independent of them), for geometries whose
  // prefill would take longer than the measurement.
  bool native_sender_cache = true;
  int64_t prefill_chunk = 256;
  TransferOptions transfer;
};

// `ids`: the context (held in the sender's cache) followed by one pending token. Loads the
// sender (warm: its pages are touched before the clock starts), fills its cache, then migrates
// to `to` and decodes the pending token on the receiver. Every unused rung is released
// before and after.
MigrationEvent measure_switch(Ladder& ladder, int from, int to, std::span<const int32_t> ids,
                              const SwitchCostOptions& options);

}  // namespace molt
