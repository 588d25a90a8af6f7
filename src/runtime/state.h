// The plain state of one generation and the migration that moves it between rungs (private to
// runtime/; the public face is include/molt/runtime/generation.h).
#pragma once

#include <chrono>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "molt/ladder/ladder.h"
#include "molt/model/sampler.h"
#include "molt/runtime/generation.h"
#include "molt/tokenizer/tokenizer.h"
#include "runtime/heal.h"

namespace molt::runtime {

using Clock = std::chrono::steady_clock;
constexpr double kMiB = 1024.0 * 1024.0;

inline double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

class SeamMeter;

struct State {
  State(Ladder& l, BudgetSource* b, SessionOptions opts)
      : ladder(l), budget(b), o(std::move(opts)), sampler(o.sampling) {}
  Ladder& ladder;
  BudgetSource* budget;  // null: no limit
  const SessionOptions o;
  std::vector<Footprint> footprints;  // per rung, for this generation's shape
  std::vector<bool> broken;           // rungs whose checkpoint failed to load: not tried again

  int rung = -1;                   // the rung the cache belongs to (held); -1 before the start
  bool using_rung = false;         // decoding there (not parked)
  std::unique_ptr<KVCache> cache;  // K/V of every window position but the pending one
  std::vector<int32_t> history;    // prompt + answer (what the sampler penalises)
  std::vector<int32_t> window;     // the ids the cache holds + the pending one (history less shed)
  size_t prompt_len = 0;
  int64_t capacity = 0;  // positions the cache is allocated for
  bool keep_hidden = false;
  std::vector<float> logits;  // vocab-sized, reused every token
  bool logits_ready = false;  // logits are those of the pending position (after a prefill)
  std::unique_ptr<HealJob> heal;
  Sampler sampler;
  std::unique_ptr<StreamDecoder> text;

  bool started = false, finished = false, cancelled = false, parked = false, suspended = false;
  int forced = -1;  // force_migration's target
  int64_t checks = 0, over = 0, up_count = 0, waited = 0;
  double last_budget = -1, reference_mib = 0;
  double prefill_flops_per_ms = 0;  // the last native prefill's speed (auto's re-read estimate)
  Clock::time_point t_start, t_parked;

  std::vector<int32_t> answer;
  std::vector<std::string> answer_rungs;
  std::vector<MigrationEvent> migrations;
  DoneEvent done;
  std::unique_ptr<SeamMeter> meter;  // measure_seams / measure_rss
  double evidence_ms = 0;            // spent measuring this step, kept out of the seam's cost

  // The ids the cache holds: the window minus the pending (last sampled) token.
  std::span<const int32_t> context() const {
    return std::span<const int32_t>(window.data(), window.size() - 1);
  }
  size_t kv_bytes(int r) const;  // one cache of rung r at capacity (+ hidden states)
  double own_mib(int r) const;   // cache + scratch (+ heal's hidden states on the current rung)
  double footprint_mib(int r) const;
  std::unique_ptr<KVCache> new_cache(int r) const;
  Rung& current() { return ladder.rung(rung); }
};

struct MigrationPlan {
  int from = -1, to = -1;
  Policy policy = Policy::kReleaseReprefill;  // resolved: reprefill, release-reprefill, molt, heal
  std::string note;
  double peak_mib = 0;  // accounted peak while both sides exist
};

// Resolves the generation's policy for one migration (auto's choice, fallbacks for routes
// without maps) and the accounted peak it will reach.
MigrationPlan plan_migration(const State& g, int to, double budget_mib);

// Evidence around a migration, outside its timed cost: the sender's view of the seam and the
// RSS high-water mark (measure.cc).
class SeamMeter {
 public:
  explicit SeamMeter(const SessionOptions& o) : seams_(o.measure_seams), rss_(o.measure_rss) {}
  // After the first prefill: the process's own overhead beyond the accounted weights + cache.
  void baseline(const State& g);
  // Before anything moves; returns the ms it spent (kept out of the seam's cost).
  double before(State& g, const MigrationPlan& p);
  void window_open();             // the sender is what the policy makes it
  void after(MigrationEvent& e);  // the receiver is ready
  // After the receiver's first logits (g.logits): KL(p_sender ‖ p_receiver), and
  // KL(p_receiver,native ‖ p_receiver) against the receiver re-reading the window in a cache
  // of its own.
  void seam_logits(const State& g, MigrationEvent& e);

 private:
  bool seams_, rss_;
  size_t rss_base_ = 0;
  std::vector<float> sender_;
};

// Moves the generation onto plan.to: the one function that changes rung (migrate.cc).
MigrationEvent migrate(State& g, const MigrationPlan& plan);

// This generation leaves rung r (stops using and holding it; the cache, if still here, goes
// with it); r's weights are released only when no other generation holds it.
void leave(State& g, int r);

// Sheds `drop` positions after the first `sink` from the cache and the window (the cache's
// ids), which must hold them.
void shed_window(State& g, int64_t sink, int64_t drop);

// Records a native prefill of n positions on a rung of config c that took `ms` (auto estimates
// a re-read's stall from it).
void note_prefill_speed(State& g, const ModelConfig& c, int64_t n, double ms);

// Prefills `tokens` into an empty `cache` in chunks; the last position's logits go to
// `last_logits` when it is not empty.
void prefill_chunked(const Model& m, KVCache& cache, std::span<const int32_t> tokens, int64_t chunk,
                     std::span<float> last_logits);

}  // namespace molt::runtime
