// Several tenants, one moving budget, nobody killed (DESIGN.md §4 "scheduling").
//
//   auto ladder = molt::Ladder::open("models/tiny-ladder/ladder.json");
//   molt::TraceBudget budget(molt::PressureTrace::load("traces/two_step_squeeze.json"));
//   molt::sched::Scheduler s(*ladder, &budget);
//   s.add({"chat", Priority::kForeground, chat_ids, options});
//   s.add({"batch", Priority::kBackground, batch_ids, options, /*arrival=*/6});
//   while (!s.done()) s.round();
//
// A round reads the budget once, asks the planner (planner.h) which levers to pull, pulls them
// before anyone steps, then steps every runnable tenant once: tenants moving down first (their
// migrations free rungs), then those staying, then those waking, starting or moving up. The
// scheduler owns the ladder's residency: after each round a rung that only suspended tenants
// hold is parked and a rung nobody holds is released, so the accounting is the planner's:
// weights of each resident rung once, plus every admitted tenant's own_mib on its rung.
//
// Tenants' generations get no budget source (the scheduler alone enforces) and never move up
// by themselves. A tenant starts (or, suspended, wakes on another rung) by a prefill of its
// context on the planned rung; a shed drops the oldest context after `shed_sink` positions and
// moves the cache into a smaller allocation, so that the memory really falls. Both hand the
// cache to a fresh Generation (Generation::resume); the tenant's token stream continues across.
//
// Time is the round count: budget traces in "tokens" count rounds; tests are deterministic.
#pragma once

#include <chrono>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "molt/ladder/ladder.h"
#include "molt/pressure/budget.h"
#include "molt/runtime/generation.h"
#include "molt/runtime/options.h"
#include "molt/scheduler/planner.h"

namespace molt::sched {

struct TenantSpec {
  std::string name;
  Priority priority = Priority::kBackground;
  std::vector<int32_t> prompt;  // at least two ids
  // Its migration policy (molt, heal, reprefill, release-reprefill, auto), max_tokens, sampling
  // and stop ids; capacity, shedding and moving up are the scheduler's.
  SessionOptions options;
  int64_t arrival = 0;  // the round from which it asks to be admitted
  // Receives the tenant's stream as one generation's would be (not owned; must outlive the
  // tenant or its pruning): tokens indexed contiguously across restarts, migrations (a wake on
  // another rung is one: release-reprefill, requested "wake"), heals, a park when the scheduler
  // suspends it and a resume when it wakes in place, and one done summing the whole tenant.
  EventSink* sink = nullptr;
};

struct SchedulerConfig {
  PlannerConfig planner;
  bool allow_shed = true;
  int64_t shed_sink = 4;     // positions a shed keeps at the start of the cache
  int64_t min_shed = 8;      // a shed drops half the context after the sink, at least this many
  bool measure_rss = false;  // read /proc/self each round (RoundRecord::rss_mib)
};

struct TenantStatus {
  std::string name;
  Priority priority = Priority::kBackground;
  TenantState state = TenantState::kWaiting;
  int rung = -1;
  int64_t max_tokens = 0;
  std::vector<int32_t> stream;  // every token it produced, in order
  std::vector<std::string> rungs_used;
  int64_t arrival = 0, admitted_round = -1, finished_round = -1;
  int64_t rounds_deferred = 0, rounds_suspended = 0;
  double ms_deferred = 0, ms_suspended = 0;  // wall time of the rounds it spent so
  double ms_admitted = 0;                    // wall time of the rounds from admission on
  double step_ms = 0;                        // wall time of its own steps
  int64_t migrations = 0, sheds = 0, shed_positions = 0, rereads = 0;
  bool killed = false;
  std::string done_reason;
  int64_t tokens() const { return static_cast<int64_t>(stream.size()); }
};

struct TenantRound {
  TenantState state = TenantState::kWaiting;
  int rung = -1;
  int64_t tokens = 0;
};

struct RoundRecord {
  int64_t round = 0;
  double budget_mib = 0;
  double predicted_mib = 0;  // the planner's accounting of its levers
  double accounted_mib = 0;  // the scheduler's accounting after the round's steps
  double overshoot_mib = 0;  // accounted − budget
  double rss_mib = NAN;      // measured RSS less the baseline at construction (measure_rss)
  bool fits = true;          // some assignment fits (the planner's verdict)
  bool exact = false;
  Lever lever = Lever::kNone;
  LeverCounts counts;
  std::vector<TenantRound> tenants;  // every tenant added, in order
  double ms = 0;
};

class Scheduler {
 public:
  // The ladder and the budget (null: no limit) must outlive the scheduler.
  Scheduler(Ladder& ladder, BudgetSource* budget, SchedulerConfig cfg = {});
  ~Scheduler();
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Validates the spec (prompt, policy, options); returns the tenant's index.
  size_t add(TenantSpec spec);
  // Finishes tenant i now (reason "cancelled", or `reason`): its cache is freed at once, its
  // rung released by the next round if nobody else holds it; the answer so far is kept.
  // Nothing happens to a finished tenant.
  void cancel(size_t i, const std::string& reason = "cancelled");
  // Forgets finished tenants (a server's long run); the others keep their order, so indices
  // after a pruned one shift down. Returns how many were removed.
  size_t prune();
  RoundRecord round();
  bool done() const;  // every tenant finished
  int64_t rounds() const { return round_; }
  size_t size() const;
  const TenantStatus& tenant(size_t i) const;
  // Top rung's weights + every tenant's own_mib on it: what relative traces scale.
  double reference_mib() const { return reference_mib_; }
  // Resident rungs' weights + each admitted tenant's own_mib on its rung.
  double accounted_mib() const;
  // What the planner sees now; index i of the result is view_tenants()[i].
  PlanInput view(double budget_mib) const;
  std::vector<size_t> view_tenants() const;
  const Ladder& ladder() const { return ladder_; }

 private:
  struct Tenant;
  TenantView view_of(const Tenant& t) const;
  void enforce(const Plan& plan, const std::vector<size_t>& who);
  void step_all(const Plan& plan, const std::vector<size_t>& who);
  void step(const std::vector<Tenant*>& group);
  void record(Tenant& t, const Step& s, double ms);
  void finish(Tenant& t, const DoneEvent& d);
  double pressure() const;  // 1 − budget / reference_mib, in [0, 1], of the last round
  void start(Tenant& t, int rung);
  void shed(Tenant& t);
  void settle_residency();
  void account(RoundRecord& rec, const Plan& plan, const std::vector<size_t>& who, double ms);

  Ladder& ladder_;
  BudgetSource* budget_;
  SchedulerConfig cfg_;
  std::vector<std::unique_ptr<Tenant>> tenants_;
  int64_t round_ = 0, up_streak_ = 0, admissions_ = 0, tickets_ = 0;
  double reference_mib_ = 0, last_accounted_ = 0, rss_base_mib_ = 0;
  double last_budget_ = std::numeric_limits<double>::infinity();
  std::chrono::steady_clock::time_point t_start_;
};

// Own memory (cache at `capacity` + scratch) of a generation with options `o` on rung r, as
// Generation::own_mib computes it once it exists.
double own_at(const Ladder& ladder, int rung, int64_t capacity, const SessionOptions& o);

}  // namespace molt::sched
