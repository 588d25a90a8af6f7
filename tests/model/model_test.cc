// Engine properties on synthetic checkpoints: prefill = decode, recompute is bit-exact,
// synthetic weights keep activations finite, configs equal the real ones.
#include "molt/model/model.h"

#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "molt/common/error.h"
#include "molt/formats/hf_config.h"
#include "molt/model/synth.h"
#include "test_util.h"

namespace molt {
namespace {

ModelConfig small_config(int64_t hidden, int64_t layers, int64_t heads, int64_t kv_heads) {
  ModelConfig c = qwen25_geometry("qwen2.5-0.5b");
  c.hidden_size = hidden;
  c.num_hidden_layers = layers;
  c.num_attention_heads = heads;
  c.num_key_value_heads = kv_heads;
  c.head_dim = hidden / heads;
  c.intermediate_size = 3 * hidden + 1;
  c.vocab_size = 301;
  c.eos_token_ids = {300};
  c.bos_token_id = 300;
  return c;
}

std::unique_ptr<Model> make_model(const test::TempDir& dir, const ModelConfig& c, DType dtype) {
  SynthOptions o;
  o.dtype = dtype;
  o.seed = 7;
  write_synthetic_checkpoint(c, o, dir.path());
  return Model::load(dir.path());
}

double max_rel_diff(const float* a, const float* b, int64_t n) {
  double scale = 0, diff = 0;
  for (int64_t i = 0; i < n; ++i) {
    scale = std::max(scale, std::abs(double(a[i])));
    diff = std::max(diff, std::abs(double(a[i]) - double(b[i])));
  }
  return diff / std::max(scale, 1e-30);
}

class PrefillDecode : public ::testing::TestWithParam<std::tuple<int, int, int, DType>> {};

TEST_P(PrefillDecode, AgreeWithin1e4) {
  auto [hidden, heads, kv, dtype] = GetParam();
  test::TempDir dir;
  auto m = make_model(dir, small_config(hidden, 3, heads, kv), dtype);
  const std::vector<int32_t> ids = {5, 17, 300, 2, 99, 99, 0, 150, 42, 7, 8, 9, 10};
  const int64_t T = ids.size(), V = m->config().vocab_size;
  std::vector<float> a(T * V), b(T * V);
  KVCache ca = m->new_cache(T), cb = m->new_cache(T);
  m->forward(ids, ca, a);
  for (int64_t t = 0; t < T; ++t) {
    m->forward(std::span<const int32_t>(&ids[t], 1), cb, std::span<float>(b.data() + t * V, V));
  }
  for (int64_t t = 0; t < T; ++t) {
    EXPECT_LT(max_rel_diff(&a[t * V], &b[t * V], V), 1e-4) << "position " << t;
  }
  // The two caches hold the same K and V.
  for (int64_t l = 0; l < 3; ++l) {
    const int64_t n = T * m->config().kv_dim();
    EXPECT_LT(max_rel_diff(ca.k(l).data(), cb.k(l).data(), n), 1e-4);
    EXPECT_LT(max_rel_diff(ca.v(l).data(), cb.v(l).data(), n), 1e-4);
  }
}

INSTANTIATE_TEST_SUITE_P(Geometries, PrefillDecode,
                         ::testing::Values(std::make_tuple(64, 4, 4, DType::F32),
                                           std::make_tuple(60, 3, 1, DType::BF16),
                                           std::make_tuple(140, 7, 1, DType::F16),
                                           std::make_tuple(128, 2, 2, DType::F32)));

TEST(Model, RecomputeOfTheLastLayersIsBitExact) {
  test::TempDir dir;
  auto m = make_model(dir, small_config(64, 4, 4, 2), DType::BF16);
  const std::vector<int32_t> ids = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};
  const int64_t T = ids.size(), d = m->config().hidden_size, kvd = m->config().kv_dim();
  KVCache full = m->new_cache(T, /*keep_hidden=*/true);
  m->forward(ids, full, {});
  for (int64_t first : {0, 2, 3}) {
    KVCache re = m->new_cache(T, true);
    re.set_size(T);
    std::vector<float> h(full.hidden(first).begin(), full.hidden(first).begin() + T * d);
    m->forward_layers(first, 0, T, h, re);
    for (int64_t l = first; l < 4; ++l) {
      EXPECT_EQ(0, std::memcmp(re.k(l).data(), full.k(l).data(), sizeof(float) * T * kvd));
      EXPECT_EQ(0, std::memcmp(re.v(l).data(), full.v(l).data(), sizeof(float) * T * kvd));
    }
    EXPECT_EQ(0, std::memcmp(h.data(), full.hidden(4).data(), sizeof(float) * T * d));
  }
}

TEST(Model, RejectsOutOfRangeTokens) {
  test::TempDir dir;
  auto m = make_model(dir, small_config(64, 1, 4, 2), DType::F32);
  KVCache c = m->new_cache(4);
  const std::vector<int32_t> ids = {1, 301};
  try {
    m->forward(ids, c, {});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("301"), std::string::npos) << e.what();
  }
}

