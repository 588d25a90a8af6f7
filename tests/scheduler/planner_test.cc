// The planner alone: each lever in its place, then properties over tens of thousands of rounds
// of random ladders, traces (drops, flapping, zero, below the smallest rung, long recoveries) and
// arrivals, against a brute-force search over every assignment a round can reach.
#include "molt/scheduler/planner.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <limits>
#include <random>

#include "molt/common/error.h"

namespace molt::sched {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr auto kFg = Priority::kForeground;
constexpr auto kBg = Priority::kBackground;
constexpr auto kRun = TenantState::kRunning;
constexpr auto kSus = TenantState::kSuspended;
constexpr auto kWait = TenantState::kWaiting;

TenantView tenant(Priority p, TenantState s, int rung, int64_t admitted, std::vector<double> own) {
  TenantView t;
  t.priority = p;
  t.state = s;
  t.rung = rung;
  t.admitted = admitted;
  t.own_mib = std::move(own);
  return t;
}

// Three rungs of 10, 5 and 2 MiB (parked: a tenth), each tenant 1 MiB on every rung.
PlanInput three_rungs(double budget) {
  PlanInput in;
  in.budget_mib = budget;
  in.rungs = {{10, 1}, {5, 0.5}, {2, 0.2}};
  return in;
}

TEST(Planner, NothingToDoFits) {
  PlanInput in = three_rungs(0);
  const Plan p = plan_round(in);
  EXPECT_TRUE(p.fits);
  EXPECT_EQ(p.lever, Lever::kNone);
  EXPECT_EQ(p.usage_mib, 0);
}

TEST(Planner, DemotesBackgroundFirstAndTheForegroundLast) {
  PlanInput in = three_rungs(12.5);
  in.tenants = {tenant(kFg, kRun, 0, 0, {1, 1, 1}), tenant(kBg, kRun, 0, 1, {1, 1, 1}),
                tenant(kBg, kRun, 0, 2, {1, 1, 1})};
  const Plan p = plan_round(in);
  ASSERT_TRUE(p.fits) << p.usage_mib;
  EXPECT_EQ(p.lever, Lever::kDemote);
  // The shared top rung only leaves when its last tenant does: both background tenants reach
  // the bottom before the foreground one moves, and it moves one rung.
  EXPECT_EQ(p.tenants[1].rung, 2);
  EXPECT_EQ(p.tenants[2].rung, 2);
  EXPECT_EQ(p.tenants[0].rung, 1);
  EXPECT_DOUBLE_EQ(p.usage_mib, 5 + 2 + 3);
  EXPECT_EQ(p.counts.demote, 3);
}

TEST(Planner, DefersAWaitingTenantThatDoesNotFit) {
  PlanInput in = three_rungs(4.5);
  in.tenants = {tenant(kBg, kRun, 2, 0, {1, 1, 1}), tenant(kBg, kWait, -1, 1, {3, 3, 3})};
  const Plan p = plan_round(in);
  EXPECT_TRUE(p.fits);
  EXPECT_EQ(p.tenants[1].state, kWait);
  EXPECT_EQ(p.lever, Lever::kDefer);
  in.budget_mib = 100;
  const Plan q = plan_round(in);
  EXPECT_EQ(q.tenants[1].state, kRun);
  EXPECT_EQ(q.tenants[1].rung, 0);  // the top rung, with headroom
}

TEST(Planner, ParksWhenNoRungFitsAndReportsTheOvershootWhenNothingDoes) {
  PlanInput in = three_rungs(2.5);  // below the bottom rung with its two caches
  in.tenants = {tenant(kFg, kRun, 2, 0, {1, 1, 1}), tenant(kBg, kRun, 2, 1, {1, 1, 1})};
  Plan p = plan_round(in);
  ASSERT_TRUE(p.fits);
  EXPECT_EQ(p.lever, Lever::kPark);
  EXPECT_EQ(p.tenants[0].state, kSus);
  EXPECT_EQ(p.tenants[1].state, kSus);
  EXPECT_DOUBLE_EQ(p.usage_mib, 0.2 + 2);
  in.budget_mib = 0;  // nothing fits: all parked, the overshoot reported, nobody terminated
  p = plan_round(in);
  EXPECT_FALSE(p.fits);
  EXPECT_DOUBLE_EQ(p.overshoot_mib, 2.2);
  for (const TenantPlan& t : p.tenants) EXPECT_EQ(t.state, kSus);
}

TEST(Planner, ShedsOnlyWhenParkingIsNotEnough) {
  PlanInput in = three_rungs(1.9);
  in.tenants = {tenant(kFg, kRun, 2, 0, {1, 1, 1}), tenant(kBg, kRun, 2, 1, {1, 1, 1})};
  in.tenants[1].shed_mib = 0.5;
  const Plan p = plan_round(in);
  ASSERT_TRUE(p.fits) << p.usage_mib;
  EXPECT_EQ(p.lever, Lever::kShed);
  EXPECT_TRUE(p.tenants[1].shed);
  EXPECT_FALSE(p.tenants[0].shed);
  in.budget_mib = 2.5;
  EXPECT_EQ(plan_round(in).lever, Lever::kPark);
}

TEST(Planner, MovesUpForegroundFirstAfterCalmRoundsOnly) {
  PlanInput in = three_rungs(100);
  in.tenants = {tenant(kFg, kRun, 2, 0, {1, 1, 1}), tenant(kBg, kRun, 2, 1, {1, 1, 1})};
  in.up_streak = 1;
  const Plan wait = plan_round(in);
  EXPECT_TRUE(wait.up_ready);
  EXPECT_EQ(wait.counts.promote, 0);  // hysteresis: not yet
  in.up_streak = 2;
  const Plan p = plan_round(in);
  EXPECT_EQ(p.tenants[0].rung, 0);  // the foreground first ...
  EXPECT_EQ(p.tenants[1].rung, 2);
  in.tenants[0].rung = 0;  // ... the background after a fresh streak
  EXPECT_EQ(plan_round(in).tenants[1].rung, 0);
  // The top rung is too small for the foreground's cache there: it stays on rung 1, and the
  // background, which would fit on the top rung, goes no higher than the foreground.
  in.tenants[0] = tenant(kFg, kRun, 1, 0, {20, 1, 1});
  in.budget_mib = 20;
  const Plan q = plan_round(in);
  EXPECT_EQ(q.tenants[0].rung, 1);
  EXPECT_EQ(q.tenants[1].rung, 1);
}

TEST(Planner, WakesWhereItCanThenAdmits) {
  PlanInput in = three_rungs(5);
  in.tenants = {tenant(kBg, kSus, 0, 0, {1, 1, 1}), tenant(kBg, kWait, -1, 1, {1, 1, 1})};
  const Plan p = plan_round(in);  // rung 0 does not fit: it wakes on the bottom rung
  EXPECT_EQ(p.tenants[0].state, kRun);
  EXPECT_EQ(p.tenants[0].rung, 2);
  EXPECT_EQ(p.tenants[1].state, kRun);
  EXPECT_EQ(p.tenants[1].rung, 2);
  EXPECT_EQ(p.counts.wake, 1);
  EXPECT_EQ(p.counts.admit, 1);
}

// The ordered search suspends tenants where they are; here the only fit moves the big-cached
// background tenant down and suspends the foreground one, whose suspended cache is small.
TEST(Planner, FallsBackToTheExactSearchWhenTheOrderedOneMissesAFit) {
  PlanInput in;
  in.budget_mib = 3.3;
  in.rungs = {{10, 0}, {2, 0}};
  in.tenants = {tenant(kFg, kRun, 1, 0, {1, 1}), tenant(kBg, kRun, 0, 1, {10, 1})};
  in.tenants[0].held_mib = {0.2, 0.2};
  const Plan p = plan_round(in);
  ASSERT_TRUE(p.fits) << p.usage_mib;
  EXPECT_TRUE(p.exact);
  EXPECT_DOUBLE_EQ(p.usage_mib, 3.2);
  EXPECT_EQ(p.tenants[0].state, kSus);
  EXPECT_EQ(p.tenants[1].state, kRun);
  EXPECT_EQ(p.tenants[1].rung, 1);
}

TEST(Planner, RefusesInconsistentInput) {
  PlanInput in = three_rungs(5);
  in.tenants = {tenant(kBg, kRun, 0, 0, {1, 1})};
  EXPECT_THROW(plan_round(in), Error);
  in.tenants = {tenant(kBg, kRun, 3, 0, {1, 1, 1})};
  EXPECT_THROW(plan_round(in), Error);
  in.tenants = {tenant(kBg, kRun, 0, 0, {1, 1, 1})};
  in.budget_mib = NAN;
  EXPECT_THROW(plan_round(in), Error);
}

// ---- Properties over random rounds --------------------------------------------------------

// Every assignment a round can reach (waiting tenants deferred: admitting only adds).
double brute_min(const PlanInput& in) {
  const int n = static_cast<int>(in.rungs.size());
  std::vector<TenantPlan> p(in.tenants.size());
  double best = kInf;
  std::function<void(size_t)> go = [&](size_t i) {
    if (i == in.tenants.size()) {
      best = std::min(best, usage_mib(in, p));
      return;
    }
    const TenantView& t = in.tenants[i];
    if (t.state == kWait || t.state == TenantState::kFinished) {
      p[i] = {t.state, t.rung, false};
      go(i + 1);
      return;
    }
    for (int r = -1; r < n; ++r) {  // -1: suspended where it is
      const bool movable = t.state == kRun || t.can_move_suspended;
      if (r >= 0 && r != t.rung && !movable) continue;
      const int at = r < 0 ? t.rung : r;
      for (int shed = 0; shed < 2; ++shed) {
        if (shed && (t.shed_mib <= 0 || at != t.rung)) continue;
        p[i] = {r < 0 ? kSus : kRun, at, shed == 1};
        go(i + 1);
      }
    }
  };
  go(0);
  return best;
}

struct SimTenant {
  Priority priority = kBg;
  int64_t arrival = 0, max_tokens = 0, produced = 0, positions = 0, capacity = 0, admitted = -1;
  TenantState state = kWait;
  int rung = -1;
};

struct SimLadder {
  std::vector<RungCost> rungs;
  std::vector<double> kv, scratch;  // MiB per position, MiB
  double held_scratch = 1;          // share of the scratch a suspended tenant keeps
};

struct Sim {
  std::mt19937 rng;
  SimLadder ladder;
  std::vector<SimTenant> tenants;
  int64_t round = 0, streak = 0, admissions = 0;

