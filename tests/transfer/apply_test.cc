// CacheMap::apply around maps of known content: identity maps reproduce the cache through
// the RoPE sandwich, selective recompute equals the full forward bit for bit, anchors re-run
// the tail natively, and bad calls get clear errors.
#include <gtest/gtest.h>

#include "molt/common/error.h"
#include "molt/transfer/transfer.h"
#include "route_fixture.h"

namespace molt {
namespace {

class Apply : public ::testing::Test {
 protected:
  void SetUp() override {
    cfg_ = test::tiny_config(64, 3, 4, 2);
    model_ = test::tiny_model(dir_.path(), cfg_);
    ids_ = test::random_ids(n_, cfg_.vocab_size, 11);
    native_ = std::make_unique<KVCache>(model_->new_cache(n_, /*keep_hidden=*/true));
    model_->forward(ids_, *native_, {});
  }
  test::TempDir dir_;
  ModelConfig cfg_;
  std::unique_ptr<Model> model_;
  const int64_t n_ = 37;
  std::vector<int32_t> ids_;
  std::unique_ptr<KVCache> native_;
};

TEST_F(Apply, IdentityMapReproducesTheCacheThroughTheSandwich) {
  auto map = CacheMap::from_data(test::identity_map(*model_));
  KVCache dst = model_->new_cache(n_);
  map->apply(*model_, *native_, *model_, ids_, {}, dst);
  ASSERT_EQ(dst.size(), n_);
  const int64_t kv = cfg_.kv_dim();
  for (int64_t l = 0; l < cfg_.num_hidden_layers; ++l) {
    // V is copied exactly; K goes through un-rotate ∘ rotate (f32 round-off only).
    EXPECT_EQ(test::max_abs_diff(dst.v(l), native_->v(l), n_ * kv), 0.0) << l;
    EXPECT_LT(test::max_abs_diff(dst.k(l), native_->k(l), n_ * kv),
              1e-5 * test::max_abs(native_->k(l), n_ * kv))
        << l;
  }
  EXPECT_EQ(map->method(), "ridge");
  EXPECT_DOUBLE_EQ(map->flops_per_position(), 3.0 * 2 * 2.0 * kv * kv);
}

TEST_F(Apply, RecomputeOnOwnHiddenStatesEqualsTheFullForwardBitForBit) {
  const int64_t L = cfg_.num_hidden_layers, kv = cfg_.kv_dim();
  // Directly through the model: the hidden state entering layer L − r, fed back.
  for (int64_t r = 1; r <= L; ++r) {
    KVCache c = model_->new_cache(n_);
    c.set_size(n_);
    std::vector<float> h(native_->hidden(L - r).begin(),
                         native_->hidden(L - r).begin() + n_ * cfg_.hidden_size);
    model_->forward_layers(L - r, 0, n_, h, c);
    for (int64_t l = L - r; l < L; ++l) {
      ASSERT_TRUE(std::equal(c.k(l).begin(), c.k(l).begin() + n_ * kv, native_->k(l).begin()))
          << r << " " << l;
      ASSERT_TRUE(std::equal(c.v(l).begin(), c.v(l).begin() + n_ * kv, native_->v(l).begin()))
          << r << " " << l;
    }
  }
  // Through apply(): an identity boundary map hands over the receiver's own hidden states.
  auto map = CacheMap::from_data(test::identity_map(*model_, L));
  for (int r = 1; r <= L; ++r) {
    KVCache dst = model_->new_cache(n_);
    TransferOptions o;
    o.recompute_layers = r;
    map->apply(*model_, *native_, *model_, ids_, o, dst);
    for (int64_t l = L - r; l < L; ++l) {
      ASSERT_TRUE(std::equal(dst.k(l).begin(), dst.k(l).begin() + n_ * kv, native_->k(l).begin()))
          << r << " " << l;
      ASSERT_TRUE(std::equal(dst.v(l).begin(), dst.v(l).begin() + n_ * kv, native_->v(l).begin()))
          << r << " " << l;
    }
  }
}

TEST_F(Apply, AnchorsRerunTheTailNatively) {
  // A useless map (zeros): anchored positions are still computed natively over it.
  MapData zero = test::identity_map(*model_);
  for (LayerMap& L : zero.layers) {
    std::fill(L.k_weight.begin(), L.k_weight.end(), 0.0f);
    std::fill(L.v_weight.begin(), L.v_weight.end(), 0.0f);
  }
  auto map = CacheMap::from_data(zero);
  const int64_t kv = cfg_.kv_dim(), a = 5;
  TransferOptions o;
  o.anchors = static_cast<int>(a);
  KVCache dst = model_->new_cache(n_);
  map->apply(*model_, *native_, *model_, ids_, o, dst);
  ASSERT_EQ(dst.size(), n_);
  // Layer 0's K/V depend on the token alone: the anchored rows equal the native ones.
  EXPECT_LT(test::max_abs_diff(std::span(dst.v(0)).subspan((n_ - a) * kv),
                               std::span(native_->v(0)).subspan((n_ - a) * kv), a * kv),
            1e-4 * test::max_abs(native_->v(0), n_ * kv));
  // The mapped rows before them are the map's output (zeros).
  EXPECT_EQ(test::max_abs(dst.v(0), (n_ - a) * kv), 0.0);
  // Deeper layers of the anchors attended to the zero cache: they differ from native.
  const int64_t last = cfg_.num_hidden_layers - 1;
  EXPECT_GT(test::max_abs_diff(std::span(dst.v(last)).subspan((n_ - a) * kv),
                               std::span(native_->v(last)).subspan((n_ - a) * kv), a * kv),
            1e-3);

  // Anchoring every position is a native prefill, bit for bit.
  o.anchors = static_cast<int>(n_);
  KVCache all = model_->new_cache(n_);
  map->apply(*model_, *native_, *model_, ids_, o, all);
  for (int64_t l = 0; l <= last; ++l) {
    ASSERT_TRUE(std::equal(all.k(l).begin(), all.k(l).begin() + n_ * kv, native_->k(l).begin()));
  }
}

// Caches stored as f16 or int8 on both sides: the map reads the sender's rows widened and
// stores its f32 result rounded, so the receiver holds exactly the f32 route's result rounded
// to its type (a ridge map mixing channels, and a diagonal one).
TEST_F(Apply, StoredTypesMapAsTheirWidenedRows) {
  MapData ridge = test::identity_map(*model_);
  const int64_t kv = cfg_.kv_dim();
  for (LayerMap& L : ridge.layers) {
    for (int64_t i = 0; i + 1 < kv; ++i) {
      L.k_weight[i * kv + i + 1] = 0.25f;
      L.v_weight[(i + 1) * kv + i] = -0.5f;
    }
  }
  MapData diagonal = test::identity_map(*model_);
  diagonal.method = "diagonal";
  for (LayerMap& L : diagonal.layers) {
    L.k_weight.clear();
    L.v_weight.clear();
    L.k_bias.clear();
    L.v_bias.clear();
    for (int64_t c = 0; c < kv; ++c) {
      L.k_scale.push_back(1.0f + 0.01f * static_cast<float>(c));
      L.k_offset.push_back(0.02f);
      L.v_scale.push_back(0.9f);
      L.v_offset.push_back(-0.01f * static_cast<float>(c));
    }
  }
  for (const MapData* data : {&ridge, &diagonal}) {
    auto map = CacheMap::from_data(*data);
    for (KvDType t : {KvDType::kF16, KvDType::kInt8}) {
      KVCache src = model_->new_cache(n_, false, t), wide = model_->new_cache(n_);
      std::vector<float> rows(static_cast<size_t>(n_ * kv));
      for (int64_t l = 0; l < cfg_.num_hidden_layers; ++l) {
        src.write_k(l, 0, n_, native_->k(l).data());
        src.write_v(l, 0, n_, native_->v(l).data());
        src.read_k(l, 0, n_, wide.k(l).data());
        src.read_v(l, 0, n_, wide.v(l).data());
      }
      src.set_size(n_);
      wide.set_size(n_);
      KVCache dst = model_->new_cache(n_, false, t), dst32 = model_->new_cache(n_);
      map->apply(*model_, src, *model_, ids_, {}, dst);
      map->apply(*model_, wide, *model_, ids_, {}, dst32);
      KVCache rounded = model_->new_cache(n_, false, t);
      std::vector<float> got(rows.size()), want(rows.size());
      for (int64_t l = 0; l < cfg_.num_hidden_layers; ++l) {
        rounded.write_k(l, 0, n_, dst32.k(l).data());
        rounded.write_v(l, 0, n_, dst32.v(l).data());
        dst.read_k(l, 0, n_, got.data());
        rounded.read_k(l, 0, n_, want.data());
        ASSERT_EQ(got, want) << data->method << " " << kv_dtype_name(t) << " K " << l;
        dst.read_v(l, 0, n_, got.data());
        rounded.read_v(l, 0, n_, want.data());
        ASSERT_EQ(got, want) << data->method << " " << kv_dtype_name(t) << " V " << l;
      }
    }
  }
}

TEST_F(Apply, InconsistentMapsAreRefused) {
  MapData m = test::identity_map(*model_);
  m.layers[1].k_weight.pop_back();
  EXPECT_THROW(CacheMap::from_data(m), Error);
  m = test::identity_map(*model_);
  m.layers[0].v_sources = {7};
  EXPECT_THROW(CacheMap::from_data(m), Error);
  m = test::identity_map(*model_);
  m.layers.pop_back();
  EXPECT_THROW(CacheMap::from_data(m), Error);
}

TEST_F(Apply, BadCallsGetClearErrors) {
  auto map = CacheMap::from_data(test::identity_map(*model_, 1));
  auto message = [&](const TransferOptions& o, const KVCache& src) {
    KVCache dst = model_->new_cache(n_);
    try {
      map->apply(*model_, src, *model_, ids_, o, dst);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  TransferOptions o;
  o.recompute_layers = 2;
  EXPECT_NE(message(o, *native_).find("no boundary map for recompute_layers = 2"),
            std::string::npos);
  KVCache plain = model_->new_cache(n_);
  model_->forward(ids_, plain, {});
  o.recompute_layers = 1;
  EXPECT_NE(message(o, plain).find("keep hidden states"), std::string::npos) << message(o, plain);
  o = {};
  o.anchors = 100;
  EXPECT_NE(message(o, *native_).find("anchors"), std::string::npos);

  test::TempDir other;
  auto small = test::tiny_model(other.path(), test::tiny_config(64, 2, 4, 2));
  KVCache dst = small->new_cache(n_);
  EXPECT_THROW(map->apply(*model_, *native_, *small, ids_, {}, dst), Error);
}

}  // namespace
}  // namespace molt
