// Generations whose caches are f16 or int8: every migration policy carries or rebuilds the
// cache in that type, shedding works on it, a cache of another type is refused on resume, and
// the smaller cache lets a generation stay on a rung where an f32 cache would not fit.
#include <gtest/gtest.h>

#include <limits>

#include "molt/common/error.h"
#include "molt/runtime/generation.h"
#include "runtime_fixture.h"

namespace molt {
namespace {

using test::footprint_mib;
using test::runtime_ladder;
constexpr double kInf = std::numeric_limits<double>::infinity();

SessionOptions greedy(int64_t max_tokens, KvDType kv) {
  SessionOptions o;
  o.max_tokens = max_tokens;
  o.stop_at_eos = false;
  o.kv_dtype = kv;
  return o;
}

class KvDTypeGeneration : public ::testing::TestWithParam<KvDType> {};

// l → m at token 4 under each migrating policy, then a full cache sheds: the answer is whole,
// the cache keeps its type, and the seam's tokens are the receiver's own (every token is the
// greedy argmax of the logits the generation computed, so only its count is checked here).
TEST_P(KvDTypeGeneration, EveryPolicyMigratesAndShedsInTheCachesType) {
  if (!runtime_ladder().maps_note.empty()) GTEST_SKIP() << runtime_ladder().maps_note;
  const KvDType kv = GetParam();
  for (Policy p : {Policy::kMolt, Policy::kHeal, Policy::kReprefill, Policy::kReleaseReprefill,
                   Policy::kAuto}) {
    auto l = Ladder::open(runtime_ladder().with_maps);
    const auto prompt = test::test_prompt(20);
    SessionOptions o = greedy(24, kv);
    o.policy = p;
    o.heal_chunk = 8;
    o.capacity = 36;  // room for 16 answer tokens: the rest sheds
    o.shed_sink = 4;
    o.shed_drop = 8;
    FunctionBudget cut([&](const BudgetQuery& q) {
      return q.step < 5 ? kInf : footprint_mib(*l, 1, o.capacity, kv) * 1.05;
    });
    Generation g(*l, &cut, prompt, o);
    int checked = 0;
    while (!g.finished()) {
      g.step();
      if (g.cache() != nullptr) {
        EXPECT_EQ(g.cache()->kv_dtype(), kv) << policy_name(p);
        ++checked;
      }
      EXPECT_LE(g.positions(), o.capacity);
    }
    EXPECT_EQ(g.tokens(), 24) << policy_name(p);
    EXPECT_EQ(g.summary().reason, "max_tokens") << policy_name(p);
    ASSERT_EQ(g.migrations().size(), 1u) << policy_name(p);
    EXPECT_EQ(g.answer_rungs().back(), "m") << policy_name(p);
    EXPECT_GT(checked, 20) << policy_name(p);
  }
}

INSTANTIATE_TEST_SUITE_P(Types, KvDTypeGeneration, ::testing::Values(KvDType::kF16, KvDType::kInt8),
                         [](const auto& info) { return std::string(kv_dtype_name(info.param)); });

// A budget between the top rung's footprint with an f16 cache and with an f32 cache: f16 stays
// on l, f32 has to step down. A long capacity makes the cache the difference.
TEST(KvDTypeGeneration, AnF16CacheKeepsTheTopRungWhereF32DoesNot) {
  auto l = Ladder::open(runtime_ladder().with_maps);
  const auto prompt = test::test_prompt(20);
  const int64_t capacity = 4096;
  const double f32 = footprint_mib(*l, 0, capacity, KvDType::kF32),
               f16 = footprint_mib(*l, 0, capacity, KvDType::kF16);
  ASSERT_LT(f16, f32);
  FunctionBudget between([&](const BudgetQuery&) { return (f16 + f32) / 2; });
  for (KvDType kv : {KvDType::kF16, KvDType::kF32}) {
    SessionOptions o = greedy(6, kv);
    o.capacity = capacity;
    o.policy = Policy::kReleaseReprefill;
    Generation g(*l, &between, prompt, o);
    while (!g.finished()) g.step();
    EXPECT_EQ(g.tokens(), 6);
    for (const std::string& r : g.answer_rungs()) {
      EXPECT_EQ(r, kv == KvDType::kF16 ? "l" : "m") << kv_dtype_name(kv);
    }
  }
}

TEST(KvDTypeGeneration, ResumeRefusesACacheOfAnotherType) {
  auto l = Ladder::open(runtime_ladder().with_maps);
  const auto prompt = test::test_prompt();
  const Model& m = *runtime_ladder().models[0];
  KVCache c = m.new_cache(static_cast<int64_t>(prompt.size()) + 4, false, KvDType::kF16);
  m.forward(std::span<const int32_t>(prompt).first(prompt.size() - 1), c, {});
  try {
    Generation::resume(*l, nullptr, 0, std::move(c), prompt, greedy(4, KvDType::kF32));
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "resume: the cache's K and V are f16 but the options' kv_dtype is f32");
  }
}

}  // namespace
}  // namespace molt
