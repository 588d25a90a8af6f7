// One generation on a ladder, advanced one token per step() (DESIGN.md §4 "runtime").
//
//   auto ladder = molt::Ladder::open("models/tiny-ladder/ladder.json");
//   molt::TraceBudget budget(molt::PressureTrace::load("traces/spike_mid_answer.json"));
//   molt::Generation g(*ladder, &budget, prompt_ids, options);
//   while (!g.finished()) {
//     const molt::Step s = g.step();          // never blocks
//     if (s.kind == molt::StepKind::kWaiting) budget.idle(options.poll_ms);
//     print(s);                               // or emit(s, sink)
//   }
//
// Between every two tokens the generation asks its budget source, and changes rung when its
// footprint (the rung's weights + this generation's KV cache at capacity + scratch) would not
// fit: down to the largest rung that fits; if none fits, it parks (its use of the rung's weights
// ends, its cache stays) and each step() returns kWaiting until a rung fits again. Up: when a
// larger rung fits with (1 + up_margin) × its footprint for up_after checks in a row. No token
// is lost or repeated at a seam: the cache holds every token but the pending (last sampled) one,
// which the receiver decodes first.
//
// Residency: a generation uses rungs through the ladder's reference counts (Ladder::attach /
// detach), so generations on one rung share its weights. Starting or ending a generation loads
// or releases nothing by itself but the rung it starts on; a migration releases (or parks) the
// sender only when no other generation uses it. The ladder's owner releases unused rungs.
//
// Threading: one generation is driven by one thread at a time; generations on one ladder must
// be stepped from one thread (rung residency is not locked).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "molt/ladder/ladder.h"
#include "molt/model/kv_cache.h"
#include "molt/pressure/budget.h"
#include "molt/runtime/events.h"
#include "molt/runtime/options.h"

namespace molt {

namespace runtime {
struct State;
}

enum class StepKind {
  kToken,    // a token was produced (and perhaps a migration, heal or resume before it)
  kWaiting,  // parked: no rung fits the budget; call step() again later
  kDone,     // finished on this step (max_tokens, a stop id, killed, cancelled; its last token,
             // if any, is in `token`) or before it; step() does nothing more
};

// What one step() did, in the order it happened.
struct Step {
  StepKind kind = StepKind::kToken;
  std::optional<BudgetEvent> budget;  // the budget changed since the last check
  std::optional<ParkEvent> park;      // this step parked the generation
  std::optional<ResumeEvent> resume;  // this step resumed it
  std::optional<HealEvent> heal;      // healing completed before this token
  std::optional<MigrationEvent> migration;
  std::optional<TokenEvent> token;
  std::optional<DoneEvent> done;  // set on the step that finished
};

// Forwards a step's events to a sink, in order.
void emit(const Step& s, EventSink& sink);

struct HealProgress {
  bool active = false;
  int64_t layers_done = 0, layers = 0;
  int64_t positions = 0;  // carried positions being re-prefilled
  int64_t steps = 0;      // decode steps spent healing so far
};

class Generation {
 public:
  // Validates the prompt (non-empty, ids inside the ladder's vocabulary) and the options;
  // nothing runs until the first step(). `budget` may be null (no limit) and must outlive the
  // generation; so must the ladder.
  Generation(Ladder& ladder, BudgetSource* budget, std::span<const int32_t> prompt,
             SessionOptions options);
  // Resumes on `rung` from a cache the caller filled (e.g. carried by a map): the cache holds
  // the first history.size() − 1 positions of `history`, whose last id is decoded first. The
  // rung is attached (loaded when released).
  static std::unique_ptr<Generation> resume(Ladder& ladder, BudgetSource* budget, int rung,
                                            KVCache cache, std::vector<int32_t> history,
                                            SessionOptions options);
  ~Generation();
  Generation(const Generation&) = delete;
  Generation& operator=(const Generation&) = delete;

  // Advances by one token (or one parked check). The first step prefills the prompt.
  Step step();
  // step() for several generations at once: those on the same rung decode their pending tokens
  // in one pass over its weights (Model::decode_batch), with the tokens each would decode
  // alone. The generations must be distinct.
  static std::vector<Step> step_together(std::span<Generation* const> gens);
  // Finishes at the next step() (reason "cancelled"); the answer so far is kept.
  void cancel();
  // Moves to `rung` at the next step() whatever the budget (tests, needle evaluation, a
  // scheduler's demotion); before the first step, the generation starts there.
  void force_migration(int rung);

  // Levers for an owner that enforces one budget over several generations (the scheduler),
  // each taking effect at once:
  // suspend(): stop using the rung's weights (parked when nobody else uses them), keep the
  // cache; step() then returns kWaiting without asking the budget until wake().
  void suspend();
  void wake();  // uses (and makes resident) the rung again; the next step() decodes
  bool suspended() const;
  // Drops the n_drop oldest positions after the first n_sink (RoPE-shifted, KVCache::shed);
  // the answer so far is kept. Returns the positions dropped (fewer when fewer are there).
  int64_t shed(int64_t n_sink, int64_t n_drop);

  bool finished() const;
  bool parked() const;
  int rung() const;  // -1 before the first step or while parked without a cache
  const std::string& rung_name() const;
  int64_t positions() const;                 // positions in the cache
  int64_t capacity() const;                  // positions the cache is allocated for
  int64_t tokens() const;                    // answer tokens so far
  std::span<const int32_t> history() const;  // prompt + answer
  std::span<const int32_t> answer() const;
  const std::vector<std::string>& answer_rungs() const;  // the rung of each answer token
  const std::vector<MigrationEvent>& migrations() const;
  const DoneEvent& summary() const;  // filled as it goes; final once finished()
  HealProgress heal_progress() const;
  const KVCache* cache() const;  // null before the first step
  const SessionOptions& options() const;

  // This generation's own accounting on rung r: KV cache at capacity + scratch (+ heal's
  // hidden states), and with the rung's weights (what the budget check compares).
  double own_mib(int r) const;
  // What heal keeps beside the cache while it runs (the hidden states of `positions`
  // carried positions),
  // for an owner that reserves it before a migration that may heal.
  static double heal_extra_mib(const ModelConfig& c, int64_t positions);
  double footprint_mib(int r) const;
  // What it holds now: weights of its rung (counted whole, however many share them) + own.
  double used_mib() const;

 private:
  Generation();
  std::unique_ptr<runtime::State> s_;
};

}  // namespace molt
