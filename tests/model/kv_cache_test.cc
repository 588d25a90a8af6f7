// The KV cache as plain data: one buffer at a fixed capacity, explicit copies, and shedding
// that leaves the kept keys equal to keys computed natively at their new positions.
#include "molt/model/kv_cache.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <type_traits>

#include "molt/common/error.h"
#include "molt/model/model.h"
#include "molt/model/synth.h"
#include "test_util.h"

namespace molt {
namespace {

static_assert(!std::is_copy_constructible_v<KVCache> && !std::is_copy_assignable_v<KVCache>,
              "copies of a cache must be explicit (KVCache::copy)");
static_assert(std::is_nothrow_move_constructible_v<KVCache> &&
              std::is_nothrow_move_assignable_v<KVCache>);

const CacheGeometry kGeom{3, 2, 8, 24};

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

TEST(KVCache, OneBufferViewsSpanTheCapacity) {
  KVCache c(kGeom, 10, /*keep_hidden=*/true);
  const int64_t kv = kGeom.kv_dim(), cap = 10;
  EXPECT_EQ(c.capacity(), cap);
  EXPECT_EQ(c.bytes(), c.bytes_per_token() * cap);
  // Blocks follow each other in one allocation: K0 V0 K1 V1 K2 V2 H0 .. H3.
  for (int64_t l = 0; l < kGeom.n_layers; ++l) {
    EXPECT_EQ(c.k(l).size(), static_cast<size_t>(cap * kv));
    EXPECT_EQ(c.v(l).size(), static_cast<size_t>(cap * kv));
    EXPECT_EQ(c.v(l).data(), c.k(l).data() + cap * kv);
  }
  EXPECT_EQ(c.hidden(0).data(), c.v(kGeom.n_layers - 1).data() + cap * kv);
  for (int64_t i = 0; i <= kGeom.n_layers; ++i) {
    EXPECT_EQ(c.hidden(i).size(), static_cast<size_t>(cap * kGeom.hidden_size));
  }
  EXPECT_EQ(c.hidden(kGeom.n_layers).data() + cap * kGeom.hidden_size,
            c.k(0).data() + c.bytes() / sizeof(float));
  EXPECT_NE(message_of([&] { c.k(3); }).find("layer 3 out of range"), std::string::npos);
  EXPECT_NE(message_of([&] { c.hidden(4); }).find("hidden state 4"), std::string::npos);
  KVCache plain(kGeom, 4);
  EXPECT_NE(message_of([&] { plain.hidden(0); }).find("keep_hidden"), std::string::npos);
}

TEST(KVCache, NeverGrowsPastItsCapacity) {
  KVCache c(kGeom, 4);
  EXPECT_EQ(c.reserve(4), 0);
  c.commit(3);
  const std::string m = message_of([&] { c.reserve(2); });
  EXPECT_NE(m.find("3 positions held + 2 new"), std::string::npos) << m;
  EXPECT_NE(m.find("capacity of 4"), std::string::npos) << m;
  EXPECT_NE(message_of([&] { c.set_size(5); }).find("5 positions past the capacity of 4"),
            std::string::npos);
  EXPECT_THROW(c.commit(2), Error);
  EXPECT_EQ(c.capacity(), 4);
  c.set_size(4);
  EXPECT_EQ(c.size(), 4);
}

TEST(KVCache, CopyIsDeepAndLeavesTheScratch) {
  KVCache a(kGeom, 5, true);
  a.set_size(3);
  for (size_t i = 0; i < a.k(1).size(); ++i) a.k(1)[i] = static_cast<float>(i);
  a.hidden(2)[7] = 42.0f;
  a.scratch(100);
  KVCache b = a.copy();
  EXPECT_EQ(b.size(), 3);
  EXPECT_EQ(b.capacity(), 5);
  EXPECT_TRUE(b.keeps_hidden());
  EXPECT_EQ(b.scratch_bytes(), 0u);
  EXPECT_EQ(0, std::memcmp(a.k(0).data(), b.k(0).data(), a.bytes()));  // the whole buffer
  b.k(1)[0] = -1.0f;
  EXPECT_EQ(a.k(1)[0], 0.0f);
  KVCache moved = std::move(b);
  EXPECT_EQ(moved.k(1)[0], -1.0f);
  EXPECT_EQ(moved.hidden(2)[7], 42.0f);
}

ModelConfig small_config() {
  ModelConfig c = qwen25_geometry("qwen2.5-0.5b");
  c.hidden_size = 64;
  c.num_hidden_layers = 3;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 16;
  c.intermediate_size = 96;
  c.vocab_size = 301;
  c.eos_token_ids = {300};
  c.bos_token_id = 300;
  return c;
}

std::unique_ptr<Model> make_model(const test::TempDir& dir) {
  SynthOptions o;
  o.dtype = DType::F32;
  o.seed = 11;
  write_synthetic_checkpoint(small_config(), o, dir.path());
  return Model::load(dir.path());
}

// After shed(S, D), row i ≥ S holds what was position i + D. Its key must equal the key the
// model computes natively at position i from the same hidden state entering the layer: run
// forward_layers for that one layer at the new positions (a key does not depend on the
// attention of its own layer, so the reference cache needs nothing else).
// Measured: max |Δ| 9.5e-07 over keys of magnitude up to 3.8 (relative 2.5e-07), i.e. f32
// round-off of one rotation; values, hidden states and sink rows move bit for bit.
TEST(KVCache, ShedReRotatesKeptKeysToTheirNewPositions) {
  test::TempDir dir;
  auto m = make_model(dir);
  const ModelConfig& c = m->config();
  const int64_t T = 150, S = 4, D = 61, kv = c.kv_dim(), d = c.hidden_size;
  std::vector<int32_t> ids(T);
  for (int64_t i = 0; i < T; ++i) ids[i] = static_cast<int32_t>((i * 37 + 5) % 300);
  KVCache cache = m->new_cache(T + 8, /*keep_hidden=*/true);
  m->forward(ids, cache, {});
  const KVCache before = cache.copy();

  cache.shed(S, D, m->rope());
  ASSERT_EQ(cache.size(), T - D);
  const int64_t kept = T - D - S;
  double worst = 0, scale = 0;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    // Sinks untouched; values and hidden states moved down as they were.
    EXPECT_EQ(0, std::memcmp(cache.k(l).data(), before.k(l).data(), sizeof(float) * S * kv));
    EXPECT_EQ(0, std::memcmp(cache.v(l).data() + S * kv, before.v(l).data() + (S + D) * kv,
                             sizeof(float) * kept * kv));
    EXPECT_EQ(0, std::memcmp(cache.hidden(l).data() + S * d, before.hidden(l).data() + (S + D) * d,
                             sizeof(float) * kept * d));

    KVCache ref = m->new_cache(T);
    std::vector<float> h(cache.hidden(l).begin() + S * d, cache.hidden(l).begin() + (S + kept) * d);
    m->forward_layers(l, S, kept, h, ref, l + 1);
    for (int64_t i = S * kv; i < (S + kept) * kv; ++i) {
      worst = std::max(worst, static_cast<double>(std::abs(cache.k(l)[i] - ref.k(l)[i])));
      scale = std::max(scale, static_cast<double>(std::abs(ref.k(l)[i])));
    }
    // The reference is native: its values equal the moved ones.
    for (int64_t i = S * kv; i < (S + kept) * kv; ++i) {
      ASSERT_NEAR(cache.v(l)[i], ref.v(l)[i], 1e-5);
    }
  }
  std::printf("    shed: max |key - native key| %.2e (largest key %.2f)\n", worst, scale);
  EXPECT_GT(scale, 0.5);
  EXPECT_LT(worst, 4e-6 * scale);

