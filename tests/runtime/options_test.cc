// SessionOptions: JSON round trip of every field, defaults, range checks naming the field,
// unknown and wrongly typed keys refused.
#include "molt/runtime/options.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "molt/common/error.h"

namespace molt {
namespace {

std::string error_of(const std::string& json) {
  try {
    options_from_json(nlohmann::json::parse(json), {}, "request");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Options, DefaultsAreValidAndRoundTrip) {
  const SessionOptions d;
  d.validate();
  const nlohmann::json j = to_json(d);
  EXPECT_EQ(j["policy"], "molt");
  EXPECT_EQ(j["max_tokens"], 64);
  EXPECT_EQ(j["sampling"]["top_p"], 1.0);
  EXPECT_EQ(j["transfer"]["anchors"], 0);
  EXPECT_EQ(to_json(options_from_json(j)), j);
  EXPECT_EQ(to_json(options_from_json(nlohmann::json::object())), j);
}

TEST(Options, EveryFieldRoundTrips) {
  SessionOptions o;
  o.policy = Policy::kHeal;
  o.max_tokens = 7;
  o.sampling.temperature = 0.5f;
  o.sampling.top_k = 40;
  o.sampling.top_p = 0.75f;
  o.sampling.repetition_penalty = 1.25f;
  o.sampling.seed = 99;
  o.stop_at_eos = false;
  o.stop_ids = {3, 5};
  o.grace_steps = 4;
  o.up_margin = 0.25;
  o.up_after = 1;
  o.prefill_chunk = 16;
  o.heal_chunk = 8;
  o.poll_ms = 5;
  o.max_parked_steps = 10;
  o.capacity = 300;
  o.kv_dtype = KvDType::kInt8;
  o.shed_sink = 4;
  o.shed_drop = 32;
  o.transfer.anchors = 2;
  o.transfer.recompute_layers = 1;
  o.auto_reprefill_below = 10;
  o.auto_max_stall_ms = 12.5;
  o.auto_min_retention = 0.75;
  o.measure_seams = o.measure_rss = true;
  const nlohmann::json j = to_json(o);
  const SessionOptions back = options_from_json(j);
  EXPECT_EQ(to_json(back), j);
  EXPECT_EQ(back.policy, Policy::kHeal);
  EXPECT_EQ(back.stop_ids, (std::vector<int32_t>{3, 5}));
  EXPECT_EQ(back.sampling.seed, 99u);
  EXPECT_EQ(back.shed_sink, 4);
  EXPECT_EQ(back.kv_dtype, KvDType::kInt8);
  EXPECT_EQ(j.at("kv_dtype"), "int8");
  // Every key JSON holds is a field the reader knows, and no field is left out.
  EXPECT_EQ(j.size(), 22u);
}

TEST(Options, OverridesOnlyWhatIsNamed) {
  SessionOptions base;
  base.max_tokens = 9;
  const SessionOptions o = options_from_json(
      nlohmann::json::parse(R"({"policy": "auto", "sampling": {"temperature": 0.7}})"), base);
  EXPECT_EQ(o.policy, Policy::kAuto);
  EXPECT_EQ(o.max_tokens, 9);
  EXPECT_FLOAT_EQ(o.sampling.temperature, 0.7f);
  EXPECT_FLOAT_EQ(o.sampling.top_p, 1.0f);
}

TEST(Options, ErrorsNameTheField) {
  EXPECT_NE(error_of(R"({"max_tokens": 0})").find("request: max_tokens: must be > 0 (got 0)"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"prefill_chunk": -1})").find("prefill_chunk: must be > 0"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"up_margin": -0.5})").find("up_margin: must be >= 0"), std::string::npos);
  EXPECT_NE(error_of(R"({"sampling": {"top_p": 0}})").find("sampling.top_p: must be in (0, 1]"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"sampling": {"top_p": 1.5}})").find("sampling.top_p"), std::string::npos);
  EXPECT_NE(error_of(R"({"sampling": {"temperature": -1}})").find("sampling.temperature"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"policy": "yolo"})").find("request.policy: policy 'yolo' is not one of"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"policy": 3})").find("request.policy: expected a policy name"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"max_tokens": "many"})").find("request.max_tokens: expected an integer"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"max_tokens": 1.5})").find("request.max_tokens: expected an integer"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"sampling": {"top_k": 1e12}})").find("request.sampling.top_k"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"sampling": {"seed": -1}})").find("request.sampling.seed"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"stop_at_eos": 1})").find("expected true or false"), std::string::npos);
  EXPECT_NE(error_of(R"({"kv_dtype": "q4"})")
                .find("request.kv_dtype: unknown KV cache type 'q4' (known: f32, f16, int8)"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"kv_dtype": 16})").find("request.kv_dtype: expected f32, f16 or int8"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"stop_ids": [1, "x"]})").find("request.stop_ids[1]"), std::string::npos);
  EXPECT_NE(error_of(R"({"max_tokns": 3})").find("request: unknown key 'max_tokns' (known: policy"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"sampling": {"temp": 1}})").find("request.sampling: unknown key 'temp'"),
            std::string::npos);
  EXPECT_NE(error_of(R"([1, 2])").find("request: expected a JSON object"), std::string::npos);
  SessionOptions o;
  o.heal_chunk = 0;
  EXPECT_THROW(o.validate(), Error);
}

}  // namespace
}  // namespace molt
