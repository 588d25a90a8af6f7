// The elastic session: forced migrations at the first, a middle and the last token for every
// policy and every route; hold is killed; small never moves; parking waits and resumes; a
// budget that flaps every token; token indices contiguous with no duplicate at any seam. Where
// a policy re-reads the text, every token is checked against a native prefill of its rung.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <tuple>

#include "molt/common/error.h"
#include "molt/ladder/process_memory.h"
#include "molt/runtime/metrics.h"
#include "molt/transfer/map_file.h"
#include "runtime_fixture.h"
#include "test_util.h"

namespace molt {
namespace {

using test::footprint_mib;
using test::runtime_ladder;
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kMiB = 1024.0 * 1024.0;
constexpr int64_t kTokens = 16;

struct Outcome {
  SessionResult result;
  EventLog log;
};

using BudgetFn = std::function<double(const BudgetQuery&, const Ladder&)>;

Outcome run(Ladder& l, Policy policy, const BudgetFn& fn, SessionOptions o = {}) {
  o.policy = policy;
  if (o.max_tokens == 64) o.max_tokens = kTokens;
  FunctionBudget budget([&](const BudgetQuery& q) { return fn(q, l); });
  // The rungs' own footprints in the generation's shape, for the assertions below.
  l.reshape(FootprintShape{o.prefill_chunk,
                           static_cast<int64_t>(test::test_prompt().size()) + o.max_tokens,
                           num_threads()});
  Outcome r;
  r.result = Session(l, budget, r.log, o).run(test::test_prompt());
  l.release_unused();  // the ladder's owner: nothing stays loaded between runs
  return r;
}

int64_t capacity(const SessionOptions& o = {}) {
  return static_cast<int64_t>(test::test_prompt().size()) +
         (o.max_tokens == 64 ? kTokens : o.max_tokens);
}

// The stream is whole: indices 0..n-1 in order, one event per token, same ids as the result.
void expect_contiguous(const Outcome& r) {
  ASSERT_EQ(r.log.tokens.size(), r.result.tokens.size());
  for (size_t i = 0; i < r.log.tokens.size(); ++i) {
    EXPECT_EQ(r.log.tokens[i].index, static_cast<int64_t>(i));
    EXPECT_EQ(r.log.tokens[i].token_id, r.result.tokens[i]);
    EXPECT_EQ(r.log.tokens[i].rung, r.result.rungs[i]);
    EXPECT_GE(r.result.tokens[i], 0);
    EXPECT_LT(r.result.tokens[i], test::kVocab);
  }
  EXPECT_EQ(r.log.done.tokens, static_cast<int64_t>(r.result.tokens.size()));
  EXPECT_EQ(r.log.done.migrations, static_cast<int64_t>(r.log.migrations.size()));
}

// Tokens [from, to) equal the native greedy token of the rung that produced each.
void expect_native(const Ladder& l, const Outcome& r, size_t from, size_t to) {
  std::vector<int32_t> prefix = test::test_prompt();
  for (size_t i = 0; i < from && i < r.result.tokens.size(); ++i)
    prefix.push_back(r.result.tokens[i]);
  for (size_t i = from; i < to && i < r.result.tokens.size(); ++i) {
    EXPECT_EQ(r.result.tokens[i], runtime_ladder().oracle(l.index(r.result.rungs[i]), prefix))
        << "token " << i << " on rung " << r.result.rungs[i];
    prefix.push_back(r.result.tokens[i]);
  }
}

bool has_maps() {
  return runtime_ladder().maps_note.empty();
}

// ---- forced migrations: every route × every migrating policy × first / middle / last token

struct Route {
  const char* from;
  const char* to;
};
const Route kRoutes[] = {{"l", "m"}, {"m", "s"}, {"l", "s"}, {"m", "l"}, {"s", "m"}, {"s", "l"}};
const Policy kMigrating[] = {Policy::kReprefill, Policy::kReleaseReprefill, Policy::kMolt,
                             Policy::kHeal, Policy::kAuto};

class Forced : public ::testing::TestWithParam<std::tuple<int, Policy, int64_t>> {};

TEST_P(Forced, MigratesOnceAtTheGivenTokenWithNothingLost) {
  const auto [route_i, policy, k] = GetParam();
  const Route route = kRoutes[route_i];
  auto l = Ladder::open(runtime_ladder().with_maps);
  const int from = l->index(route.from), to = l->index(route.to);
  const int64_t cap = capacity();
  // Start where the route starts (the largest rung that fits), then leave only the receiver
  // as the largest that fits from the check before token k on.
  // (5% above the receiver's footprint: room for heal's hidden states, still below the sender.)
  auto level = [&](int r, const Ladder& ld) {
    return r == 0 ? kInf : footprint_mib(ld, r, cap) * (r == to ? 1.05 : 1.0);
  };
  SessionOptions o;
  o.up_after = 1;
  o.up_margin = 0;
  o.auto_reprefill_below = 25;  // first-token seams re-prefill, later ones take a map
  o.auto_max_stall_ms = 0;      // (whatever a re-read would cost on this machine)
  Outcome r = run(
      *l, policy,
      [&](const BudgetQuery& q, const Ladder& ld) {
        return q.step < k ? level(from, ld) : level(to, ld);
      },
      o);

  expect_contiguous(r);
  EXPECT_FALSE(r.log.done.killed);
  ASSERT_EQ(r.result.tokens.size(), static_cast<size_t>(kTokens));
  ASSERT_EQ(r.log.migrations.size(), 1u);
  const MigrationEvent& m = r.log.migrations[0];
  EXPECT_EQ(m.from, route.from);
  EXPECT_EQ(m.to, route.to);
  EXPECT_EQ(m.at_token, k);
  EXPECT_EQ(m.direction, to > from ? "down" : "up");
  EXPECT_EQ(m.context, static_cast<int64_t>(test::test_prompt().size()) + k - 1);
  EXPECT_EQ(m.requested, policy_name(policy));
  EXPECT_GE(m.ms, 0.0);
  for (int64_t i = 0; i < kTokens; ++i)
    EXPECT_EQ(r.result.rungs[i], i < k ? route.from : route.to) << i;

  // What ran, and its accounted peak.
  std::string ran = policy_name(policy);
  if ((policy == Policy::kMolt || policy == Policy::kHeal) && !has_maps())
    ran = "release-reprefill";
  const Footprint &fs = l->rung(from).footprint(), &fr = l->rung(to).footprint();
  const double receiver = fr.total(cap) / kMiB;
  if (policy == Policy::kAuto) {
    EXPECT_FALSE(m.note.empty());
    if (m.context < 25) {
      EXPECT_EQ(m.policy, "release-reprefill") << m.note;
    }
    ran = m.policy;
  }
  EXPECT_EQ(m.policy, ran) << m.note;
  if (ran == "reprefill") {
    EXPECT_NEAR(m.peak_mib, receiver + (fs.total(cap) - fs.scratch_bytes) / kMiB,
                1e-6);  // both resident
  } else if (ran == "release-reprefill") {
    EXPECT_NEAR(m.peak_mib, receiver, 1e-6);
  } else {
    // Sender parked with its cache; the map (loaded before the receiver's weights) held too.
    const double map =
        std::filesystem::file_size(l->route(from, to)->maps / "map.safetensors") / kMiB;
    const double sender = (fs.kv_bytes(cap) + fs.heap_weight_bytes) / kMiB;
    EXPECT_NEAR(m.peak_mib,
                std::max(sender + fr.heap_weight_bytes / kMiB + 2 * map, receiver + sender + map),
                1e-6);
    if (ran == "heal") {
      EXPECT_EQ(m.flops_saved, 0.0);  // the re-prefill is deferred, not saved
      // less the share of the map's native layers, which ran at the seam
      const ModelConfig& rc = l->rung(to).config();
      const FlopCount f = prefill_flop_count(rc, m.context);
      const MapData md = read_map_dir(l->route(from, to)->maps);
      const double native = static_cast<double>(md.features.native_layers) /
                            static_cast<double>(rc.num_hidden_layers) * (f.linear + f.attention);
      EXPECT_NEAR(m.deferred_flops, f.total() - native, 1e-3);
    } else {
      EXPECT_GT(m.flops_saved, 0.0);
      EXPECT_LT(m.flops_saved, 1.0);
    }
  }

  // Before the seam: the sender's native tokens. After it: the receiver's, when the text was
  // re-read; after a heal completes, native again.
  expect_native(*l, r, 0, static_cast<size_t>(k));
  if (ran == "reprefill" || ran == "release-reprefill")
    expect_native(*l, r, static_cast<size_t>(k), kTokens);
  if (ran == "heal") {
    // The layers the map did not run natively at the seam.
    const int64_t layers = l->rung(to).config().num_hidden_layers -
                           read_map_dir(l->route(from, to)->maps).features.native_layers;
    if (k + layers < kTokens) {
      ASSERT_EQ(r.log.heals.size(), 1u);
      EXPECT_EQ(r.log.heals[0].at_token, k + layers);  // one chunk per layer (context ≤ heal_chunk)
      EXPECT_EQ(r.log.heals[0].positions, m.context);
      expect_native(*l, r, static_cast<size_t>(r.log.heals[0].at_token), kTokens);
    }
  }
}

std::string forced_name(const ::testing::TestParamInfo<Forced::ParamType>& info) {
  const auto [route_i, policy, k] = info.param;
  std::string p = policy_name(policy);
  std::replace(p.begin(), p.end(), '-', '_');
  return std::string(kRoutes[route_i].from) + "_to_" + kRoutes[route_i].to + "_" + p + "_at_" +
         std::to_string(k);
}

INSTANTIATE_TEST_SUITE_P(EveryRoutePolicyAndPosition, Forced,
                         ::testing::Combine(::testing::Range(0, 6), ::testing::ValuesIn(kMigrating),
                                            ::testing::Values(int64_t{1}, kTokens / 2,
                                                              kTokens - 1)),
                         forced_name);

TEST(Session, MoltRunsItsMapWhenMapsExist) {
  if (!has_maps()) GTEST_SKIP() << runtime_ladder().maps_note;
  auto l = Ladder::open(runtime_ladder().with_maps);
  Outcome r = run(*l, Policy::kMolt, [](const BudgetQuery& q, const Ladder& ld) {
    return q.step < 5 ? kInf : footprint_mib(ld, 1, capacity());
  });
  ASSERT_EQ(r.log.migrations.size(), 1u);
  EXPECT_EQ(r.log.migrations[0].policy, "molt");
  EXPECT_TRUE(r.log.migrations[0].note.empty()) << r.log.migrations[0].note;
}

TEST(Session, WithoutMapsMoltFallsBackAndSaysWhy) {
  auto l = Ladder::open(runtime_ladder().without_maps);
  Outcome r = run(*l, Policy::kMolt, [](const BudgetQuery& q, const Ladder& ld) {
    return q.step < 5 ? kInf : footprint_mib(ld, 1, capacity());
  });
  ASSERT_EQ(r.log.migrations.size(), 1u);
  EXPECT_EQ(r.log.migrations[0].policy, "release-reprefill");
  EXPECT_NE(r.log.migrations[0].note.find("route l → m re-prefills"), std::string::npos)
      << r.log.migrations[0].note;
  expect_native(*l, r, 0, kTokens);
}

// ---- conditions A and B

TEST(Session, HoldIsKilledOncePastTheGrace) {
  auto l = Ladder::open(runtime_ladder().with_maps);
  SessionOptions o;
  o.grace_steps = 2;
  Outcome r = run(
      *l, Policy::kHold,
      [](const BudgetQuery& q, const Ladder& ld) {
        return q.step < 6 ? kInf : footprint_mib(ld, 1, capacity());
      },
      o);
  expect_contiguous(r);
  EXPECT_TRUE(r.log.done.killed);
  EXPECT_EQ(r.log.done.reason, "killed");
  EXPECT_TRUE(r.log.migrations.empty());
  EXPECT_EQ(r.result.tokens.size(), 8u);  // checks at steps 6, 7 tolerated; killed at 8
  EXPECT_EQ(r.log.done.rungs_used, std::vector<std::string>{"l"});
  EXPECT_GT(r.log.done.max_overshoot_mib, 0.0);
}

TEST(Session, HoldSurvivesADipShorterThanTheGrace) {
  auto l = Ladder::open(runtime_ladder().with_maps);
  Outcome r = run(*l, Policy::kHold, [](const BudgetQuery& q, const Ladder& ld) {
    return q.step == 6 || q.step == 7 ? footprint_mib(ld, 2, capacity()) : kInf;
  });
  EXPECT_FALSE(r.log.done.killed);
  EXPECT_EQ(r.result.tokens.size(), static_cast<size_t>(kTokens));
  expect_native(*l, r, 0, kTokens);
}

TEST(Session, SmallStaysOnTheSmallestRung) {
  auto l = Ladder::open(runtime_ladder().with_maps);
  Outcome r = run(*l, Policy::kSmall, [](const BudgetQuery& q, const Ladder& ld) {
    return q.step % 10 < 5 ? kInf : footprint_mib(ld, 2, capacity());
  });
  EXPECT_EQ(r.log.done.rungs_used, std::vector<std::string>{"s"});
  EXPECT_TRUE(r.log.migrations.empty());
  expect_native(*l, r, 0, kTokens);
}

// ---- parking

TEST(Session, BelowTheSmallestRungParksKeepsTheCacheAndResumes) {
  auto l = Ladder::open(runtime_ladder().with_maps);
  std::vector<double> parked_use;
  Outcome r = run(*l, Policy::kMolt, [&](const BudgetQuery& q, const Ladder& ld) {
    const double fs = footprint_mib(ld, 2, capacity());
    if (q.step >= 5 && q.step < 10) {
      if (q.step > 5) parked_use.push_back(q.used_mib);
      return fs / 2;
    }
    return fs;
  });
  expect_contiguous(r);
  ASSERT_EQ(r.log.parks.size(), 1u);
  EXPECT_EQ(r.log.parks[0].rung, "s");
  ASSERT_EQ(r.log.resumes.size(), 1u);
  EXPECT_EQ(r.log.resumes[0].rung, "s");
  EXPECT_EQ(r.log.resumes[0].waited_steps, 5);
  EXPECT_TRUE(r.log.migrations.empty());
  EXPECT_EQ(r.result.tokens.size(), static_cast<size_t>(kTokens));
  expect_native(*l, r, 0, kTokens);  // the kept cache carries on exactly
  // While parked the accounting holds the cache, not the weights.
  const Footprint& f = l->rung(2).footprint();
  ASSERT_FALSE(parked_use.empty());
  for (double u : parked_use) EXPECT_NEAR(u, f.parked(capacity()) / kMiB, 1e-6);
}

TEST(Session, ParkedCacheResumesOnAnotherRung) {
  for (Policy p : {Policy::kReleaseReprefill, Policy::kMolt}) {
    auto l = Ladder::open(runtime_ladder().with_maps);
    Outcome r = run(*l, p, [](const BudgetQuery& q, const Ladder& ld) {
      if (q.step < 5) return footprint_mib(ld, 1, capacity());  // m
      if (q.step < 9) return 0.0;                               // nothing fits
      return kInf;                                              // back up to l
    });
    expect_contiguous(r);
    ASSERT_EQ(r.log.parks.size(), 1u) << policy_name(p);
    EXPECT_EQ(r.log.parks[0].rung, "m");
    ASSERT_EQ(r.log.migrations.size(), 1u);
    EXPECT_EQ(r.log.migrations[0].from, "m");
    EXPECT_EQ(r.log.migrations[0].to, "l");
    ASSERT_EQ(r.log.resumes.size(), 1u);
    EXPECT_EQ(r.log.resumes[0].rung, "l");
    EXPECT_EQ(r.result.tokens.size(), static_cast<size_t>(kTokens));
    expect_native(*l, r, 0, 5);
    if (r.log.migrations[0].policy == "release-reprefill") expect_native(*l, r, 5, kTokens);
  }
}

TEST(Session, StartsParkedWhenNothingFitsYet) {
  auto l = Ladder::open(runtime_ladder().with_maps);
  Outcome r = run(*l, Policy::kMolt,
                  [](const BudgetQuery& q, const Ladder&) { return q.step < 4 ? 0.0 : kInf; });
  ASSERT_EQ(r.log.parks.size(), 1u);
  EXPECT_EQ(r.log.parks[0].rung, "");
  ASSERT_EQ(r.log.resumes.size(), 1u);
  EXPECT_EQ(r.log.resumes[0].rung, "l");
  EXPECT_EQ(r.result.tokens.size(), static_cast<size_t>(kTokens));
  expect_native(*l, r, 0, kTokens);
}

TEST(Session, GivesUpClearlyWhenTheBudgetNeverReturns) {
  auto l = Ladder::open(runtime_ladder().with_maps);
  SessionOptions o;
  o.max_parked_steps = 10;
  try {
    run(
        *l, Policy::kMolt,
        [](const BudgetQuery& q, const Ladder&) { return q.step < 3 ? kInf : 0.0; }, o);
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("never came back above the smallest rung"),
              std::string::npos)
        << e.what();
  }
}

// ---- a budget that flaps every token

TEST(Session, FlappingEveryTokenStaysCorrect) {
  for (Policy p : {Policy::kReprefill, Policy::kReleaseReprefill, Policy::kMolt, Policy::kHeal,
                   Policy::kAuto}) {
    auto l = Ladder::open(runtime_ladder().with_maps);
    SessionOptions o;
    o.up_after = 1;
    o.up_margin = 0;
    Outcome r = run(
        *l, p,
        [](const BudgetQuery& q, const Ladder& ld) {
          return q.step % 2 == 0 ? kInf : footprint_mib(ld, 1, capacity());
        },
        o);
    SCOPED_TRACE(policy_name(p));
    expect_contiguous(r);
    EXPECT_EQ(r.result.tokens.size(), static_cast<size_t>(kTokens));
    EXPECT_EQ(r.log.migrations.size(), static_cast<size_t>(kTokens - 1));  // every check moves
    for (size_t i = 0; i < r.result.rungs.size(); ++i)
      EXPECT_EQ(r.result.rungs[i], i % 2 == 0 ? "l" : "m") << i;
    bool reread = true;
    for (const auto& m : r.log.migrations)
      reread = reread && (m.policy == "reprefill" || m.policy == "release-reprefill");
    if (reread) expect_native(*l, r, 0, kTokens);
  }
}

TEST(Session, HysteresisHoldsAFlappingBudgetOnTheLowerRung) {
  auto l = Ladder::open(runtime_ladder().with_maps);
  Outcome r = run(*l, Policy::kMolt, [](const BudgetQuery& q, const Ladder& ld) {
    return q.step % 2 == 0 ? kInf : footprint_mib(ld, 1, capacity());
  });
  ASSERT_EQ(r.log.migrations.size(), 1u);  // down once; never up for a single good check
  EXPECT_EQ(r.log.migrations[0].to, "m");
}

TEST(Session, MovesBackUpAfterTheBudgetHoldsWithMargin) {
  auto l = Ladder::open(runtime_ladder().with_maps);
  SessionOptions o;  // up_after 3, margin 10%
  Outcome r = run(
      *l, Policy::kReleaseReprefill,
      [](const BudgetQuery& q, const Ladder& ld) {
        if (q.step >= 3 && q.step < 6) return footprint_mib(ld, 1, capacity());
        if (q.step >= 6 && q.step < 10)
          return footprint_mib(ld, 0, capacity()) * 1.05;  // fits, not by 10%
        return footprint_mib(ld, 0, capacity()) * 1.2;
      },
      o);
  ASSERT_EQ(r.log.migrations.size(), 2u);
  EXPECT_EQ(r.log.migrations[0].to, "m");
  EXPECT_EQ(r.log.migrations[1].to, "l");
  EXPECT_EQ(r.log.migrations[1].direction, "up");
  EXPECT_EQ(r.log.migrations[1].at_token, 12);  // checks 10, 11, 12 with margin
  expect_native(*l, r, 0, kTokens);
}

// ---- seams measured, stops, bad input

TEST(Session, SeamMeasurementDoesNotDisturbTheStream) {
  auto l = Ladder::open(runtime_ladder().with_maps);
  auto budget = [](const BudgetQuery& q, const Ladder& ld) {
    return q.step < 6    ? kInf
           : q.step < 12 ? footprint_mib(ld, 1, capacity())
                         : footprint_mib(ld, 2, capacity());
  };
  Outcome plain = run(*l, Policy::kReprefill, budget);
  SessionOptions o;
  o.measure_seams = true;
  o.measure_rss = true;
  Outcome measured = run(*l, Policy::kReprefill, budget, o);
  EXPECT_EQ(plain.result.tokens, measured.result.tokens);
  ASSERT_EQ(measured.log.migrations.size(), 2u);
  for (const auto& m : measured.log.migrations) {
    EXPECT_TRUE(std::isfinite(m.seam_kl));
    EXPECT_GT(m.seam_kl, 0.0);  // different random models disagree
    EXPECT_TRUE(std::isfinite(m.rss_peak_mib));
  }
  for (const auto& m : plain.log.migrations) EXPECT_TRUE(std::isnan(m.seam_kl));
}

TEST(Session, StopsAtAStopToken) {
  auto l = Ladder::open(runtime_ladder().with_maps);
  Outcome free_run = run(*l, Policy::kMolt, [](const BudgetQuery&, const Ladder&) { return kInf; });
  SessionOptions o;
  o.stop_ids = {free_run.result.tokens[3]};
  Outcome r = run(
      *l, Policy::kMolt, [](const BudgetQuery&, const Ladder&) { return kInf; }, o);
  const auto first =
      std::find(free_run.result.tokens.begin(), free_run.result.tokens.end(), o.stop_ids[0]);
  EXPECT_EQ(r.result.tokens.size(),
            static_cast<size_t>(first - free_run.result.tokens.begin()) + 1);
  EXPECT_EQ(r.log.done.reason, "eos");
}

TEST(Session, BadPromptsAreRefused) {
  auto l = Ladder::open(runtime_ladder().with_maps);
  FunctionBudget b([](const BudgetQuery&) { return kInf; });
  EventLog log;
  Session s(*l, b, log, SessionOptions{});
  EXPECT_THROW(s.run(std::vector<int32_t>{}), Error);
  try {
    s.run(std::vector<int32_t>{1, 2, 400});
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(
                  "prompt token id 400 is outside the ladder's vocabulary [0, 400)"),
              std::string::npos)
        << e.what();
  }
}