  double uniform(double a, double b) { return std::uniform_real_distribution<double>(a, b)(rng); }
  int64_t integer(int64_t a, int64_t b) {
    return std::uniform_int_distribution<int64_t>(a, b)(rng);
  }

  explicit Sim(uint32_t seed) : rng(seed) {
    const int n = static_cast<int>(integer(1, 4));
    double w = uniform(20, 60);
    for (int r = 0; r < n; ++r) {
      ladder.rungs.push_back({w, w * uniform(0.02, 0.1)});
      ladder.kv.push_back(uniform(0.005, 0.05));  // not monotone, as on the tiny ladder
      ladder.scratch.push_back(uniform(0.3, 2));
      w *= uniform(0.3, 0.9);
    }
    ladder.held_scratch = integer(0, 1) ? 1.0 : 0.3;
    const int64_t count = integer(1, 5);
    for (int64_t i = 0; i < count; ++i) {
      SimTenant t;
      t.priority = integer(0, 3) == 0 ? kFg : kBg;
      t.arrival = integer(0, 3) == 0 ? integer(0, 60) : integer(0, 8);
      t.max_tokens = integer(10, 100);
      t.positions = integer(4, 40);
      t.capacity = t.positions + t.max_tokens;
      tenants.push_back(t);
    }
  }

