// config.json / generation_config.json: real Qwen2.5 files, round trips, and bad fields.
#include "molt/formats/hf_config.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "molt/common/error.h"
#include "test_util.h"

namespace molt {
namespace {

using nlohmann::json;
using test::TempDir;

struct RealRow {
  const char* size;
  int64_t hidden, layers, heads, kv_heads, head_dim, intermediate;
};
// The table of ../shared/data/qwen2.5/README.md.
const RealRow kRows[] = {{"0.5B", 896, 24, 14, 2, 64, 4864},
                         {"1.5B", 1536, 28, 12, 2, 128, 8960},
                         {"3B", 2048, 36, 16, 2, 128, 11008}};

std::filesystem::path real_config(const std::filesystem::path& dir, const char* size) {
  return dir / "configs" / fmt::format("Qwen2.5-{}-Instruct.json", size);
}

TEST(HfConfig, RealQwen25ConfigsParse) {
  MOLT_REQUIRE_SHARED(dir);
  for (const auto& r : kRows) {
    SCOPED_TRACE(r.size);
    auto path = real_config(dir, r.size);
    ModelConfig c = parse_model_config(read_json_file(path), path.string());
    EXPECT_EQ(c.architecture, "Qwen2ForCausalLM");
    EXPECT_EQ(c.hidden_size, r.hidden);
    EXPECT_EQ(c.num_hidden_layers, r.layers);
    EXPECT_EQ(c.num_attention_heads, r.heads);
    EXPECT_EQ(c.num_key_value_heads, r.kv_heads);
    EXPECT_EQ(c.head_dim, r.head_dim);
    EXPECT_EQ(c.head_dim, c.hidden_size / c.num_attention_heads);
    EXPECT_EQ(c.intermediate_size, r.intermediate);
    EXPECT_TRUE(c.tie_word_embeddings);
    EXPECT_EQ(c.rope_theta, 1e6);
    EXPECT_EQ(c.rms_norm_eps, 1e-6);
    EXPECT_EQ(c.vocab_size, 151936);
    EXPECT_EQ(c.max_position_embeddings, 32768);
    EXPECT_TRUE(c.attention_bias);
    EXPECT_EQ(c.bos_token_id, 151643);
    EXPECT_EQ(c.eos_token_ids, std::vector<int64_t>{151645});
    EXPECT_FALSE(c.quantization.has_value());
    EXPECT_EQ(c.q_dim(), r.hidden);
    EXPECT_EQ(c.kv_dim(), r.kv_heads * r.head_dim);
  }
}

TEST(HfConfig, WrittenConfigEqualsRealFile) {
  MOLT_REQUIRE_SHARED(dir);
  for (const auto& r : kRows) {
    SCOPED_TRACE(r.size);
    json real = read_json_file(real_config(dir, r.size));
    // Parse → write gives back the file, field for field (and no extra fields).
    EXPECT_EQ(model_config_to_json(parse_model_config(real, "real")), real);
    // The built-in geometry writes the same file.
    EXPECT_EQ(model_config_to_json(qwen2_5_config(r.size)), real);
  }
}

TEST(HfConfig, BuiltInGeometriesWithoutSharedData) {
  // Runs everywhere: the fields the README table fixes, through a write → parse round trip.
  for (const auto& r : kRows) {
    SCOPED_TRACE(r.size);
    ModelConfig c = parse_model_config(model_config_to_json(qwen2_5_config(r.size)), "built-in");
    EXPECT_EQ(c.hidden_size, r.hidden);
    EXPECT_EQ(c.num_hidden_layers, r.layers);
    EXPECT_EQ(c.num_attention_heads, r.heads);
    EXPECT_EQ(c.num_key_value_heads, r.kv_heads);
    EXPECT_EQ(c.head_dim, r.head_dim);
    EXPECT_EQ(c.intermediate_size, r.intermediate);
  }
  EXPECT_THROW(qwen2_5_config("7B"), Error);
}

void expect_equal(const ModelConfig& a, const ModelConfig& b) {
  EXPECT_EQ(a.architecture, b.architecture);
  EXPECT_EQ(a.model_type, b.model_type);
  EXPECT_EQ(a.hidden_size, b.hidden_size);
  EXPECT_EQ(a.num_hidden_layers, b.num_hidden_layers);
  EXPECT_EQ(a.num_attention_heads, b.num_attention_heads);
  EXPECT_EQ(a.num_key_value_heads, b.num_key_value_heads);
  EXPECT_EQ(a.head_dim, b.head_dim);
  EXPECT_EQ(a.intermediate_size, b.intermediate_size);
  EXPECT_EQ(a.vocab_size, b.vocab_size);
  EXPECT_EQ(a.max_position_embeddings, b.max_position_embeddings);
  EXPECT_EQ(a.rope_theta, b.rope_theta);
  EXPECT_EQ(a.rms_norm_eps, b.rms_norm_eps);
  EXPECT_EQ(a.tie_word_embeddings, b.tie_word_embeddings);
  EXPECT_EQ(a.attention_bias, b.attention_bias);
  EXPECT_EQ(a.torch_dtype, b.torch_dtype);
  EXPECT_EQ(a.bos_token_id, b.bos_token_id);
  EXPECT_EQ(a.eos_token_ids, b.eos_token_ids);
  ASSERT_EQ(a.quantization.has_value(), b.quantization.has_value());
  if (a.quantization) {
    EXPECT_EQ(a.quantization->bits, b.quantization->bits);
    EXPECT_EQ(a.quantization->group_size, b.quantization->group_size);
  }
  EXPECT_EQ(a.hidden_act, b.hidden_act);
  EXPECT_EQ(a.attention_dropout, b.attention_dropout);
  EXPECT_EQ(a.initializer_range, b.initializer_range);
  EXPECT_EQ(a.max_window_layers, b.max_window_layers);
  EXPECT_EQ(a.sliding_window, b.sliding_window);
  EXPECT_EQ(a.use_sliding_window, b.use_sliding_window);
  EXPECT_EQ(a.use_cache, b.use_cache);
  EXPECT_EQ(a.transformers_version, b.transformers_version);
}

// A tiny ladder rung: explicit head_dim, no biases, untied, 4-bit, two eos ids.
ModelConfig tiny() {
  ModelConfig c;
  c.hidden_size = 96, c.num_hidden_layers = 3, c.num_attention_heads = 5;
  c.num_key_value_heads = 1, c.head_dim = 16, c.intermediate_size = 200, c.vocab_size = 300;
  c.max_position_embeddings = 1024, c.rope_theta = 5e5, c.rms_norm_eps = 1e-5;
  c.attention_bias = false, c.torch_dtype = "float32", c.bos_token_id.reset();
  c.eos_token_ids = {7, 9}, c.quantization = QuantSpec{64, 4}, c.max_window_layers = 3;
  return c;
}

TEST(HfConfig, WriteParseRoundTrip) {
  for (const ModelConfig& c : {tiny(), qwen2_5_config("0.5B")}) {
    json j = model_config_to_json(c);
    expect_equal(parse_model_config(json::parse(j.dump()), "rt"), c);
  }
  json j = model_config_to_json(tiny());
  EXPECT_EQ(j["head_dim"], 16);
  EXPECT_EQ(j["attention_bias"], false);
  EXPECT_EQ(j["quantization"], json({{"group_size", 64}, {"bits", 4}}));
  EXPECT_EQ(j["eos_token_id"], json({7, 9}));
  EXPECT_FALSE(j.contains("bos_token_id"));
}

TEST(HfConfig, LoadPrefersGenerationConfigEos) {
  TempDir tmp;
  ModelConfig c = qwen2_5_config("0.5B");
  test::write_file(tmp / "config.json", model_config_to_json(c).dump(2));
  EXPECT_EQ(load_model_config(tmp.path()).eos_token_ids, std::vector<int64_t>{151645});
  test::write_file(tmp / "generation_config.json",
                   R"({"bos_token_id": 151643, "eos_token_id": [151645, 151643], "top_k": 20})");
  EXPECT_EQ(load_model_config(tmp.path()).eos_token_ids, (std::vector<int64_t>{151645, 151643}));
  test::write_file(tmp / "generation_config.json", R"({"eos_token_id": 151643})");
  EXPECT_EQ(load_model_config(tmp.path()).eos_token_ids, std::vector<int64_t>{151643});
  test::write_file(tmp / "generation_config.json", R"({"do_sample": true})");
  EXPECT_EQ(load_model_config(tmp.path()).eos_token_ids, std::vector<int64_t>{151645});

  // The generation config we write loads back to the same ids.
  c.eos_token_ids = {151645, 151643};
  test::write_file(tmp / "generation_config.json", generation_config_to_json(c).dump());
  expect_equal(load_model_config(tmp.path()), c);
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

// Each bad config must fail with a message naming the file and the field.
void expect_bad(const json& j, const std::string& field, const std::string& also = "") {
  std::string e = error_of([&] { parse_model_config(j, "dir/config.json"); });
  EXPECT_NE(e.find("dir/config.json"), std::string::npos) << e;
  EXPECT_NE(e.find(field), std::string::npos) << field << " not in: " << e;
  if (!also.empty()) {
    EXPECT_NE(e.find(also), std::string::npos) << also << " not in: " << e;
  }
}

json good() {
  return model_config_to_json(qwen2_5_config("0.5B"));
}
json with(const char* key, json v) {
  json j = good();
  j[key] = std::move(v);
  return j;
}
json without(const char* key) {
  json j = good();
  j.erase(key);
  return j;
}

TEST(HfConfigErrors, MissingRequiredFields) {
  for (const char* k : {"hidden_size", "num_hidden_layers", "num_attention_heads",
                        "num_key_value_heads", "intermediate_size", "vocab_size"}) {
    expect_bad(without(k), k, "missing");
  }
}

TEST(HfConfigErrors, IllTypedFields) {
  expect_bad(with("hidden_size", "896"), "hidden_size", "expected an integer");
  expect_bad(with("hidden_size", 896.5), "hidden_size", "expected an integer");
  expect_bad(with("num_key_value_heads", json::array()), "num_key_value_heads");
  expect_bad(with("vocab_size", true), "vocab_size");
  expect_bad(with("rope_theta", "1e6"), "rope_theta", "expected a number");
  expect_bad(with("rms_norm_eps", json::object()), "rms_norm_eps", "expected a number");
  expect_bad(with("tie_word_embeddings", 1), "tie_word_embeddings", "true or false");
  expect_bad(with("attention_bias", "yes"), "attention_bias");
  expect_bad(with("torch_dtype", 16), "torch_dtype", "expected a string");
  expect_bad(with("max_position_embeddings", "32k"), "max_position_embeddings");
  expect_bad(with("architectures", "Qwen2ForCausalLM"), "architectures");
  expect_bad(with("architectures", json({1})), "architectures");
  expect_bad(with("eos_token_id", "</s>"), "eos_token_id");
  expect_bad(with("eos_token_id", json({151645, "x"})), "eos_token_id[1]");
  expect_bad(with("eos_token_id", -1), "eos_token_id", "negative");
  expect_bad(with("bos_token_id", json({1, 2})), "bos_token_id");
  expect_bad(with("hidden_act", "gelu"), "hidden_act");
  std::string e = error_of([] { parse_model_config(json::array(), "dir/config.json"); });
  EXPECT_NE(e.find("expected an object"), std::string::npos) << e;
}

TEST(HfConfigErrors, NotQwen2) {
  json j = with("architectures", json({"LlamaForCausalLM"}));
  j["model_type"] = "llama";
  expect_bad(j, "architectures", "LlamaForCausalLM");
  j.erase("architectures");
  expect_bad(j, "architectures", "llama");
  // Either signal suffices.
  j["model_type"] = "qwen2";
  EXPECT_NO_THROW(parse_model_config(j, "x"));
  j = without("model_type");
  EXPECT_NO_THROW(parse_model_config(j, "x"));
}

TEST(HfConfigErrors, NonPositiveSizes) {
  for (const char* k :
       {"hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
        "intermediate_size", "vocab_size", "max_position_embeddings"}) {
    expect_bad(with(k, 0), k, "positive");
    expect_bad(with(k, -4), k, "positive");
  }
  expect_bad(with("head_dim", 0), "head_dim", "positive");
}

TEST(HfConfigErrors, HeadGeometry) {
  expect_bad(with("num_key_value_heads", 3), "num_key_value_heads", "divide");
  expect_bad(with("num_attention_heads", 15), "num_attention_heads", "divide");
  // An explicit head_dim lifts the hidden_size constraint (as in Qwen3-style configs).
  json j = with("num_attention_heads", 16);
  j["head_dim"] = 64;
  ModelConfig c = parse_model_config(j, "x");
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.q_dim(), 1024);
  expect_equal(parse_model_config(model_config_to_json(c), "rt"), c);
  j["head_dim"] = 63;
  expect_bad(j, "head_dim", "odd");
}

TEST(HfConfigErrors, RopeThetaAndEps) {
  expect_bad(with("rope_theta", 0), "rope_theta", "positive");
  expect_bad(with("rope_theta", -1e6), "rope_theta", "positive");
  expect_bad(with("rms_norm_eps", 0.0), "rms_norm_eps", "positive");
  expect_bad(with("rms_norm_eps", -1e-6), "rms_norm_eps", "positive");
}

TEST(HfConfigErrors, Quantization) {
  expect_bad(with("quantization", 4), "quantization");
  expect_bad(with("quantization", {{"group_size", 64}}), "bits", "missing");
  expect_bad(with("quantization", {{"bits", 4}}), "group_size", "missing");
  expect_bad(with("quantization", {{"group_size", 64}, {"bits", 5}}), "quantization.bits");
  expect_bad(with("quantization", {{"group_size", 48}, {"bits", 4}}), "quantization.group_size");
  expect_bad(with("quantization", {{"group_size", "64"}, {"bits", 4}}), "group_size");
  for (int bits : {2, 3, 4, 6, 8}) {
    for (int g : {32, 64, 128}) {
      auto q = parse_model_config(with("quantization", {{"group_size", g}, {"bits", bits}}), "x");
      ASSERT_TRUE(q.quantization);
      EXPECT_EQ(q.quantization->bits, bits);
      EXPECT_EQ(q.quantization->group_size, g);
    }
  }
}

TEST(HfConfig, QuantizationModesAliasesAndPerLayerOverrides) {
  // mlx-lm writes "quantization_config" too; either is read.
  auto c = parse_model_config(with("quantization_config", {{"group_size", 32}, {"bits", 8}}), "x");
  ASSERT_TRUE(c.quantization);
  EXPECT_EQ(c.quantization->mode, "affine");
  EXPECT_EQ(c.quantization->group_size, 32);
  // molt's int8: group 0 = per output channel.
  c = parse_model_config(with("quantization", {{"mode", "int8"}, {"group_size", 0}, {"bits", 8}}),
                         "x");
  EXPECT_EQ(c.quantization->mode, "int8");
  EXPECT_EQ(c.quantization->group_size, 0);
  expect_bad(with("quantization", {{"mode", "int8"}, {"group_size", 0}, {"bits", 4}}),
             "quantization.bits", "int8");
  expect_bad(with("quantization", {{"mode", "mxfp4"}, {"group_size", 32}, {"bits", 4}}),
             "mode 'mxfp4'");
  expect_bad(with("quantization_config", {{"quant_method", "gptq"}, {"bits", 4}}),
             "quantization method");
  // MLX mixed precision: per-module entries, false = left dense.
  c = parse_model_config(
      with("quantization", {{"group_size", 64},
                            {"bits", 4},
                            {"model.layers.0.mlp.down_proj", {{"group_size", 32}, {"bits", 8}}},
                            {"lm_head", false}}),
      "x");
  EXPECT_EQ(c.quantization->layer("model.layers.0.mlp.down_proj").bits, 8);
  EXPECT_EQ(c.quantization->layer("model.layers.0.mlp.down_proj").group_size, 32);
  EXPECT_EQ(c.quantization->layer("lm_head").bits, 0);
  EXPECT_EQ(c.quantization->layer("model.layers.1.mlp.up_proj").bits, 4);
  expect_bad(
      with("quantization", {{"group_size", 64},
                            {"bits", 4},
                            {"model.layers.0.mlp.down_proj", {{"group_size", 64}, {"bits", 5}}}}),
      "quantization.model.layers.0.mlp.down_proj.bits");
  // Round trip keeps mode and overrides.
  const auto back = parse_model_config(model_config_to_json(c), "rt");
  EXPECT_EQ(back.quantization->layer("model.layers.0.mlp.down_proj").bits, 8);
  EXPECT_EQ(back.quantization->layer("lm_head").bits, 0);
}

TEST(HfConfigErrors, Files) {
  TempDir tmp;
  std::string e = error_of([&] { load_model_config(tmp.path()); });
  EXPECT_NE(e.find("config.json"), std::string::npos) << e;
  test::write_file(tmp / "config.json", "{\"hidden_size\": 896,\n  \"vocab_size\": }");
  e = error_of([&] { load_model_config(tmp.path()); });
  EXPECT_NE(e.find((tmp / "config.json").string()), std::string::npos) << e;
  EXPECT_NE(e.find("malformed JSON at byte 38"), std::string::npos) << e;
  EXPECT_NE(e.find("line 2"), std::string::npos) << e;
  test::write_file(tmp / "config.json", without("vocab_size").dump());
  e = error_of([&] { load_model_config(tmp.path()); });
  EXPECT_NE(e.find((tmp / "config.json").string()), std::string::npos) << e;
  EXPECT_NE(e.find("vocab_size"), std::string::npos) << e;
  test::write_file(tmp / "config.json", good().dump());
  test::write_file(tmp / "generation_config.json", R"({"eos_token_id": "<|im_end|>"})");
  e = error_of([&] { load_model_config(tmp.path()); });
  EXPECT_NE(e.find("generation_config.json"), std::string::npos) << e;
  EXPECT_NE(e.find("eos_token_id"), std::string::npos) << e;
  test::write_file(tmp / "generation_config.json", "[]");
  e = error_of([&] { load_model_config(tmp.path()); });
  EXPECT_NE(e.find("generation_config.json"), std::string::npos) << e;
  e = error_of([&] { read_json_file(tmp / "absent.json"); });
  EXPECT_NE(e.find("absent.json"), std::string::npos) << e;
}

}  // namespace
}  // namespace molt