// ---- memory: molt never holds sender and receiver weights together, reprefill does

TEST(Session, MoltNeverHoldsBothRungsWeights) {
  if (!has_maps()) GTEST_SKIP() << runtime_ladder().maps_note;
#if defined(__SANITIZE_THREAD__)
  // ThreadSanitizer's shadow memory moves the resident set by more than a rung.
  GTEST_SKIP() << "RSS is not the program's own under ThreadSanitizer";
#endif
  if (!reset_peak_rss()) GTEST_SKIP() << "VmHWM cannot be reset here";
  if (test::measured_in_a_child_without_asan_quarantine()) return;
  auto l = Ladder::open(runtime_ladder().with_maps);
  auto budget = [](const BudgetQuery& q, const Ladder& ld) {
    return q.step < 6 ? kInf : footprint_mib(ld, 1, capacity());
  };
  SessionOptions o;
  o.measure_rss = true;
  const double w_l = l->rung(0).footprint().weight_bytes / kMiB;
  for (Policy p : {Policy::kMolt, Policy::kReleaseReprefill, Policy::kReprefill}) {
    Outcome r = run(*l, p, budget, o);
    const double f_m = l->rung(1).footprint().total(capacity()) / kMiB;  // as the session shaped it
    ASSERT_EQ(r.log.migrations.size(), 1u);
    const MigrationEvent& m = r.log.migrations[0];
    std::printf(
        "%-17s l → m: accounted peak %.2f MiB, measured RSS peak over the session base %.2f MiB "
        "(receiver %.2f MiB, sender weights %.2f MiB)\n",
        m.policy.c_str(), m.peak_mib, m.rss_peak_mib, f_m, w_l);
    if (p == Policy::kReprefill) {
      EXPECT_GT(m.rss_peak_mib, f_m + 0.5 * w_l);  // both rungs' weights were resident
    } else {
      // never co-resident (ASan's shadow of both rungs' weights may come on top)
      EXPECT_LT(m.rss_peak_mib, f_m + 0.5 * w_l + test::kAsanShadowShare * (f_m + w_l));
    }
  }
}

}  // namespace
}  // namespace molt

