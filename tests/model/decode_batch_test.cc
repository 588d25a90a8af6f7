// Batched decode: three sequences of different lengths decoded together give, step by step,
// exactly the logits, K/V rows and hidden states of each decoded alone, for every weight
// format the model runs (f32, bf16, f16; int8 per channel; MLX 4 / 8 bits, groups 32 and 64,
// row-major and rows8, quantised at load or read from a quantised checkpoint); B = 1 is
// decode; bad arguments throw and leave every cache as it was.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "molt/common/error.h"
#include "molt/model/model.h"
#include "molt/model/quantize.h"
#include "molt/model/synth.h"
#include "small_config.h"
#include "test_util.h"

namespace molt {
namespace {

// Small enough to run fast, wide enough that every linear quantises (64 and 128 inputs) and
// rows8 applies to every layer matrix (rows a multiple of 8).
using test::small_config;

int32_t argmax(const float* v, int64_t n) {
  return static_cast<int32_t>(std::max_element(v, v + n) - v);
}

std::vector<int32_t> prompt(int64_t n, int32_t mul, int32_t add) {
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) ids[static_cast<size_t>(i)] = (i * mul + add) % 300;
  return ids;
}

bool same_rows(std::span<const float> a, std::span<const float> b, int64_t floats) {
  return std::memcmp(a.data(), b.data(), sizeof(float) * static_cast<size_t>(floats)) == 0;
}

// Greedy decoding of `lengths.size()` sequences, alone and batched: every step's logits, then
// the caches (K, V and hidden states of every position), bit for bit.
void expect_batch_equals_alone(const Model& m, const std::vector<int64_t>& lengths, int steps,
                               const std::string& what) {
  const int64_t V = m.config().vocab_size, B = static_cast<int64_t>(lengths.size());
  std::vector<KVCache> alone, batched;
  std::vector<std::vector<float>> alone_logits(static_cast<size_t>(B));
  std::vector<float> batch_logits(static_cast<size_t>(B * V));
  for (int64_t i = 0; i < B; ++i) {
    const auto ids = prompt(lengths[i], static_cast<int32_t>(7 + 6 * i), static_cast<int32_t>(i));
    // Capacities differ too: only the geometry has to match.
    alone.push_back(m.new_cache(lengths[i] + steps + i, true));
    batched.push_back(m.new_cache(lengths[i] + steps + 2 * i, true));
    alone_logits[i].resize(static_cast<size_t>(V));
    m.forward(ids, alone.back(), {}, alone_logits[i]);
    m.forward(ids, batched.back(), {}, std::span(batch_logits).subspan(i * V, V));
  }
  std::vector<KVCache*> caches;
  for (KVCache& c : batched) caches.push_back(&c);
  std::vector<int32_t> tokens(static_cast<size_t>(B));
  for (int s = 0; s < steps; ++s) {
    for (int64_t i = 0; i < B; ++i) {
      tokens[i] = argmax(&batch_logits[i * V], V);
      ASSERT_EQ(tokens[i], argmax(alone_logits[i].data(), V)) << what << " step " << s;
      m.decode(tokens[i], alone[i], alone_logits[i]);
    }
    m.decode_batch(tokens, caches, batch_logits);
    for (int64_t i = 0; i < B; ++i) {
      ASSERT_TRUE(same_rows(alone_logits[i], std::span(batch_logits).subspan(i * V, V), V))
          << what << ": logits of sequence " << i << " differ at step " << s;
    }
  }
  const CacheGeometry g = m.cache_geometry();
  for (int64_t i = 0; i < B; ++i) {
    ASSERT_EQ(batched[i].size(), lengths[i] + steps);
    ASSERT_EQ(alone[i].size(), batched[i].size());
    const int64_t n = batched[i].size();
    for (int64_t l = 0; l < g.n_layers; ++l) {
      EXPECT_TRUE(same_rows(alone[i].k(l), batched[i].k(l), n * g.kv_dim())) << what << " K " << l;
      EXPECT_TRUE(same_rows(alone[i].v(l), batched[i].v(l), n * g.kv_dim())) << what << " V " << l;
    }
    for (int64_t h = 0; h <= g.n_layers; ++h) {
      EXPECT_TRUE(same_rows(alone[i].hidden(h), batched[i].hidden(h), n * g.hidden_size))
          << what << " hidden " << h;
    }
  }
}

struct Format {
  const char* name;
  DType dtype;  // of the synthetic checkpoint
  Precision precision = Precision::Native;
  int64_t group = 64;
  bool interleave = false;
};

class DecodeBatch : public ::testing::TestWithParam<Format> {};

TEST_P(DecodeBatch, ThreeSequencesEqualThreeAloneBitForBit) {
  const Format f = GetParam();
  test::TempDir dir;
  SynthOptions o;
  o.dtype = f.dtype;
  o.seed = 11;
  write_synthetic_checkpoint(small_config(), o, dir.path());
  LoadOptions lo;
  lo.precision = f.precision;
  lo.group_size = f.group;
  lo.layout = f.interleave ? WeightLayout::Memory : WeightLayout::Stored;
  auto m = Model::load(dir.path(), lo);
  if (f.interleave && rows8_preferred()) {
    ASSERT_TRUE(m->weights().layers[0].q.rows8);
  }
  expect_batch_equals_alone(*m, {3, 17, 40}, 6, f.name);
}

INSTANTIATE_TEST_SUITE_P(
    Formats, DecodeBatch,
    ::testing::Values(Format{"f32", DType::F32}, Format{"bf16", DType::BF16},
                      Format{"f16", DType::F16}, Format{"int8", DType::BF16, Precision::Int8},
                      Format{"q4_g64", DType::BF16, Precision::Q4},
                      Format{"q4_g32", DType::BF16, Precision::Q4, 32},
                      Format{"q8_g64", DType::BF16, Precision::Q8},
                      Format{"q8_g32", DType::BF16, Precision::Q8, 32},
                      Format{"q4_g64_rows8", DType::BF16, Precision::Q4, 64, true},
                      Format{"q4_g32_rows8", DType::BF16, Precision::Q4, 32, true},
                      Format{"q8_g64_rows8", DType::BF16, Precision::Q8, 64, true},
                      Format{"q8_g32_rows8", DType::BF16, Precision::Q8, 32, true},
                      Format{"q4_f32_scales", DType::F32, Precision::Q4},
                      Format{"q8_f16_scales", DType::F16, Precision::Q8}),
    [](const ::testing::TestParamInfo<Format>& i) { return std::string(i.param.name); });

// Quantised checkpoints as stored (MLX row-major, molt rows8, molt int8), not quantised at load.
TEST(DecodeBatchCheckpoints, QuantisedFilesEqualAloneBitForBit) {
  test::TempDir dir;
  SynthOptions o;
  o.seed = 12;
  write_synthetic_checkpoint(small_config(), o, dir / "dense");
  QuantizeOptions q4, q8r8, i8;
  q8r8.bits = 8;
  q8r8.interleave = true;
  i8.mode = "int8";
  i8.bits = 8;
  i8.group_size = 0;
  quantize_checkpoint(dir / "dense", dir / "q4", q4);
  quantize_checkpoint(dir / "dense", dir / "q8r8", q8r8);
  quantize_checkpoint(dir / "dense", dir / "int8", i8);
  for (const char* name : {"q4", "q8r8", "int8"}) {
    auto m = Model::load(dir / name);
    expect_batch_equals_alone(*m, {5, 1, 23}, 4, name);
  }
}

TEST(DecodeBatchShapes, OneIsDecodeAndNineIsNineAlone) {
  test::TempDir dir;
  write_synthetic_checkpoint(small_config(), SynthOptions{}, dir.path());
  auto m = Model::load(dir.path());
  const int64_t V = m->config().vocab_size;
  // B = 1 against decode.
  KVCache a = m->new_cache(16), b = m->new_cache(16);
  const auto ids = prompt(6, 5, 1);
  m->prefill(ids, a);
  m->prefill(ids, b);
  std::vector<float> la(V), lb(V);
  KVCache* one[] = {&b};
  const int32_t token = 42;
  m->decode(token, a, la);
  m->decode_batch(std::span(&token, 1), one, lb);
  EXPECT_EQ(la, lb);
  EXPECT_EQ(b.size(), 7);
  // More sequences than one kernel group holds (groups of 3), some of one token.
  expect_batch_equals_alone(*m, {1, 2, 3, 5, 8, 13, 21, 34, 55}, 3, "nine");
  // No sequences: nothing to do.
  m->decode_batch({}, {}, {});
}

TEST(DecodeBatchErrors, BadArgumentsThrowAndChangeNoCache) {
  test::TempDir dir, other_dir;
  write_synthetic_checkpoint(small_config(), SynthOptions{}, dir.path());
  ModelConfig oc = small_config();
  oc.num_hidden_layers = 3;
  write_synthetic_checkpoint(oc, SynthOptions{}, other_dir.path());
  auto m = Model::load(dir.path());
  auto other = Model::load(other_dir.path());
  const int64_t V = m->config().vocab_size;
  KVCache a = m->new_cache(8), b = m->new_cache(8), full = m->new_cache(2),
          foreign = other->new_cache(8);
  m->prefill(prompt(3, 3, 0), a);
  m->prefill(prompt(2, 5, 0), full);
  std::vector<float> logits(2 * V);
  const std::vector<int32_t> two = {1, 2};
  auto expect_error = [&](std::span<const int32_t> t, std::vector<KVCache*> c, std::span<float> l,
                          const std::string& needle) {
    try {
      m->decode_batch(t, c, l);
      ADD_FAILURE() << "no error for " << needle;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
    EXPECT_EQ(a.size(), 3);
    EXPECT_EQ(b.size(), 0);
    EXPECT_EQ(full.size(), 2);
  };
  expect_error(two, {&a, &b, &full}, logits, "2 tokens but 3 caches");
  expect_error(two, {&a, &b}, std::span(logits).first(V), "expected 2 sequences");
  expect_error(two, {&a, nullptr}, logits, "cache 1 is null");
  expect_error(two, {&a, &a}, logits, "caches 0 and 1 are the same cache");
  expect_error(two, {&a, &foreign}, logits, "KV cache 1 geometry (3 layers");
  expect_error(two, {&full, &b}, logits, "cache 0 is full");
  const std::vector<int32_t> bad = {1, static_cast<int32_t>(V)};
  expect_error(bad, {&a, &b}, logits, "token id 304 of sequence 1 is out of range");
  // The same caches still decode.
  m->decode_batch(two, std::vector<KVCache*>{&a, &b}, logits);
  EXPECT_EQ(a.size(), 4);
  EXPECT_EQ(b.size(), 1);
}

}  // namespace
}  // namespace molt
