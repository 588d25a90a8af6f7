// The RoPE sandwich: un-rotation inverts rotation, the table equals the model's RoPE bit for
// bit, and un-rotating a cached key recovers the pre-RoPE projection.
#include "molt/transfer/rope_sandwich.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "molt/common/error.h"
#include "molt/kernels/ops.h"
#include "route_fixture.h"

namespace molt {
namespace {

std::vector<float> random_rows(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 3.0f);
  std::vector<float> x(static_cast<size_t>(n));
  for (auto& v : x) v = d(rng);
  return x;
}

TEST(RopeSandwich, UnrotateAfterRotateIsIdentity) {
  for (const RopeSpec spec : {RopeSpec{64, 10000.0}, RopeSpec{128, 1000000.0}, RopeSpec{32, 1e4}}) {
    const int64_t n = 1500, heads = 2, width = heads * spec.head_dim;
    const std::vector<float> x = random_rows(n * width, 1);
    std::vector<float> y = x;
    rotate_keys(spec, y.data(), n, heads);
    double moved = 0;
    for (size_t i = 0; i < x.size(); ++i) moved = std::max(moved, double(std::abs(y[i] - x[i])));
    EXPECT_GT(moved, 1.0);  // the rotation did something
    unrotate_keys(spec, y.data(), n, heads);
    for (size_t i = 0; i < x.size(); ++i) {
      ASSERT_NEAR(y[i], x[i], 2e-5 * (1 + std::abs(x[i])))
          << "head_dim " << spec.head_dim << " at " << i;
    }
  }
}

TEST(RopeSandwich, TableEqualsRopeApplyBitForBit) {
  const RopeSpec spec{64, 10000.0};
  const int64_t p0 = 37, n = 300, heads = 3, width = heads * spec.head_dim;
  const std::vector<float> x = random_rows(n * width, 2);
  for (bool inverse : {false, true}) {
    std::vector<float> a = x, b = x;
    RopeTable(spec, p0, n).rotate(a.data(), 0, n, heads, inverse);
    for (int64_t i = 0; i < n; ++i) rope_apply(spec, p0 + i, b.data() + i * width, heads, inverse);
    ASSERT_EQ(a, b) << "inverse " << inverse;
  }
}

TEST(RopeSandwich, UnrotatedCachedKeyIsThePreRopeProjection) {
  test::TempDir dir;
  const ModelConfig c = test::tiny_config(64, 1, 4, 2);
  auto m = test::tiny_model(dir.path(), c);
  const std::vector<int32_t> ids = test::random_ids(40, c.vocab_size, 5);
  KVCache cache = m->new_cache(40);
  m->forward(ids, cache, {});
  const int64_t kv = c.kv_dim(), d = c.hidden_size;
  std::vector<float> k(cache.k(0).begin(), cache.k(0).begin() + 40 * kv);
  unrotate_keys(m->rope(), k.data(), 40, c.num_key_value_heads);
  // Layer 0's key = W_k · rmsnorm(embedding) + b_k, independent of position.
  const LayerWeights& L = m->weights().layers[0];
  std::vector<float> x(d), xn(d), want(kv);
  for (int64_t p = 0; p < 40; ++p) {
    dequantize_row(m->weights().embed, ids[p], x.data());
    rmsnorm(x.data(), L.input_norm.data(), d, static_cast<float>(c.rms_norm_eps), xn.data());
    matvec(L.k, xn.data(), want.data());
    for (int64_t i = 0; i < kv; ++i) {
      ASSERT_NEAR(k[p * kv + i], want[i] + L.k_bias[i], 1e-4) << "position " << p;
    }
  }
}

TEST(RopeSandwich, BadSpecsAreRefused) {
  EXPECT_THROW(RopeTable(RopeSpec{63, 1e4}, 0, 4), Error);
  EXPECT_THROW(RopeTable(RopeSpec{64, 0.0}, 0, 4), Error);
  std::vector<float> x(64);
  EXPECT_THROW(RopeTable(RopeSpec{64, 1e4}, 0, 1).rotate(x.data(), 0, 2, 1, false), Error);
}

}  // namespace
}  // namespace molt