namespace molt {
namespace {

// ---- the bundled tiny ladder (models/tiny-ladder), when it is there: every route it lists
// (every ordered pair of rungs while it lists none), every migrating policy, first / middle /
// last token.

class TinyLadder : public ::testing::TestWithParam<std::tuple<Policy, int64_t>> {};

TEST_P(TinyLadder, ForcedMigrationsOnEveryRoute) {
  const std::filesystem::path manifest =
      std::filesystem::path(MOLT_SOURCE_DIR) / "models/tiny-ladder/ladder.json";
  if (!std::filesystem::exists(manifest))
    GTEST_SKIP() << manifest << " is absent (make tiny-ladder)";
  const auto [policy, k] = GetParam();
  set_num_threads(1);
  auto l = Ladder::open(manifest);
  if (l->size() < 2) GTEST_SKIP() << "the tiny ladder has one rung so far";
  std::vector<std::pair<int, int>> routes;
  for (const ManifestRoute& r : l->manifest().routes)
    routes.push_back({l->index(r.from), l->index(r.to)});
  if (routes.empty()) {
    for (int a = 0; a < l->size(); ++a) {
      for (int b = 0; b < l->size(); ++b) {
        if (a != b) routes.push_back({a, b});
      }
    }
  }
  if (test::under_emulation()) {
    // Under qemu (emulated floats) the cycle of routes from each rung to the next in ladder
    // order (l → l-int8 → m → s → l): every rung once as sender and once as receiver.
    std::vector<std::pair<int, int>> cycle;
    for (int a = 0; a < l->size(); ++a) {
      const auto next = std::find_if(routes.begin(), routes.end(), [&](const auto& r) {
        return r.first == a && r.second == (a + 1) % l->size();
      });
      if (next != routes.end()) cycle.push_back(*next);
    }
    if (!cycle.empty()) routes = cycle;
  }
  const std::vector<int32_t> prompt =
      l->tokenizer()->encode("initrd provides the capability to load a RAM disk.");
  std::vector<std::unique_ptr<Model>> models;
  for (int i = 0; i < l->size(); ++i) models.push_back(Model::load(l->rung(i).path()));
  const int64_t vocab = l->vocab_size();
  for (const auto& [from, to] : routes) {
    SCOPED_TRACE(l->rung(from).name() + " → " + l->rung(to).name());
    SessionOptions o;
    o.policy = policy;
    o.max_tokens = kTokens;
    o.stop_at_eos = false;
    o.up_after = 1;
    o.up_margin = 0;
    const int64_t cap = static_cast<int64_t>(prompt.size()) + kTokens;
    // A budget on which rung r is the largest that fits: at least its footprint, below that
    // of every rung ranked above it (rungs close in size, like l-int8 and m, leave a narrow
    // window).
    auto level = [&](int r) {
      if (r == 0) return kInf;
      const double need = footprint_mib(*l, r, cap);
      double above = kInf;
      for (int q = 0; q < r; ++q) above = std::min(above, footprint_mib(*l, q, cap));
      return std::min(need * (r == to ? 1.05 : 1.0), need + 0.5 * (above - need));
    };
    auto reachable = [&](int r) {
      for (int q = 0; q < r; ++q) {
        if (footprint_mib(*l, q, cap) <= footprint_mib(*l, r, cap)) return false;
      }
      return true;
    };
    if (!reachable(from) || !reachable(to)) continue;  // a smaller rung ranked above it
    FunctionBudget budget(
        [&](const BudgetQuery& q) { return q.step < k ? level(from) : level(to); });
    EventLog log;
    const SessionResult r = Session(*l, budget, log, o).run(prompt);
    ASSERT_EQ(r.tokens.size(), static_cast<size_t>(kTokens));
    ASSERT_EQ(log.migrations.size(), 1u);
    EXPECT_EQ(log.migrations[0].at_token, k);
    for (size_t i = 0; i < log.tokens.size(); ++i) {
      EXPECT_EQ(log.tokens[i].index, static_cast<int64_t>(i));
      EXPECT_EQ(log.tokens[i].rung, l->rung(static_cast<int64_t>(i) < k ? from : to).name());
    }
    // Where the text was re-read, every token is its rung's native greedy choice.
    if (log.migrations[0].policy == "reprefill" ||
        log.migrations[0].policy == "release-reprefill") {
      std::vector<int32_t> prefix = prompt;
      for (size_t i = 0; i < r.tokens.size(); ++i) {
        const Model& m = *models[static_cast<size_t>(l->index(r.rungs[i]))];
        KVCache c = m.new_cache(static_cast<int64_t>(prefix.size()));
        const std::vector<float> logits = m.prefill(prefix, c);
        const auto best = std::max_element(logits.begin(), logits.begin() + vocab);
        if (l->rung(l->index(r.rungs[i])).precision() == "int8") {
          // Quantised decode rounds activations to int8 (prefill does not): near-ties may
          // break either way, so the token need only be within a hair of the best.
          EXPECT_GE(logits[static_cast<size_t>(r.tokens[i])], *best - 0.05f) << i;
        } else {
          EXPECT_EQ(r.tokens[i], best - logits.begin()) << i;
        }
        prefix.push_back(r.tokens[i]);
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(EveryPolicyAndPosition, TinyLadder,
                         ::testing::Combine(::testing::ValuesIn(kMigrating),
                                            ::testing::Values(int64_t{1}, kTokens / 2,
                                                              kTokens - 1)));

}  // namespace
}  // namespace molt