TEST(Model, MissingTensorNamesTheCheckpointAndTensor) {
  test::TempDir dir;
  make_model(dir, small_config(64, 1, 4, 2), DType::F32);
  // Rewrite the config to claim two layers: layer 1's tensors are absent.
  nlohmann::json j = read_json_file(dir / "config.json");
  j["num_hidden_layers"] = 2;
  test::write_file(dir / "config.json", j.dump());
  try {
    Model::load(dir.path());
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("model.layers.1."), std::string::npos) << e.what();
  }
}

TEST(Model, WrongShapeNamesTheTensor) {
  test::TempDir dir;
  make_model(dir, small_config(64, 1, 4, 2), DType::F32);
  nlohmann::json j = read_json_file(dir / "config.json");
  j["intermediate_size"] = 100;
  test::write_file(dir / "config.json", j.dump());
  try {
    Model::load(dir.path());
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("mlp.gate_proj.weight"), std::string::npos) << e.what();
  }
}

TEST(Synth, ConfigsEqualTheRealOnes) {
  MOLT_REQUIRE_SHARED(shared);
  for (const char* name : {"0.5B", "1.5B", "3B"}) {
    const nlohmann::json real =
        read_json_file(shared / "configs" / fmt::format("Qwen2.5-{}-Instruct.json", name));
    std::string geometry = "qwen2.5-" + std::string(name);
    for (char& ch : geometry) ch = static_cast<char>(std::tolower(ch));
    ModelConfig c = qwen25_geometry(geometry);
    c.eos_token_ids.resize(1);  // config.json carries one eos id (generation_config the list)
    const nlohmann::json ours = model_config_to_json(c);
    for (const auto& [key, value] : real.items()) {
      ASSERT_TRUE(ours.contains(key)) << name << ": missing " << key;
      EXPECT_EQ(ours[key], value) << name << ": field " << key;
    }
  }
}

TEST(Synth, ActivationsStayFiniteThroughEveryLayer) {
  // The 0.5B geometry with fewer layers and a small vocabulary keeps the test fast; the layer
  // scale uses the real depth through the branch factor.
  ModelConfig c = qwen25_geometry("qwen2.5-0.5b");
  c.vocab_size = 512;
  c.eos_token_ids = {511};
  test::TempDir dir;
  SynthOptions o;
  o.seed = 3;
  c.num_hidden_layers = 24;
  c.hidden_size = 128, c.num_attention_heads = 2, c.head_dim = 64, c.intermediate_size = 256;
  write_synthetic_checkpoint(c, o, dir.path());
  auto m = Model::load(dir.path());
  KVCache cache = m->new_cache(16, true);
  std::vector<int32_t> ids(16);
  for (int i = 0; i < 16; ++i) ids[i] = i * 31 % 512;
  std::vector<float> logits(16 * 512);
  m->forward(ids, cache, logits);
  for (int64_t l = 0; l <= 24; ++l) {
    double ss = 0;
    for (float v : cache.hidden(l).subspan(0, 16 * 128)) {
      ASSERT_TRUE(std::isfinite(v)) << "layer " << l;
      ss += double(v) * v;
    }
    const double rms = std::sqrt(ss / (16 * 128));
    EXPECT_GT(rms, 1e-3) << "layer " << l;
    EXPECT_LT(rms, 1e2) << "layer " << l;
  }
  for (float v : logits) ASSERT_TRUE(std::isfinite(v));
}

}  // namespace
}  // namespace molt