  double own(const SimTenant& t, int r, double scratch_share = 1) const {
    const size_t i = static_cast<size_t>(r);
    return ladder.kv[i] * static_cast<double>(t.capacity) + ladder.scratch[i] * scratch_share;
  }
  // Everyone on the top rung: what relative budgets scale.
  double reference() const {
    double u = ladder.rungs[0].loaded_mib;
    for (const SimTenant& t : tenants) u += own(t, 0);
    return u;
  }

  PlanInput view(double budget, std::vector<size_t>& who) const {
    PlanInput in;
    in.budget_mib = budget;
    in.rungs = ladder.rungs;
    in.up_streak = streak;
    who.clear();
    for (size_t i = 0; i < tenants.size(); ++i) {
      const SimTenant& t = tenants[i];
      if (t.state == TenantState::kFinished || (t.state == kWait && t.arrival > round)) continue;
      who.push_back(i);
      TenantView v = tenant(t.priority, t.state, t.rung,
                            t.admitted >= 0 ? t.admitted : 1000 + static_cast<int64_t>(i), {});
      for (size_t r = 0; r < ladder.rungs.size(); ++r) {
        v.own_mib.push_back(own(t, static_cast<int>(r)));
        v.held_mib.push_back(own(t, static_cast<int>(r), ladder.held_scratch));
      }
      const int64_t drop = (t.positions - 4) / 2;
      if (t.state == kRun && drop >= 8)
        v.shed_mib = ladder.kv[static_cast<size_t>(t.rung)] * static_cast<double>(drop);
      in.tenants.push_back(v);
    }
    return in;
  }

