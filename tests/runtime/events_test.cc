// Event JSON, the migration line, policy names, FLOPs and KL helpers.
#include "molt/runtime/events.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "molt/common/error.h"
#include "molt/runtime/metrics.h"
#include "molt/runtime/policy.h"
#include "molt/runtime/session.h"
#include "molt/transfer/eval.h"

namespace molt {
namespace {

TEST(Events, JsonCarriesTheEventNameAndTheDesignFields) {
  const auto t = to_json(TokenEvent{3, "hi", 42, "m"});
  EXPECT_EQ(t["event"], "token");
  EXPECT_EQ(t["index"], 3);
  EXPECT_EQ(t["text"], "hi");
  EXPECT_EQ(t["token_id"], 42);
  EXPECT_EQ(t["rung"], "m");
  MigrationEvent m;
  m.from = "l", m.to = "m", m.policy = "molt", m.ms = 12.3456, m.flops_saved = 0.79,
  m.pressure = 0.81;
  const auto j = to_json(m);
  for (const char* k : {"event", "from", "to", "policy", "ms", "flops_saved", "pressure"})
    EXPECT_TRUE(j.contains(k)) << k;
  EXPECT_EQ(j["event"], "migration");
  EXPECT_DOUBLE_EQ(j["ms"].get<double>(), 12.346);
  EXPECT_TRUE(j["seam_kl"].is_null());  // not measured
  EXPECT_EQ(describe(m), "⇆ l → m  (molt, 12 ms, 79% FLOPs saved, pressure 0.81)");
  EXPECT_EQ(to_json(BudgetEvent{64.5})["mib"], 64.5);
  DoneEvent d;
  d.tokens = 5, d.rungs_used = {"l", "m"}, d.migrations = 1, d.killed = false;
  const auto dj = to_json(d);
  EXPECT_EQ(dj["event"], "done");
  EXPECT_EQ(dj["rungs_used"], nlohmann::json({"l", "m"}));
  EXPECT_EQ(dj["killed"], false);
  EXPECT_EQ(to_json(ParkEvent{"s", 1, 2, ""})["event"], "park");
  EXPECT_EQ(to_json(ResumeEvent{"s", 3, 4})["event"], "resume");
  EXPECT_EQ(to_json(HealEvent{"s", 9, 30, 5, 1.0})["at_token"], 9);
}

TEST(Policies, NamesRoundTripAndUnknownOnesAreListed) {
  for (const std::string& n : policy_names()) EXPECT_EQ(policy_name(parse_policy(n)), n);
  try {
    parse_policy("yolo");
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("policy 'yolo' is not one of hold, small, reprefill, "
                                         "release-reprefill, molt, heal, auto"),
              std::string::npos)
        << e.what();
  }
}

TEST(Metrics, KlIsZeroForEqualDistributionsAndPositiveOtherwise) {
  const std::vector<float> a = {1, 2, 3, 4}, b = {4, 3, 2, 1};
  EXPECT_NEAR(kl_logits(a, a, 4), 0.0, 1e-12);
  EXPECT_GT(kl_logits(a, b, 4), 0.5);
  // Only the first `vocab` entries count (padded model rows are not tokens).
  const std::vector<float> c = {1, 2, 3, 4, 100};
  EXPECT_NEAR(kl_logits(a, c, 4), 0.0, 1e-12);
}

TEST(Metrics, PrefillFlopsMatchAHandCount) {
  // d = 8, 2 heads × 4 (q_dim 8), 1 KV head (kv_dim 4), ff 16, 2 layers, vocab 10, 3 tokens:
  // per token and layer 2·(8·8 + 2·8·4 + 8·8 + 3·8·16) = 2·576; attention 2·2·8·3·4 = 384;
  // the lm_head once (the last position's logits only): 2·8·10 = 160.
  ModelConfig c;
  c.hidden_size = 8, c.num_hidden_layers = 2, c.num_attention_heads = 2, c.num_key_value_heads = 1;
  c.head_dim = 4, c.intermediate_size = 16, c.vocab_size = 10;
  const FlopCount f = prefill_flop_count(c, 3);
  EXPECT_EQ(f.linear, 2.0 * 2 * 576 * 3);
  EXPECT_EQ(f.attention, 384.0);
  EXPECT_EQ(f.lm_head, 160.0);
  EXPECT_EQ(prefill_flops(c, 3), 6912.0 + 384 + 160);
}

TEST(Metrics, PrefillFlopsGrowWithContext) {
  ModelConfig c;
  c.hidden_size = 896, c.num_hidden_layers = 24, c.num_attention_heads = 14,
  c.num_key_value_heads = 2;
  c.head_dim = 64, c.intermediate_size = 4864, c.vocab_size = 151936;
  // ~2 × 0.36 G non-embedding parameters per token (Qwen2.5-0.5B).
  const double per_token = prefill_flops(c, 1001) - prefill_flops(c, 1000);
  EXPECT_GT(per_token, 2 * 0.35e9);
  EXPECT_LT(per_token, 2 * 0.40e9 + 2 * 24 * 896 * 2 * 1001 + 1);
  EXPECT_LT(prefill_flops(c, 256), prefill_flops(c, 2000));
}

}  // namespace
}  // namespace molt
