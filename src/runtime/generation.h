// The state of one generation that a migration moves from rung to rung (private to runtime/).
#pragma once

#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "molt/ladder/ladder.h"
#include "molt/runtime/events.h"
#include "molt/runtime/session.h"
#include "molt/transfer/transfer.h"

namespace molt::runtime {

// Heal: after a mapped resume, re-prefill the carried positions natively on the receiver, one
// layer at a time (layer l needs only the native states entering it), a chunk of positions per
// decode step, and swap each layer's K/V into the live cache as soon as it is complete. At the
// end the positions decoded meanwhile are re-run on the healed cache, so the whole cache is
// what a native prefill would have made.
class HealJob {
 public:
  // `tokens`: the ids of the carried positions [0, n0).
  HealJob(const Model& receiver, std::span<const int32_t> tokens);
  // One chunk of work. Returns true once every layer is swapped in and `cache` is fully native
  // for `history` (all positions it holds).
  bool step(const Model& receiver, KVCache& cache, std::span<const int32_t> history, int64_t chunk);
  int64_t positions() const { return static_cast<int64_t>(tokens_.size()); }
  int64_t layers_done() const { return layer_; }
  int64_t steps() const { return steps_; }
  double ms() const { return ms_; }
  // Memory it holds beside the live cache (a shadow cache of n0 positions + hidden states).
  static size_t extra_bytes(const ModelConfig& c, int64_t n0);

 private:
  std::vector<int32_t> tokens_;
  std::vector<float> hidden_;  // [n0 × hidden]: states entering layer_
  std::unique_ptr<KVCache> shadow_;
  int64_t layer_ = 0, pos_ = 0, steps_ = 0;
  double ms_ = 0;
};

struct Generation {
  Generation(Ladder& l, const SessionOptions& opts) : ladder(l), o(opts) {}
  Ladder& ladder;
  const SessionOptions& o;
  int rung = -1;                   // the rung the cache belongs to (-1: none yet)
  std::unique_ptr<KVCache> cache;  // K/V of every token but the last sampled one
  std::vector<int32_t> history;    // prompt + answer so far
  int64_t capacity = 0;            // positions the caches are allocated for
  bool keep_hidden = false;        // caches keep hidden states (selective recompute needs them)
  size_t rss_base = 0;             // measure_rss: RSS that is not the rungs' (see migrate.cc)
  std::unique_ptr<HealJob> heal;
  std::vector<float> sender_seam_logits;  // measure_seams: the sender's view of the seam
  double evidence_ms = 0;                 // time spent measuring, kept out of the seam's cost

  // The ids the cache holds: history minus the pending (last sampled) token.
  std::span<const int32_t> context() const {
    return std::span<const int32_t>(history.data(), history.size() - 1);
  }
  double footprint_mib(int r) const;
  size_t kv_bytes(int r) const;  // one cache of rung r at capacity
  std::unique_ptr<KVCache> new_cache(int r) const;
};

struct MigrationPlan {
  int from = -1, to = -1;
  Policy policy = Policy::kReleaseReprefill;  // resolved: reprefill, release-reprefill, molt, heal
  std::string note;
  double peak_mib = 0;  // accounted peak while both sides exist
};

// Resolves the session's policy for one migration (auto's choice, fallbacks for routes
// without maps) and the accounted peak it will reach.
MigrationPlan plan_migration(const Generation& g, int to, double budget_mib);

// Moves the generation onto plan.to: the one function that changes rung. Fills the event's
// from/to/policy/load_ms/carry_ms/flops_saved/context/peak fields.
MigrationEvent migrate(Generation& g, const MigrationPlan& plan);

// Prefills `tokens` into an empty `cache` in chunks and returns it; the last position's logits go
// to *last_logits when given.
std::unique_ptr<KVCache> prefill_chunked(const Model& m, std::unique_ptr<KVCache> cache,
                                         std::span<const int32_t> tokens, int64_t chunk,
                                         std::vector<float>* last_logits);

}  // namespace molt::runtime
