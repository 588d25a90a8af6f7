// The scheduler with real generations on the synthetic test ladder: a tenant decodes what a
// generation alone decodes, on the rung the planner chose; a shed moves the cache into a smaller
// allocation without a gap in the stream; and a property run of a few hundred rounds under
// random traces and arrivals, checked against the ladder's real residency.
#include "molt/scheduler/scheduler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <random>

#include "molt/common/error.h"
#include "runtime/runtime_fixture.h"
#include "scheduler/spawn.h"

namespace molt::sched {
namespace {

using test::runtime_ladder;
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kMiB = 1024.0 * 1024.0;

SessionOptions greedy(int64_t max_tokens, Policy policy = Policy::kMolt) {
  SessionOptions o;
  o.max_tokens = max_tokens;
  o.stop_at_eos = false;
  o.policy = policy;
  return o;
}

std::vector<int32_t> answer(const Generation& g) {
  return {g.answer().begin(), g.answer().end()};
}

double weights_mib(const Ladder& l, int r) {
  const Footprint& f = l.rung(r).footprint();
  return static_cast<double>(f.weight_bytes + f.heap_weight_bytes) / kMiB;
}

void run_to_end(Scheduler& s, int64_t max_rounds = 1000) {
  while (!s.done() && s.rounds() < max_rounds) s.round();
  ASSERT_TRUE(s.done());
}

TEST(Scheduler, OwnSizesMatchTheGeneration) {
  auto l = Ladder::open(runtime_ladder().with_maps);
  const auto prompt = test::test_prompt(20);
  const SessionOptions o = greedy(16);
  Generation g(*l, nullptr, prompt, o);
  for (int r = 0; r < l->size(); ++r) {
    EXPECT_NEAR(g.own_mib(r), own_at(*l, r, 36, o), 1e-12) << r;
  }
}

TEST(Scheduler, ATenantDecodesWhatAGenerationAloneDecodes) {
  auto l = Ladder::open(runtime_ladder().with_maps);
  const auto prompt = test::test_prompt(20);
  Generation alone(*l, nullptr, prompt, greedy(12));
  while (!alone.finished()) alone.step();
  l->release_unused();

  Scheduler s(*l, nullptr);
  s.add({"a", Priority::kForeground, prompt, greedy(12)});
  run_to_end(s);
  EXPECT_EQ(s.tenant(0).stream, answer(alone));
  EXPECT_EQ(s.tenant(0).rungs_used, std::vector<std::string>{l->rung(0).name()});
  EXPECT_EQ(l->resident_bytes(), 0u);  // the owner released what nobody holds
}

TEST(Scheduler, StartsOnTheRungThatFits) {
  auto l = Ladder::open(runtime_ladder().with_maps);
  const auto prompt = test::test_prompt(20);
  const SessionOptions o = greedy(12);
  const double need1 = weights_mib(*l, 1) + own_at(*l, 1, 32, o);
  const double need0 = weights_mib(*l, 0) + own_at(*l, 0, 32, o);
  const double budget = need1 * 1.15;
  ASSERT_GT(need0, budget);
  // Alone, a generation starts on the largest rung its budget fits and stays (no room above).
  FunctionBudget fixed([&](const BudgetQuery&) { return budget; });
  Generation alone(*l, &fixed, prompt, o);
  while (!alone.finished()) alone.step();
  l->release_unused();
  ASSERT_EQ(alone.summary().rungs_used, std::vector<std::string>{l->rung(1).name()});

  FunctionBudget fixed2([&](const BudgetQuery&) { return budget; });
  Scheduler s(*l, &fixed2);
  s.add({"a", Priority::kBackground, prompt, o});
  const RoundRecord first = s.round();
  EXPECT_EQ(first.counts.admit, 1);
  EXPECT_EQ(first.tenants[0].rung, 1);
  EXPECT_EQ(l->rung(0).state(), RungState::kReleased);  // never loaded
  run_to_end(s);
  EXPECT_EQ(s.tenant(0).stream, answer(alone));
}

TEST(Scheduler, AShedMovesTheCacheIntoLessMemoryAndTheStreamGoesOn) {
  auto l = Ladder::open(runtime_ladder().with_maps);
  const auto prompt = test::test_prompt(30);
  const SessionOptions o = greedy(24);
  const int64_t cap = 54, sink = 4, k = 6;
  // The reference sheds in place at the same point (no smaller allocation).
  auto ref = start_on(*l, 0, prompt, tenant_options(o, cap, 24));
  for (int i = 0; i < k; ++i) ref->step();
  const int64_t drop = (ref->positions() - sink) / 2;
  ASSERT_EQ(ref->shed(sink, drop), drop);
  while (!ref->finished()) ref->step();
  std::vector<int32_t> expected = answer(*ref);
  ref.reset();
  l->release_unused();

  // k rounds on the top rung, then a budget only a shed cache fits, then no limit.
  double squeeze = 0;
  FunctionBudget budget([&](const BudgetQuery& q) { return q.step == k ? squeeze : kInf; });
  Scheduler s(*l, &budget);
  s.add({"a", Priority::kBackground, prompt, o});
  for (int i = 0; i < k; ++i) s.round();
  const PlanInput in = s.view(kInf);
  ASSERT_GT(in.tenants[0].shed_mib, 0);
  squeeze = in.rungs[0].parked_mib + in.tenants[0].own_mib[0] - in.tenants[0].shed_mib * 0.5;
  const RoundRecord r = s.round();
  EXPECT_EQ(r.lever, Lever::kShed);
  EXPECT_EQ(r.tenants[0].state, TenantState::kSuspended);
  EXPECT_LE(r.accounted_mib, squeeze);
  EXPECT_NEAR(r.accounted_mib, r.predicted_mib, 1e-9);
  run_to_end(s);
  EXPECT_EQ(s.tenant(0).sheds, 1);
  EXPECT_EQ(s.tenant(0).shed_positions, drop);
  EXPECT_EQ(s.tenant(0).stream, expected);
}

// A tenant's sink hears one generation's stream: contiguous indices across a shed (which
// restarts the generation), the demotion as a migration carrying the scheduler's budget, one done
// for the whole tenant.
TEST(Scheduler, ASinkHearsTheWholeTenantAsOneStream) {
  auto l = Ladder::open(runtime_ladder().with_maps);
  const auto prompt = test::test_prompt(30);
  const SessionOptions o = greedy(24);
  double budget = kInf;
  FunctionBudget source([&](const BudgetQuery&) { return budget; });
  Scheduler s(*l, &source);
  EventLog log;
  TenantSpec spec{"a", Priority::kBackground, prompt, o};
  spec.sink = &log;
  s.add(spec);
  for (int i = 0; i < 6; ++i) s.round();
  budget = weights_mib(*l, 1) + s.view(kInf).tenants[0].own_mib[1] * 1.5;  // fits rung 1 only
  run_to_end(s);
  ASSERT_EQ(log.tokens.size(), 24u);
  for (size_t i = 0; i < log.tokens.size(); ++i) {
    EXPECT_EQ(log.tokens[i].index, static_cast<int64_t>(i));
    EXPECT_EQ(log.tokens[i].token_id, s.tenant(0).stream[i]);
  }
  ASSERT_EQ(log.migrations.size(), 1u);
  EXPECT_EQ(log.migrations[0].from, l->rung(0).name());
  EXPECT_EQ(log.migrations[0].to, l->rung(1).name());
  EXPECT_EQ(log.migrations[0].at_token, 6);
  EXPECT_DOUBLE_EQ(log.migrations[0].budget_mib, budget);
  EXPECT_GT(log.migrations[0].pressure, 0.0);
  EXPECT_EQ(log.done.tokens, 24);
  EXPECT_EQ(log.done.migrations, 1);
  EXPECT_EQ(log.done.rungs_used, s.tenant(0).rungs_used);
  EXPECT_FALSE(log.done.killed);
}

// cancel() ends a tenant at once and frees its cache; prune() forgets finished tenants and keeps
// the others in order.
TEST(Scheduler, CancelFreesATenantAndPruneForgetsIt) {
  auto l = Ladder::open(runtime_ladder().with_maps);
  const auto prompt = test::test_prompt(20);
  Scheduler s(*l, nullptr);
  EventLog a_log, b_log, c_log;
  TenantSpec a{"a", Priority::kForeground, prompt, greedy(40)};
  a.sink = &a_log;
  TenantSpec b{"b", Priority::kBackground, prompt, greedy(40)};
  b.sink = &b_log;
  TenantSpec c{"c", Priority::kBackground, prompt, greedy(8), /*arrival=*/1000};
  c.sink = &c_log;
  s.add(a);
  s.add(b);
  s.add(c);
  for (int i = 0; i < 5; ++i) s.round();
  const double before = s.accounted_mib();
  s.cancel(0);
  EXPECT_EQ(s.tenant(0).state, TenantState::kFinished);
  EXPECT_EQ(a_log.done.reason, "cancelled");
  EXPECT_EQ(a_log.done.tokens, 5);
  EXPECT_LT(s.accounted_mib(), before);  // its cache is gone now, not at the end
  s.cancel(2);                           // still waiting: finishes without ever running
  EXPECT_EQ(c_log.done.tokens, 0);
  EXPECT_EQ(c_log.done.reason, "cancelled");
  s.cancel(0);  // nothing happens to a finished tenant
  EXPECT_EQ(s.prune(), 2u);
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s.tenant(0).name, "b");
  run_to_end(s);
  EXPECT_EQ(b_log.done.tokens, 40);
  EXPECT_EQ(b_log.tokens.size(), 40u);
}

TEST(Scheduler, RefusesTenantsItCannotRun) {
  auto l = Ladder::open(runtime_ladder().with_maps);
  Scheduler s(*l, nullptr);
  EXPECT_THROW(s.add({"one", Priority::kBackground, {1}, greedy(4)}), Error);
  EXPECT_THROW(s.add({"vocab", Priority::kBackground, {1, 100000}, greedy(4)}), Error);
  EXPECT_THROW(s.add({"hold", Priority::kBackground, {1, 2}, greedy(4, Policy::kHold)}), Error);
}

// The ladder's residency is what the accounting assumes: used rungs loaded, rungs only suspended
// tenants hold parked, the rest released.
void expect_residency(const Ladder& l) {
  for (int r = 0; r < l.size(); ++r) {
    const RungState st = l.rung(r).state();
    if (l.users(r) > 0) {
      EXPECT_EQ(st, RungState::kLoaded) << r;
    } else if (l.holders(r) > 0) {
      EXPECT_EQ(st, RungState::kParked) << r;
    } else {
      EXPECT_EQ(st, RungState::kReleased) << r;
    }
  }
}

// Budget levels (fractions of the reference) per round: zero, low, flapping, plateaus and slow
// squeezes from above everyone-on-the-top-rung.
std::vector<double> random_levels(std::mt19937& rng, int64_t rounds) {
  std::uniform_real_distribution<double> u(0, 1);
  std::vector<double> v;
  while (static_cast<int64_t>(v.size()) < rounds) {
    const int kind = static_cast<int>(rng() % 6);
    const double level = kind == 0 ? 0 : kind == 1 ? 0.05 + 0.3 * u(rng) : 0.2 + 1.2 * u(rng);
    const int64_t len = 1 + static_cast<int64_t>(rng() % 12);
    for (int64_t i = 0; i < len; ++i) {
      const double squeeze = 1.3 * std::pow(0.9, static_cast<double>(i));
      v.push_back(kind == 2 && i % 2 ? 0.1 : kind >= 4 ? squeeze : level);
    }
  }
  return v;
}

TEST(SchedulerProperties, RandomTracesAndArrivalsWithRealGenerations) {
  auto l = Ladder::open(runtime_ladder().with_maps);
  std::mt19937 rng(11);
  int64_t rounds = 0, fit_rounds = 0, levers[5] = {0, 0, 0, 0, 0};
  const Policy policies[] = {Policy::kMolt, Policy::kReleaseReprefill, Policy::kReprefill,
                             Policy::kHeal, Policy::kAuto};
  for (int episode = 0; episode < 8; ++episode) {
    const std::vector<double> levels = random_levels(rng, 50);
    Scheduler* sp = nullptr;
    FunctionBudget budget([&](const BudgetQuery& q) {
      const double f = q.step < 50 ? levels[static_cast<size_t>(q.step)] : 1.5;
      return f * sp->reference_mib();
    });
    Scheduler s(*l, &budget);
    sp = &s;
    const int n = 2 + static_cast<int>(rng() % 3);
    for (int i = 0; i < n; ++i) {
      SessionOptions o = greedy(6 + static_cast<int64_t>(rng() % 18), policies[rng() % 5]);
      s.add({"t" + std::to_string(i),
             rng() % 3 == 0 ? Priority::kForeground : Priority::kBackground,
             test::test_prompt(6 + static_cast<int64_t>(rng() % 20)), o,
             static_cast<int64_t>(rng() % 20)});
    }
    while (!s.done() && s.rounds() < 400) {
      const RoundRecord r = s.round();
      ++rounds;
      ++levers[static_cast<int>(r.lever)];
      // The accounting after the steps is what the planner predicted, or less (finished
      // tenants free theirs), and within the budget whenever anything fits.
      EXPECT_LE(r.accounted_mib, r.predicted_mib + 1e-9) << "round " << r.round;
      if (r.fits) {
        ++fit_rounds;
        EXPECT_LE(r.accounted_mib, r.budget_mib + 1e-9) << "round " << r.round;
      }
      expect_residency(*l);
      if (HasFailure()) return;
    }
    ASSERT_TRUE(s.done()) << "episode " << episode;
    for (size_t i = 0; i < s.size(); ++i) {
      const TenantStatus& t = s.tenant(i);
      EXPECT_FALSE(t.killed);
      EXPECT_EQ(t.tokens(), t.max_tokens) << t.name;  // contiguity is checked at every token
    }
    EXPECT_EQ(l->resident_bytes(), 0u);
  }
  std::printf(
      "%lld rounds, %lld where some assignment fits; levers none %lld defer %lld demote "
      "%lld park %lld shed %lld%s%s\n",
      static_cast<long long>(rounds), static_cast<long long>(fit_rounds),
      static_cast<long long>(levers[0]), static_cast<long long>(levers[1]),
      static_cast<long long>(levers[2]), static_cast<long long>(levers[3]),
      static_cast<long long>(levers[4]), runtime_ladder().maps_note.empty() ? "" : "; ",
      runtime_ladder().maps_note.c_str());
  EXPECT_GE(rounds, 200);
  EXPECT_GT(fit_rounds, 100);
  EXPECT_GT(levers[static_cast<int>(Lever::kDemote)], 0);
  EXPECT_GT(levers[static_cast<int>(Lever::kPark)], 0);
  EXPECT_GT(levers[static_cast<int>(Lever::kDefer)], 0);
}

}  // namespace
}  // namespace molt::sched
