// The steppable generation: interleaved generations share one mapping of a rung and decode
// exactly what each decodes alone; cancel, resume from a cache, never blocking while parked,
// shedding past the capacity.
#include "molt/runtime/generation.h"

#include <gtest/gtest.h>

#include <limits>

#include "molt/common/error.h"
#include "runtime_fixture.h"

namespace molt {
namespace {

using test::footprint_mib;
using test::runtime_ladder;
constexpr double kInf = std::numeric_limits<double>::infinity();

SessionOptions greedy(int64_t max_tokens) {
  SessionOptions o;
  o.max_tokens = max_tokens;
  o.stop_at_eos = false;
  return o;
}

std::vector<int32_t> run_alone(Ladder& l, BudgetSource* b, const std::vector<int32_t>& prompt,
                               const SessionOptions& o) {
  Generation g(l, b, prompt, o);
  while (!g.finished()) g.step();
  l.release_unused();
  return {g.answer().begin(), g.answer().end()};
}

TEST(Generation, InterleavedGenerationsShareOneRungAndMatchEachAlone) {
  auto l = Ladder::open(runtime_ladder().with_maps);
  const auto pa = test::test_prompt(20), pb = test::test_prompt(13);
  const SessionOptions o = greedy(12);
  const auto alone_a = run_alone(*l, nullptr, pa, o), alone_b = run_alone(*l, nullptr, pb, o);

  Generation a(*l, nullptr, pa, o), b(*l, nullptr, pb, o);
  while (!a.finished() || !b.finished()) {
    a.step();
    b.step();
    if (!a.finished() && !b.finished()) {
      // One mapping of the top rung, held and used by both.
      EXPECT_EQ(l->holders(0), 2);
      EXPECT_EQ(l->users(0), 2);
      EXPECT_EQ(l->resident_bytes(), l->rung(0).resident_bytes());
      EXPECT_EQ(l->rung(1).state(), RungState::kReleased);
    }
  }
  EXPECT_EQ(std::vector<int32_t>(a.answer().begin(), a.answer().end()), alone_a);
  EXPECT_EQ(std::vector<int32_t>(b.answer().begin(), b.answer().end()), alone_b);
  // Ending a generation releases nothing: that is the owner's call.
  EXPECT_EQ(l->holders(0), 0);
  EXPECT_EQ(l->rung(0).state(), RungState::kLoaded);
  EXPECT_EQ(l->release_unused(), 1);
  EXPECT_EQ(l->resident_bytes(), 0u);
}

TEST(Generation, SteppedTogetherTheyDecodeInOnePassWithTheSameTokens) {
  auto l = Ladder::open(runtime_ladder().with_maps);
  const std::vector<std::vector<int32_t>> prompts = {test::test_prompt(20), test::test_prompt(13),
                                                     test::test_prompt(7)};
  SessionOptions o = greedy(10);
  o.up_after = int64_t{1} << 40;  // no budget: the forced one stays on m
  std::vector<std::vector<int32_t>> alone;
  for (const auto& p : prompts) alone.push_back(run_alone(*l, nullptr, p, o));
  // The third moves to m mid-answer (forced): the other two keep decoding together on l.
  std::vector<std::unique_ptr<Generation>> gens;
  for (const auto& p : prompts) gens.push_back(std::make_unique<Generation>(*l, nullptr, p, o));
  std::vector<Generation*> ptrs = {gens[0].get(), gens[1].get(), gens[2].get()};
  int rounds = 0;
  while (!gens[0]->finished() || !gens[1]->finished() || !gens[2]->finished()) {
    if (++rounds == 5) gens[2]->force_migration(1);
    const std::vector<Step> steps = Generation::step_together(ptrs);
    ASSERT_EQ(steps.size(), 3u);
  }
  EXPECT_EQ(std::vector<int32_t>(gens[0]->answer().begin(), gens[0]->answer().end()), alone[0]);
  EXPECT_EQ(std::vector<int32_t>(gens[1]->answer().begin(), gens[1]->answer().end()), alone[1]);
  EXPECT_EQ(gens[2]->answer_rungs().back(), "m");
  EXPECT_EQ(gens[2]->tokens(), 10);
}

TEST(Generation, AMigrationLeavesASharedSenderResident) {
  if (!runtime_ladder().maps_note.empty()) GTEST_SKIP() << runtime_ladder().maps_note;
  auto l = Ladder::open(runtime_ladder().with_maps);
  const auto pa = test::test_prompt(20), pb = test::test_prompt(17);
  SessionOptions o = greedy(12);
  const int64_t cap = static_cast<int64_t>(pa.size()) + o.max_tokens;
  // a moves l → m at token 4 (molt, through the map); b stays on l throughout.
  FunctionBudget cut(
      [&](const BudgetQuery& q) { return q.step < 5 ? kInf : footprint_mib(*l, 1, cap) * 1.05; });
  const auto alone_a = run_alone(*l, &cut, pa, o), alone_b = run_alone(*l, nullptr, pb, o);

  FunctionBudget cut2(
      [&](const BudgetQuery& q) { return q.step < 5 ? kInf : footprint_mib(*l, 1, cap) * 1.05; });
  Generation a(*l, &cut2, pa, o), b(*l, nullptr, pb, o);
  while (!a.finished() || !b.finished()) {
    const Step s = a.step();
    if (s.migration) {
      EXPECT_EQ(s.migration->policy, "molt");
      EXPECT_EQ(l->rung(0).state(), RungState::kLoaded);  // b still decodes there
    }
    b.step();
  }
  ASSERT_EQ(a.migrations().size(), 1u);
  EXPECT_EQ(std::vector<int32_t>(a.answer().begin(), a.answer().end()), alone_a);
  EXPECT_EQ(std::vector<int32_t>(b.answer().begin(), b.answer().end()), alone_b);
}

TEST(Generation, CancelKeepsTheAnswerSoFar) {
  auto l = Ladder::open(runtime_ladder().with_maps);
  Generation g(*l, nullptr, test::test_prompt(), greedy(16));
  for (int i = 0; i < 5; ++i) EXPECT_EQ(g.step().kind, StepKind::kToken);
  g.cancel();
  const Step s = g.step();
  EXPECT_EQ(s.kind, StepKind::kDone);
  ASSERT_TRUE(s.done.has_value());
  EXPECT_EQ(s.done->reason, "cancelled");
  EXPECT_EQ(s.done->tokens, 5);
  EXPECT_FALSE(s.done->killed);
  EXPECT_TRUE(g.finished());
  EXPECT_EQ(g.step().kind, StepKind::kDone);
  EXPECT_EQ(l->holders(0), 0);
}

TEST(Generation, ParkedStepsReturnAtOnce) {
  auto l = Ladder::open(runtime_ladder().with_maps);
  int64_t calls = 0;
  FunctionBudget b([&](const BudgetQuery&) { return ++calls <= 4 ? 0.0 : kInf; });
  Generation g(*l, &b, test::test_prompt(), greedy(3));
  Step s = g.step();
  EXPECT_EQ(s.kind, StepKind::kWaiting);
  EXPECT_TRUE(s.park.has_value());
  EXPECT_TRUE(g.parked());
  for (int i = 0; i < 3; ++i) EXPECT_EQ(g.step().kind, StepKind::kWaiting);
  s = g.step();
  EXPECT_EQ(s.kind, StepKind::kToken);
  ASSERT_TRUE(s.resume.has_value());
  EXPECT_EQ(s.resume->rung, "l");
  EXPECT_EQ(s.resume->waited_steps, 4);
}

TEST(Generation, ResumesFromACallersCache) {
  auto l = Ladder::open(runtime_ladder().with_maps);
  const auto prompt = test::test_prompt();
  SessionOptions o = greedy(8);
  o.kv_dtype = KvDType::kF32;  // the caller's cache below (Model::new_cache's default type)
  const auto fresh = run_alone(*l, nullptr, prompt, o);
  // The cache holds the prompt but its last id, which the resumed generation decodes first.
  const Model& m = *runtime_ladder().models[1];
  KVCache c = m.new_cache(static_cast<int64_t>(prompt.size()) + o.max_tokens);
  m.forward(std::span<const int32_t>(prompt).first(prompt.size() - 1), c, {});
  // A budget that fits m and not l: it stays where it resumed.
  const int64_t cap = static_cast<int64_t>(prompt.size()) + o.max_tokens;
  FunctionBudget fits_m([&](const BudgetQuery&) { return footprint_mib(*l, 1, cap) * 1.05; });
  auto g = Generation::resume(*l, &fits_m, 1, std::move(c), prompt, o);
  while (!g->finished()) g->step();
  for (const std::string& r : g->answer_rungs()) EXPECT_EQ(r, "m");
  // m's native greedy continuation (the decode of the last prompt id instead of its prefill).
  std::vector<int32_t> prefix = prompt;
  for (int32_t t : g->answer()) {
    EXPECT_EQ(t, runtime_ladder().oracle(1, prefix));
    prefix.push_back(t);
  }
  EXPECT_NE(fresh.size(), 0u);
}

TEST(Generation, ShedsItsOldestContextWhenFull) {
  auto l = Ladder::open(runtime_ladder().with_maps);
  const auto prompt = test::test_prompt(20);
  SessionOptions o = greedy(24);
  o.capacity = 28;  // room for 8 of the 24 answer tokens
  {
    Generation g(*l, nullptr, prompt, o);
    EXPECT_THROW(
        {
          while (!g.finished()) g.step();
        },
        Error);
  }
  o.shed_sink = 4;
  o.shed_drop = 8;
  Generation g(*l, nullptr, prompt, o);
  while (!g.finished()) {
    g.step();
    EXPECT_LE(g.positions(), 28);
  }
  EXPECT_EQ(g.tokens(), 24);
  EXPECT_EQ(g.summary().reason, "max_tokens");
}

TEST(Generation, BadArgumentsAreRefused) {
  auto l = Ladder::open(runtime_ladder().with_maps);
  SessionOptions o;
  EXPECT_THROW(Generation(*l, nullptr, {}, o), Error);
  const std::vector<int32_t> bad = {1, static_cast<int32_t>(test::kVocab)};
  EXPECT_THROW(Generation(*l, nullptr, bad, o), Error);
  o.max_tokens = 0;
  EXPECT_THROW(Generation(*l, nullptr, test::test_prompt(), o), Error);
  Generation g(*l, nullptr, test::test_prompt(), SessionOptions{});
  EXPECT_THROW(g.force_migration(7), Error);
}

}  // namespace
}  // namespace molt
