// The scheduler's decision for one round, as a pure function (DESIGN.md §4 "scheduling"):
// given the budget, each rung's weights and each tenant's state and sizes, which levers to pull
// and what the accounting will say afterwards. No generation, ladder or clock is touched, so
// property tests can run tens of thousands of rounds in a fraction of a second.
//
// Accounting: a rung's weights count once, however many tenants use it (loaded_mib while some
// tenant runs there, parked_mib while tenants only hold a cache on it, 0 otherwise); each tenant
// adds its own cache and scratch (own_mib running, held_mib suspended).
//
// Enforcement (only when the round starts over budget), levers in order of increasing harm:
//   1. defer admission of waiting tenants (none is admitted in such a round);
//   2. demote running tenants one rung at a time, background before foreground and the most
//      recently admitted first (a rung "down" is the next one that makes the tenant smaller);
//   3. park: suspend tenants in the same order, each on the rung it is on (a suspended tenant
//      cannot migrate in the round it stops); a rung whose last runner stops is parked;
//   4. shed the oldest context of tenants in the same order.
// Terminating a tenant is not a lever. Each lever is tried only when every less harmful one
// fails; when the ordered search fails but an exact search over the loaded rungs finds an
// assignment that fits, that one is taken (so usage ≤ budget whenever anything fits). When
// nothing fits, every tenant is suspended or deferred and the overshoot is reported.
//
// Recovery (rounds that did not need enforcement): suspended tenants wake (on their rung, else a
// lower one), then waiting tenants are admitted (first in line first; the first that does not fit
// blocks the rest, so a large tenant is not starved by small ones), then tenants move up: only
// to a rung where the result keeps (1 + up_margin) headroom, only once such a move has been
// possible for `up_after` rounds in a row, and one priority class per round, foreground first
// (the next class waits for a fresh streak). A background tenant is never placed above a running
// foreground one.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace molt::sched {

enum class Priority { kForeground, kBackground };
enum class TenantState { kWaiting, kRunning, kSuspended, kFinished };
// In order of increasing harm; kNone: the round needed no lever.
enum class Lever { kNone, kDefer, kDemote, kPark, kShed };

const char* priority_name(Priority p);
const char* state_name(TenantState s);
const char* lever_name(Lever l);

struct RungCost {
  double loaded_mib = 0;  // weights resident (mapped + f32 copies)
  double parked_mib = 0;  // what stays while parked (the f32 copies)
};

struct TenantView {
  Priority priority = Priority::kBackground;
  int64_t admitted = 0;  // admission order (arrival order while waiting); larger = more recent
  TenantState state = TenantState::kWaiting;
  int rung = -1;                   // the rung its cache belongs to; -1 while waiting
  std::vector<double> own_mib;     // per rung: cache + scratch while running there
  std::vector<double> held_mib;    // per rung: what it keeps while suspended (empty: own_mib)
  double shed_mib = 0;             // freed by one shed on its current rung (0: cannot shed)
  bool can_move_suspended = true;  // may wake on another rung (by re-reading its context)
};

struct PlanInput {
  double budget_mib = 0;
  std::vector<RungCost> rungs;  // index 0 = top
  std::vector<TenantView> tenants;
  // Consecutive earlier rounds in which a move up was possible (Plan::up_ready) and none was
  // made: the hysteresis.
  int64_t up_streak = 0;
};

struct PlannerConfig {
  double up_margin = 0.10;  // headroom a move up must leave
  int64_t up_after = 3;     // rounds a move up must stay possible (this one included)
};

// What a tenant is after the round's levers (same order as PlanInput::tenants).
struct TenantPlan {
  TenantState state = TenantState::kWaiting;
  int rung = -1;
  bool shed = false;  // one shed on its current rung
};

struct LeverCounts {
  int64_t defer = 0, admit = 0, demote = 0, promote = 0, park = 0, wake = 0, shed = 0;
};

struct Plan {
  std::vector<TenantPlan> tenants;
  double usage_mib = 0;      // predicted accounting after the levers
  double overshoot_mib = 0;  // usage − budget (≤ 0 when it fits)
  bool fits = true;
  bool enforced = false;  // the round started over budget
  bool exact = false;     // the ordered search failed and the exact search's assignment is used
  bool up_ready = false;  // some tenant could move up with the headroom this round
  Lever lever = Lever::kNone;  // the most harmful lever pulled
  LeverCounts counts;
};

// The levers of one round. Throws molt::Error on inconsistent input (sizes, rung indices).
Plan plan_round(const PlanInput& in, const PlannerConfig& cfg = {});

// The accounting of an assignment (the planner's cost model).
double usage_mib(const PlanInput& in, std::span<const TenantPlan> plan);

// The least usage any assignment reachable this round has (running tenants: any rung, or
// suspended where they are; suspended: where they are, or woken anywhere; waiting: deferred),
// with or without sheds; `best` receives it. Exponential in the rungs (2^rungs subsets), linear
// in the tenants; +inf past 16 rungs.
double min_usage_mib(const PlanInput& in, bool allow_shed, std::vector<TenantPlan>* best = nullptr);

// The next rung below `r` on which tenant `t` is smaller (weights + own), or -1.
int next_down(const PlanInput& in, const TenantView& t, int r);

}  // namespace molt::sched