  // The physical world follows the plan: runners produce one token each.
  void apply(const Plan& p, const std::vector<size_t>& who) {
    for (size_t k = 0; k < who.size(); ++k) {
      SimTenant& t = tenants[who[k]];
      const TenantPlan& q = p.tenants[k];
      if (q.shed) {
        const int64_t drop = (t.positions - 4) / 2;
        t.positions -= drop;
        t.capacity -= drop;
      }
      if (t.state == kWait && q.state == kRun) t.admitted = admissions++;
      t.state = q.state;
      t.rung = q.rung;
      if (q.state != kRun) continue;
      ++t.produced;
      ++t.positions;
      ASSERT_LE(t.positions, t.capacity);
      if (t.produced == t.max_tokens) {
        t.state = TenantState::kFinished;
        t.rung = -1;
      }
    }
    streak = p.up_ready && p.counts.promote == 0 ? streak + 1 : 0;
    ++round;
  }
};

// A random trace: segments of plateaus, sudden drops, flapping every round, zero, below the
// smallest rung, slow squeezes and noise, then a long recovery.
std::vector<double> random_trace(Sim& s) {
  const double ref = s.reference();
  const double bottom = s.ladder.rungs.back().loaded_mib;
  std::vector<double> b(static_cast<size_t>(s.integer(1, 15)), ref * 1.3);  // room at first
  const int segments = static_cast<int>(s.integer(4, 10));
  for (int k = 0; k < segments; ++k) {
    const int64_t len = s.integer(1, 20);
    // plateau, drop, flapping, zero, below the smallest rung, slow squeeze, noise
    const int64_t kind = std::discrete_distribution<int>({3, 1, 1, 1, 1, 4, 1})(s.rng);
    const double hi = ref * s.uniform(0.3, 1.5), lo = ref * s.uniform(0, 0.3);
    for (int64_t i = 0; i < len; ++i) {
      const double squeeze = ref * 1.3 * std::pow(0.93, static_cast<double>(i));
      const double level[] = {hi,
                              lo,
                              i % 2 ? hi : lo,
                              0,
                              bottom * s.uniform(0.2, 0.99),
                              squeeze,
                              s.uniform(0, 1.5) * ref};
      b.push_back(level[kind]);
    }
  }
  b.push_back(ref * 1.5);  // held from here on
  return b;
}

struct Tally {
  int64_t rounds = 0, feasible = 0, infeasible = 0, exact = 0, checked_brute = 0;
  int64_t levers[5] = {0, 0, 0, 0, 0};
  int64_t demotions = 0;
};

void check_round(const PlanInput& in, const Plan& p, Tally& tally) {
  ASSERT_EQ(p.tenants.size(), in.tenants.size());
  EXPECT_NEAR(p.usage_mib, usage_mib(in, p.tenants), 1e-9);
  const double best = min_usage_mib(in, true);
  if (in.tenants.size() <= 3 && in.rungs.size() <= 3) {
    ASSERT_NEAR(brute_min(in), best, 1e-9);  // the exact search is exact
    ++tally.checked_brute;
  }
  if (best <= in.budget_mib) {
    ++tally.feasible;
    ASSERT_TRUE(p.fits) << "an assignment of " << best << " MiB fits " << in.budget_mib
                        << " MiB but the plan uses " << p.usage_mib;
  } else {
    ++tally.infeasible;
    ASSERT_FALSE(p.fits);
    for (const TenantPlan& t : p.tenants) ASSERT_NE(t.state, kRun);  // all parked or deferred
    EXPECT_GT(p.overshoot_mib, 0);
  }
  for (size_t i = 0; i < in.tenants.size(); ++i) {
    const TenantView& t = in.tenants[i];
    const TenantPlan& q = p.tenants[i];
    // Never terminated; physically reachable.
    ASSERT_NE(q.state, TenantState::kFinished);
    if (t.state != kWait) {
      ASSERT_NE(q.state, kWait);
    }
    if (t.state == kRun && q.state == kSus) {
      ASSERT_EQ(q.rung, t.rung);
    }
    if (q.shed) {
      ASSERT_TRUE(t.shed_mib > 0 && q.rung == t.rung);
    }
    // The foreground is never demoted while a background tenant could be.
    if (t.priority == kFg && t.state == kRun && q.state == kRun && q.rung > t.rung) {
      for (size_t j = 0; j < in.tenants.size(); ++j) {
        const TenantView& b = in.tenants[j];
        const TenantPlan& bq = p.tenants[j];
        if (b.priority != kBg || bq.state != kRun) continue;
        ASSERT_LT(next_down(in, b, bq.rung), 0) << "foreground demoted while a background "
                                                   "tenant could have been";
      }
    }
  }
  tally.exact += p.exact ? 1 : 0;
  tally.demotions += p.counts.demote;
  ++tally.levers[static_cast<int>(p.lever)];
  ++tally.rounds;
}

TEST(PlannerProperties, ThirtyThousandRandomRounds) {
  const auto t0 = std::chrono::steady_clock::now();
  Tally tally;
  int64_t episodes = 0;
  for (uint32_t seed = 1; tally.rounds < 30000; ++seed, ++episodes) {
    Sim s(seed);
    const std::vector<double> trace = random_trace(s);
    std::vector<size_t> who;
    const int64_t limit = static_cast<int64_t>(trace.size()) + 400;
    while (s.round < limit) {
      const double budget = trace[static_cast<size_t>(
          std::min<int64_t>(s.round, static_cast<int64_t>(trace.size()) - 1))];
      const PlanInput in = s.view(budget, who);
      const Plan p = plan_round(in);
      check_round(in, p, tally);
      if (HasFatalFailure()) {
        ADD_FAILURE() << "seed " << seed << " round " << s.round;
        return;
      }
      s.apply(p, who);
      if (std::all_of(s.tenants.begin(), s.tenants.end(),
                      [](const SimTenant& t) { return t.state == TenantState::kFinished; }))
        break;
    }
    // No starvation: under the long recovery everyone finished, with every token.
    for (const SimTenant& t : s.tenants) {
      ASSERT_EQ(t.state, TenantState::kFinished) << "seed " << seed;
      ASSERT_EQ(t.produced, t.max_tokens);
    }
  }
  // The time is printed, not asserted: a test never asserts a wall-clock time (under ASan on a
  // loaded machine this took 1.8 s).
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  // Every kind of round happened.
  EXPECT_GT(tally.infeasible, 100);
  EXPECT_GT(tally.checked_brute, 2000);
  for (int l = 0; l < 5; ++l) EXPECT_GT(tally.levers[l], 15) << lever_name(static_cast<Lever>(l));
  EXPECT_GT(tally.demotions, 400);
  const auto ll = [](int64_t x) { return static_cast<long long>(x); };
  std::printf(
      "%lld rounds in %.3f s over %lld episodes: %lld feasible, %lld not, %lld exact "
      "fallbacks, %lld brute-checked, %lld demotions; rounds by lever: none %lld defer "
      "%lld demote %lld park %lld shed %lld\n",
      ll(tally.rounds), s, ll(episodes), ll(tally.feasible), ll(tally.infeasible), ll(tally.exact),
      ll(tally.checked_brute), ll(tally.demotions), ll(tally.levers[0]), ll(tally.levers[1]),
      ll(tally.levers[2]), ll(tally.levers[3]), ll(tally.levers[4]));
}

// Flapping every round: no move up ever (the hysteresis), and everyone still finishes.
TEST(PlannerProperties, FlappingNeverMovesUp) {
  Sim s(7);
  s.tenants.resize(2);
  for (SimTenant& t : s.tenants) t.arrival = 0;
  const double ref = s.reference();
  std::vector<size_t> who;
  for (int64_t r = 0; r < 400; ++r) {
    const PlanInput in = s.view(r % 2 ? ref * 2 : ref * 0.2, who);
    const Plan p = plan_round(in);
    ASSERT_EQ(p.counts.promote, 0);
    s.apply(p, who);
  }
  for (const SimTenant& t : s.tenants) EXPECT_EQ(t.state, TenantState::kFinished);
}

}  // namespace
}  // namespace molt::sched
