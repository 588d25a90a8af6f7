// What crosses a seam, checked against an independent application of the same pieces: after a
// molt migration the receiver's cache equals the route's map applied to the sender's cache (to
// f32 round-off) and the first token is the receiver's greedy choice on that cache; after heal
// completes, every token is the receiver's native one; a re-read is exact. The policy that ran
// is the one asked for. A map that wrote zeros, or a migration that kept the sender's cache,
// fails here.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "molt/runtime/generation.h"
#include "runtime_fixture.h"

namespace molt {
namespace {

using test::runtime_ladder;

struct Seam {
  explicit Seam(KVCache c) : sender(std::move(c)) {}
  std::vector<int32_t> tokens;  // the answer
  KVCache sender;               // the sender's cache just before the seam
  std::vector<int32_t> window;  // ids of the sender's cache + the pending one
  MigrationEvent migration;
  // The receiver's cache right after the seam, per layer (the carried positions only).
  std::vector<std::vector<float>> receiver_k, receiver_v;
  int64_t healed_at = -1;
};

// Runs `tokens` tokens from the fixture's prompt on the ladder's top rung `from`, forcing a
// migration to `to` before token k; records both sides of the seam.
Seam run_forced(Ladder& l, int from, int to, Policy policy, int64_t k, int64_t tokens) {
  SessionOptions o;
  o.policy = policy;
  o.max_tokens = tokens;
  o.stop_at_eos = false;
  o.auto_max_stall_ms = 0;        // auto never re-reads
  o.up_after = int64_t{1} << 40;  // no budget: stay where forced
  // The receiver's rows are compared with an f32 reference (other types: kv_dtype_test.cc).
  o.kv_dtype = KvDType::kF32;
  const std::vector<int32_t> prompt = test::test_prompt();
  Generation g(l, nullptr, prompt, o);
  if (from != 0) g.force_migration(from);
  for (int64_t i = 0; i < k; ++i) g.step();
  Seam s(g.cache()->copy());
  s.window.assign(g.history().begin(), g.history().end());
  g.force_migration(to);
  const Step st = g.step();
  EXPECT_TRUE(st.migration.has_value());
  if (st.migration) s.migration = *st.migration;
  const KVCache& c = *g.cache();
  for (int64_t layer = 0; layer < c.geometry().n_layers; ++layer) {
    const size_t rows = static_cast<size_t>(s.sender.size() * c.geometry().kv_dim());
    s.receiver_k.emplace_back(c.k(layer).begin(), c.k(layer).begin() + rows);
    s.receiver_v.emplace_back(c.v(layer).begin(), c.v(layer).begin() + rows);
  }
  while (!g.finished()) {
    const Step x = g.step();
    if (x.heal) s.healed_at = x.heal->at_token;
  }
  s.tokens.assign(g.answer().begin(), g.answer().end());
  l.release_unused();
  return s;
}

double max_rel_diff(std::span<const float> a, std::span<const float> b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num = std::max(num, static_cast<double>(std::fabs(a[i] - b[i])));
    den = std::max(den, static_cast<double>(std::fabs(b[i])));
  }
  return den > 0 ? num / den : num;
}

int32_t greedy(std::span<const float> logits, int64_t vocab) {
  return static_cast<int32_t>(std::max_element(logits.begin(), logits.begin() + vocab) -
                              logits.begin());
}

class SeamRoutes : public ::testing::TestWithParam<std::tuple<std::pair<int, int>, Policy>> {};

TEST_P(SeamRoutes, TheReceiverGetsTheMappedCacheOrItsOwn) {
  if (!runtime_ladder().maps_note.empty()) GTEST_SKIP() << runtime_ladder().maps_note;
  const auto [route, policy] = GetParam();
  const auto [from, to] = route;
  auto l = Ladder::open(runtime_ladder().with_maps);
  constexpr int64_t k = 5, kTokens = 14;
  const Seam s = run_forced(*l, from, to, policy, k, kTokens);
  ASSERT_EQ(s.tokens.size(), static_cast<size_t>(kTokens));
  EXPECT_EQ(s.migration.policy, policy_name(policy)) << s.migration.note;
  EXPECT_EQ(s.migration.from, l->rung(from).name());
  EXPECT_EQ(s.migration.to, l->rung(to).name());

  const Model &sender = *runtime_ladder().models[static_cast<size_t>(from)],
              &receiver = *runtime_ladder().models[static_cast<size_t>(to)];
  const std::span<const int32_t> context(s.window.data(), s.window.size() - 1);
  const int64_t n = static_cast<int64_t>(context.size()), vocab = test::kVocab;
  ASSERT_EQ(s.sender.size(), n);
  // The reference receiver cache: what this policy says the receiver should hold.
  KVCache expect = receiver.new_cache(n + kTokens);
  if (policy == Policy::kMolt || policy == Policy::kHeal) {
    auto map = CacheMap::load(l->route(from, to)->maps, sender, receiver);
    map->apply(sender, s.sender, receiver, context, TransferOptions{}, expect);
  } else {
    receiver.forward(context, expect, {});
  }
  for (int64_t layer = 0; layer < expect.geometry().n_layers; ++layer) {
    const size_t rows = static_cast<size_t>(n * expect.geometry().kv_dim());
    EXPECT_LE(max_rel_diff(s.receiver_k[layer], expect.k(layer).first(rows)), 1e-6) << layer;
    EXPECT_LE(max_rel_diff(s.receiver_v[layer], expect.v(layer).first(rows)), 1e-6) << layer;
  }
  // The first token after the seam is the receiver's greedy choice on that cache.
  std::vector<float> logits(static_cast<size_t>(receiver.config().vocab_size));
  receiver.forward(std::span<const int32_t>(&s.window.back(), 1), expect, {}, logits);
  EXPECT_EQ(s.tokens[k], greedy(logits, vocab));

  // Re-read or healed: from then on, every token is the receiver's native greedy one.
  int64_t native_from = kTokens;
  if (policy == Policy::kReprefill || policy == Policy::kReleaseReprefill) native_from = k;
  if (policy == Policy::kHeal) {
    ASSERT_GE(s.healed_at, k + 1) << "heal never completed";
    native_from = s.healed_at;
  }
  std::vector<int32_t> prefix = test::test_prompt();
  for (int64_t i = 0; i < kTokens; ++i) {
    if (i >= native_from) {
      EXPECT_EQ(s.tokens[i], runtime_ladder().oracle(to, prefix)) << i;
    }
    prefix.push_back(s.tokens[i]);
  }
}

std::string seam_name(const ::testing::TestParamInfo<SeamRoutes::ParamType>& info) {
  const auto [route, policy] = info.param;
  const auto [from, to] = route;
  std::string p = policy_name(policy);
  std::replace(p.begin(), p.end(), '-', '_');
  const char* names[] = {"l", "m", "s"};
  return std::string(names[from]) + "_to_" + names[to] + "_" + p;
}

INSTANTIATE_TEST_SUITE_P(
    EveryRouteAndPolicy, SeamRoutes,
    ::testing::Combine(::testing::Values(std::pair{0, 1}, std::pair{1, 2}, std::pair{0, 2},
                                         std::pair{1, 0}, std::pair{2, 1}, std::pair{2, 0}),
                       ::testing::Values(Policy::kMolt, Policy::kHeal, Policy::kReprefill,
                                         Policy::kReleaseReprefill)),
    [](const auto& info) { return seam_name(info); });

}  // namespace
}  // namespace molt