  // Decoding goes on from the shorter cache.
  std::vector<float> logits(static_cast<size_t>(c.vocab_size));
  m->decode(7, cache, logits);
  EXPECT_EQ(cache.size(), T - D + 1);
  for (float v : logits) ASSERT_TRUE(std::isfinite(v));
}

// f16 and int8 caches: the bytes per token, rows written and read through the conversions
// (the f32 views refuse, naming the type), copies keep the type, and shedding an f16 cache
// equals shedding its widened f32 copy up to one more f16 rounding of the rotated keys.
TEST(KVCache, StoredTypesHoldTheirRowsInFewerBytes) {
  const int64_t kv = kGeom.kv_dim();
  const KVCache f32(kGeom, 6, true);
  for (KvDType t : {KvDType::kF16, KvDType::kInt8}) {
    KVCache c(kGeom, 6, true, t);
    EXPECT_EQ(c.kv_dtype(), t);
    EXPECT_EQ(c.row_bytes(), kv_row_bytes(t, kGeom.n_kv_heads, kGeom.head_dim));
    EXPECT_EQ(c.kv_bytes_per_token(), 2 * kGeom.n_layers * c.row_bytes());
    EXPECT_EQ(c.bytes_per_token() - c.kv_bytes_per_token(),
              f32.bytes_per_token() - f32.kv_bytes_per_token());  // hidden states stay f32
    EXPECT_EQ(c.bytes(), c.bytes_per_token() * 6);
    const std::string m = message_of([&] { c.k(1); });
    EXPECT_NE(m.find(std::string("K of layer 1 is stored as ") + std::string(kv_dtype_name(t))),
              std::string::npos)
        << m;
    const auto x = [&] {
      std::vector<float> v(static_cast<size_t>(3 * kv));
      for (size_t i = 0; i < v.size(); ++i) v[i] = std::sin(0.3f * static_cast<float>(i));
      return v;
    }();
    c.write_k(2, 1, 3, x.data());
    c.write_v(2, 1, 3, x.data());
    c.hidden(0)[5] = 3.0f;
    std::vector<float> k(x.size()), v(x.size());
    const KVCache d = c.copy();
    d.read_k(2, 1, 3, k.data());
    d.read_v(2, 1, 3, v.data());
    EXPECT_EQ(d.kv_dtype(), t);
    EXPECT_EQ(d.hidden(0)[5], 3.0f);
    for (size_t i = 0; i < x.size(); ++i) {
      ASSERT_NEAR(k[i], x[i], t == KvDType::kF16 ? 1e-3 : 5e-3) << i;
      ASSERT_EQ(k[i], v[i]) << i;
    }
    EXPECT_NE(message_of([&] { c.write_k(0, 5, 2, x.data()); }).find("rows [5, 7) outside"),
              std::string::npos);
  }
  EXPECT_EQ(KVCache(kGeom, 1, false, KvDType::kF16).bytes() * 2, KVCache(kGeom, 1).bytes());
}

TEST(KVCache, ShedOfAnF16CacheEqualsShedOfItsWidenedRows) {
  const RopeSpec rope{kGeom.head_dim, 10000.0};
  const int64_t n = 40, kv = kGeom.kv_dim();
  KVCache h(kGeom, n, false, KvDType::kF16), f(kGeom, n);
  h.set_size(n);
  f.set_size(n);
  std::vector<float> x(static_cast<size_t>(n * kv));
  for (int64_t l = 0; l < kGeom.n_layers; ++l) {
    for (size_t i = 0; i < x.size(); ++i) x[i] = std::cos(0.7f * static_cast<float>(i + 5 * l));
    h.write_k(l, 0, n, x.data());
    h.write_v(l, 0, n, x.data());
    h.read_k(l, 0, n, f.k(l).data());
    h.read_v(l, 0, n, f.v(l).data());
  }
  h.shed(3, 10, rope);
  f.shed(3, 10, rope);
  ASSERT_EQ(h.size(), f.size());
  std::vector<float> k(static_cast<size_t>(h.size() * kv)), v(k.size());
  for (int64_t l = 0; l < kGeom.n_layers; ++l) {
    h.read_k(l, 0, h.size(), k.data());
    h.read_v(l, 0, h.size(), v.data());
    for (size_t i = 0; i < k.size(); ++i) {
      ASSERT_EQ(v[i], f.v(l)[i]) << i;  // values move as stored
      ASSERT_NEAR(k[i], f.k(l)[i], 1e-3) << i;
    }
  }
}

TEST(KVCache, ShedEdgeCasesAndErrors) {
  const RopeSpec rope{kGeom.head_dim, 10000.0};
  KVCache c(kGeom, 10);
  c.set_size(8);
  for (size_t i = 0; i < c.k(0).size(); ++i) c.k(0)[i] = static_cast<float>(i % 13);
  const KVCache before = c.copy();
  c.shed(2, 0, rope);  // nothing to drop
  EXPECT_EQ(c.size(), 8);
  EXPECT_EQ(0, std::memcmp(c.k(0).data(), before.k(0).data(), c.bytes()));
  c.shed(3, 5, rope);  // drops the whole tail: nothing to move
  EXPECT_EQ(c.size(), 3);
  EXPECT_EQ(0, std::memcmp(c.k(0).data(), before.k(0).data(), sizeof(float) * 3 * kGeom.kv_dim()));

  c.set_size(8);
  const std::string m = message_of([&] { c.shed(4, 5, rope); });
  EXPECT_NE(m.find("cannot shed 5 positions after 4 sink positions from 8 held"), std::string::npos)
      << m;
  EXPECT_THROW(c.shed(-1, 2, rope), Error);
  EXPECT_THROW(c.shed(1, -2, rope), Error);
  EXPECT_NE(message_of([&] {
              c.shed(1, 2, RopeSpec{16, 1e4});
            }).find("head_dim 16"),
            std::string::npos);
  EXPECT_THROW(c.shed(1, 2, RopeSpec{kGeom.head_dim, 0.0}), Error);
  EXPECT_EQ(c.size(), 8);
}

}  // namespace
}  // namespace molt
