// Fitting end to end on tiny synthetic rungs: a model's route to itself reproduces its cache,
// shards merge into exactly one run, depth remap and diagonal routes, statistics files.
#include "molt/transfer/fit.h"

#include <gtest/gtest.h>

#include <fstream>
#include <utility>

#include "molt/common/error.h"
#include "molt/formats/safetensors.h"
#include "molt/transfer/corpus.h"
#include "molt/transfer/eval.h"
#include "molt/transfer/rope_sandwich.h"
#include "molt/transfer/token_floor.h"
#include "molt/transfer/transfer.h"
#include "route_fixture.h"

namespace molt {
namespace {

FitOptions small_options() {
  FitOptions o;
  o.sequences = 8;
  o.seq_len = 40;
  o.stride = 1;
  o.heldout_every = 4;  // windows 3 and 7 are held out
  o.select_windows = 2;
  o.corpus_name = "ids";
  return o;
}

RouteStats collect(const Model& s, const Model& r, const std::filesystem::path& corpus,
                   const FitOptions& o) {
  auto stream = TokenStream::ids(corpus);
  return collect_stats(s, r, *stream, o);
}

class Fit : public ::testing::Test {
 protected:
  void SetUp() override {
    big_cfg_ = test::tiny_config(64, 3, 4, 2);
    small_cfg_ = test::tiny_config(48, 2, 2, 1, 500000.0);  // other head_dim (24) and θ
    big_ = test::tiny_model(dir_ / "big", big_cfg_, 3);
    small_ = test::tiny_model(dir_ / "small", small_cfg_, 4);
    corpus_ = dir_ / "corpus.txt";
    test::write_ids_file(corpus_, 8 * 40 + 7, 97, 21);
  }
  test::TempDir dir_;
  ModelConfig big_cfg_, small_cfg_;
  std::unique_ptr<Model> big_, small_;
  std::filesystem::path corpus_;
};

TEST_F(Fit, RouteToItselfReproducesTheCache) {
  FitOptions o = small_options();
  o.k = 3;  // all sender layers
  o.lambda = 1e-9;
  const RouteStats st = collect(*big_, *big_, corpus_, o);
  EXPECT_EQ(st.train.sequences, 6);
  EXPECT_EQ(st.heldout.sequences, 2);
  EXPECT_EQ(st.train.k.n, 6 * 40);
  const MapData data = solve_route(st, *big_, *big_, o);
  // Every receiver layer ranks its own sender layer first (R² = 1).
  for (int64_t j = 0; j < 3; ++j) {
    const auto& r2 = data.info["single_source_r2"]["k"][j];
    EXPECT_NEAR(r2[j].get<double>(), 1.0, 1e-6) << j;
  }
  EXPECT_LT(data.info["residuals"]["total"]["k"]["rel_rms"].get<double>(), 1e-4);
  EXPECT_LT(data.info["residuals"]["total"]["v"]["rel_rms"].get<double>(), 1e-4);

  // Applied to a cache of new text, the map gives the cache back.
  auto map = CacheMap::from_data(data);
  const std::vector<int32_t> ids = test::random_ids(50, 97, 99);
  KVCache src = big_->new_cache(50), dst = big_->new_cache(50);
  big_->forward(ids, src, {});
  map->apply(*big_, src, *big_, ids, {}, dst);
  const int64_t kv = big_cfg_.kv_dim();
  for (int64_t l = 0; l < 3; ++l) {
    EXPECT_LT(test::max_abs_diff(dst.k(l), src.k(l), 50 * kv),
              2e-3 * test::max_abs(src.k(l), 50 * kv))
        << l;
    EXPECT_LT(test::max_abs_diff(dst.v(l), src.v(l), 50 * kv),
              2e-3 * test::max_abs(src.v(l), 50 * kv))
        << l;
  }
  // At the default λ = 0.01 the shrinkage stays small.
  o.lambda = 0.01;
  const MapData d2 = solve_route(st, *big_, *big_, o);
  EXPECT_LT(d2.info["residuals"]["total"]["k"]["rel_rms"].get<double>(), 0.05);
}

TEST_F(Fit, CrossGeometryRouteChoosesKByHeldOutNll) {
  FitOptions o = small_options();
  o.recompute_layers = 1;
  const RouteStats st = collect(*big_, *small_, corpus_, o);
  std::vector<std::string> log;
  const MapData data =
      solve_route(st, *big_, *small_, o, [&](const std::string& s) { log.push_back(s); });
  ASSERT_EQ(data.layers.size(), 2u);
  const int64_t k = data.info["k"].get<int64_t>();
  // Candidates 1, 2 and all (3), each with a held-out NLL; the chosen one is the lowest.
  const auto& cands = data.info["k_candidates"];
  ASSERT_EQ(cands.size(), 3u);
  double best = 1e30;
  int64_t best_k = 0;
  for (const auto& c : cands) {
    ASSERT_TRUE(c.contains("heldout_nll")) << c.dump();
    if (c["heldout_nll"].get<double>() < best) best = c["heldout_nll"], best_k = c["k"];
  }
  EXPECT_EQ(k, best_k);
  for (const LayerMap& L : data.layers) {
    EXPECT_EQ(static_cast<int64_t>(L.k_sources.size()), k);
    EXPECT_TRUE(std::is_sorted(L.k_sources.begin(), L.k_sources.end()));
    EXPECT_EQ(static_cast<int64_t>(L.k_weight.size()), small_cfg_.kv_dim() * k * big_cfg_.kv_dim());
  }
  ASSERT_EQ(data.boundaries.size(), 1u);
  EXPECT_EQ(data.boundaries[0].sender_hidden, 2);  // round((2 − 1) · 3 / 2)
  // The fit beats predicting each channel's mean on held-out rows.
  EXPECT_LT(data.info["residuals"]["total"]["k"]["centred"].get<double>(), 1.0);
  EXPECT_TRUE(data.info["residuals"]["total"].contains("k_token_identity"));
  EXPECT_FALSE(log.empty());

  // Apply with recompute and anchors: the cache is filled and finite.
  auto map = CacheMap::from_data(data);
  const std::vector<int32_t> ids = test::random_ids(30, 97, 5);
  KVCache src = big_->new_cache(30, true), dst = small_->new_cache(30);
  big_->forward(ids, src, {});
  TransferOptions t;
  t.recompute_layers = 1;
  t.anchors = 2;
  map->apply(*big_, src, *small_, ids, t, dst);
  EXPECT_EQ(dst.size(), 30);
  for (float v : dst.k(1).subspan(0, 30 * small_cfg_.kv_dim())) ASSERT_TRUE(std::isfinite(v));
}

// The RoPE sandwich's ablation: a map fitted and applied on keys as cached. It says so in its
// metadata and file, keeps it through a write and read, and maps keys without un-rotating or
// re-rotating them (V as the sandwich map does). What it costs is measured on the tiny ladder
// (molt bench run), not on random weights.
TEST_F(Fit, RotatedKeysMapSkipsTheSandwich) {
  FitOptions o = small_options();
  o.k = 3;
  o.embed_tokens = 0;
  FitOptions naive = o;
  naive.rope_sandwich = false;
  const MapData sandwich = solve_route(collect(*big_, *small_, corpus_, o), *big_, *small_, o);
  const RouteStats st = collect(*big_, *small_, corpus_, naive);
  EXPECT_TRUE(st.layout.rotated_keys);
  EXPECT_EQ(st.layout.token_vocab, 0);  // no floor on rotated keys
  const MapData data = solve_route(st, *big_, *small_, naive);
  EXPECT_EQ(data.info["keys"], "rotated");
  EXPECT_EQ(data.info["residuals"]["keys"], "rotated");
  EXPECT_FALSE(sandwich.info.contains("keys"));

  test::TempDir out;
  write_map_dir(out.path(), data);
  const MapData back = read_map_dir(out.path());
  EXPECT_EQ(back.info["keys"], "rotated");

  // The same weights read as a sandwich map: V the same, K not (its rotations differ).
  MapData as_sandwich = back;
  as_sandwich.info.erase("keys");
  const std::vector<int32_t> ids = test::random_ids(30, 97, 5);
  KVCache src = big_->new_cache(30);
  big_->forward(ids, src, {});
  KVCache a = small_->new_cache(30), b = small_->new_cache(30);
  CacheMap::from_data(back)->apply(*big_, src, *small_, ids, {}, a);
  CacheMap::from_data(as_sandwich)->apply(*big_, src, *small_, ids, {}, b);
  const int64_t n = 30 * small_cfg_.kv_dim();
  for (int64_t l = 0; l < 2; ++l) {
    EXPECT_EQ(test::max_abs_diff(a.v(l), b.v(l), n), 0.0) << l;
    EXPECT_GT(test::max_abs_diff(a.k(l), b.k(l), n), 1e-3) << l;
    for (float v : a.k(l).subspan(0, static_cast<size_t>(n))) ASSERT_TRUE(std::isfinite(v));
  }
}

TEST_F(Fit, TokenIdentityFloorIsExactWhereKvDependOnTheTokenAlone) {
  // Layer 0's keys (un-rotated) and values are functions of the token id alone: with every id
  // seen in training, the token-identity floor reproduces them on held-out rows.
  test::write_ids_file(dir_ / "few.txt", 8 * 40, 12, 5);
  FitOptions o = small_options();
  o.k = 1;
  const MapData data = solve_route(collect(*big_, *small_, dir_ / "few.txt", o), *big_, *small_, o);
  const auto& layers = data.info["residuals"]["layers"];
  EXPECT_LT(layers[0]["k_token_identity"]["rel_rms"].get<double>(), 1e-5);
  EXPECT_LT(layers[0]["v_token_identity"]["rel_rms"].get<double>(), 1e-5);
  // Deeper layers depend on context: the floor leaves a residual there.
  EXPECT_GT(layers[1]["v_token_identity"]["rel_rms"].get<double>(), 1e-3);
}

// Token features (issue 21): fitted, stored in a version-2 map file, read back and applied as
// the formula says, checked against a reference built here from the model's own parts.
TEST_F(Fit, TokenFeaturesAreFittedStoredAndAppliedAsTheFormulaSays) {
  FitOptions o = small_options();
  o.k = 1;
  o.embed_tokens = 2;
  const RouteStats st = collect(*big_, *small_, corpus_, o);
  EXPECT_EQ(st.layout.embed_tokens, 2);
  EXPECT_EQ(st.train.k.dim_x, 3 * big_cfg_.kv_dim() + 2 * small_cfg_.hidden_size);
  const MapData data = solve_route(st, *big_, *small_, o);
  const int64_t H = small_cfg_.hidden_size, kvs = big_cfg_.kv_dim(), kvr = small_cfg_.kv_dim();
  EXPECT_EQ(data.features.embed_tokens, 2);
  for (const LayerMap& L : data.layers) {
    EXPECT_EQ(L.embed_in, 2 * H);
    EXPECT_EQ(static_cast<int64_t>(L.k_weight.size()), kvr * (kvs + 2 * H));
    EXPECT_EQ(static_cast<int64_t>(L.v_weight.size()), kvr * (kvs + 2 * H));
  }
  EXPECT_EQ(data.info["k_candidates"][0]["embed_tokens"].get<int64_t>(), 2);
  EXPECT_NE(data.info["input"].get<std::string>().find("embeddings"), std::string::npos);

  // Round trip through the map file: features in the metadata, weights bit for bit.
  test::TempDir d;
  write_map_dir(d / "map", data);
  auto header = SafetensorsFile::open(d / "map" / "map.safetensors");
  EXPECT_EQ(header->metadata().at("format_version"), "4");
  EXPECT_EQ(nlohmann::json::parse(header->metadata().at("features")),
            (nlohmann::json{{"embed_tokens", 2}, {"sender_kv", "separate"}, {"native_layers", 0}}));
  // Ridge weights ship as BF16 (the fit rounded them, so the file holds exactly these values).
  EXPECT_EQ(data.weight_dtype, DType::BF16);
  EXPECT_EQ(header->find("layers.0.k.heads.0.weight")->dtype, DType::BF16);
  EXPECT_EQ(header->find("layers.0.k.heads.0.bias")->dtype, DType::F32);
  const MapData back = read_map_dir(d / "map");
  EXPECT_EQ(back.weight_dtype, DType::BF16);
  EXPECT_EQ(back.features.embed_tokens, 2);
  for (size_t j = 0; j < back.layers.size(); ++j) {
    EXPECT_EQ(back.layers[j].embed_in, 2 * H);
    EXPECT_EQ(back.layers[j].k_weight, data.layers[j].k_weight) << j;
    EXPECT_EQ(back.layers[j].v_bias, data.layers[j].v_bias) << j;
  }

  // Applied to one window: receiver layer j's key at p is W [K_s(p) un-rotated, ê(t_p),
  // ê(t_{p−1}) or 0] + b, rotated at the receiver's angles; ê = e / rms(e) of the receiver's
  // embedding row.
  auto map = CacheMap::load(d / "map", *big_, *small_);
  const int64_t T = 24;
  const std::vector<int32_t> ids = test::random_ids(T, 97, 31);
  KVCache src = big_->new_cache(T), dst = small_->new_cache(T);
  big_->forward(ids, src, {});
  map->apply(*big_, src, *small_, ids, {}, dst);
  std::vector<float> emb(static_cast<size_t>(T * H));
  small_->embed(ids, emb);
  std::vector<double> normed(emb.size());
  for (int64_t p = 0; p < T; ++p) {
    double ss = 0;
    for (int64_t c = 0; c < H; ++c) ss += double(emb[p * H + c]) * emb[p * H + c];
    const double inv = 1.0 / std::sqrt(ss / double(H) + small_cfg_.rms_norm_eps);
    for (int64_t c = 0; c < H; ++c) normed[p * H + c] = emb[p * H + c] * inv;
  }
  for (int64_t j = 0; j < 2; ++j) {
    const LayerMap& L = back.layers[j];
    const int64_t s = L.k_sources.at(0), in = kvs + 2 * H;
    std::vector<float> ks(src.k(s).begin(), src.k(s).begin() + T * kvs);
    unrotate_keys(big_->rope(), ks.data(), T, big_cfg_.num_key_value_heads);
    std::vector<float> want(static_cast<size_t>(T * kvr));
    for (int64_t p = 0; p < T; ++p) {
      for (int64_t o2 = 0; o2 < kvr; ++o2) {
        double y = L.k_bias[o2];
        const float* w = L.k_weight.data() + o2 * in;
        for (int64_t c = 0; c < kvs; ++c) y += double(w[c]) * ks[p * kvs + c];
        for (int64_t lag = 0; lag < 2 && p - lag >= 0; ++lag) {
          for (int64_t c = 0; c < H; ++c)
            y += double(w[kvs + lag * H + c]) * normed[(p - lag) * H + c];
        }
        want[p * kvr + o2] = static_cast<float>(y);
      }
    }
    rotate_keys(small_->rope(), want.data(), T, small_cfg_.num_key_value_heads);
    EXPECT_LT(test::max_abs_diff(dst.k(j), want, T * kvr), 1e-4 * test::max_abs(want, T * kvr))
        << "layer " << j;
  }
  // The loaded map keeps its weights at 16 bits; the same values held as f32 give the same cache.
  MapData as_f32 = back;
  as_f32.weight_dtype = DType::F32;
  KVCache dst_f32 = small_->new_cache(T);
  CacheMap::from_data(as_f32)->apply(*big_, src, *small_, ids, {}, dst_f32);
  for (int64_t j = 0; j < 2; ++j) {
    EXPECT_LT(test::max_abs_diff(dst.v(j), dst_f32.v(j), T * kvr),
              1e-5 * test::max_abs(dst_f32.v(j), T * kvr))
        << j;
  }
  EXPECT_TRUE(map->data().layers[0].k_weight.empty()) << "the f32 copy is kept beside the BF16";
  // Without the token ids the map cannot build its features: refused, not guessed.
  KVCache dst2 = small_->new_cache(T);
  EXPECT_THROW(map->apply(*big_, src, *small_, {}, {}, dst2), Error);
}

// Native layers (issue 21): the receiver's first layer runs natively over the carried tokens,
// and the token features are its RMS-normalised hidden states entering layer 1 instead of the
// embeddings. Fitted, stored in a version-4 map file, read back, and applied as the formula
// says: layer 0 holds the receiver's own rows, layer 1 W [K_s(p), ĥ(p), ĥ(p−1)] + b.
TEST_F(Fit, NativeLayersFeedTheirHiddenStatesAndKeepTheReceiversOwnRows) {
  FitOptions o = small_options();
  o.k = 1;
  o.embed_tokens = 2;
  o.native_layers = 1;
  const RouteStats st = collect(*big_, *small_, corpus_, o);
  EXPECT_EQ(st.layout.native_layers, 1);
  const MapData data = solve_route(st, *big_, *small_, o);
  const int64_t H = small_cfg_.hidden_size, kvs = big_cfg_.kv_dim(), kvr = small_cfg_.kv_dim();
  EXPECT_EQ(data.features.native_layers, 1);
  EXPECT_NE(data.info["input"].get<std::string>().find("hidden states entering layer 1"),
            std::string::npos);
  EXPECT_TRUE(data.info["residuals"]["layers"][0].value("native", false));

  test::TempDir d;
  write_map_dir(d / "map", data);
  auto header = SafetensorsFile::open(d / "map" / "map.safetensors");
  EXPECT_EQ(header->metadata().at("format_version"), "4");
  EXPECT_EQ(nlohmann::json::parse(header->metadata().at("features")),
            (nlohmann::json{{"embed_tokens", 2}, {"sender_kv", "separate"}, {"native_layers", 1}}));
  const MapData back = read_map_dir(d / "map");
  EXPECT_EQ(back.features.native_layers, 1);
  EXPECT_EQ(back.layers[1].k_weight, data.layers[1].k_weight);

  auto map = CacheMap::load(d / "map", *big_, *small_);
  const int64_t T = 24;
  const std::vector<int32_t> ids = test::random_ids(T, 97, 37);
  KVCache src = big_->new_cache(T), dst = small_->new_cache(T);
  big_->forward(ids, src, {});
  std::vector<float> native_hidden;
  map->apply(*big_, src, *small_, ids, {}, dst, &native_hidden);
  // The receiver reading the tokens itself: its layer-0 rows and the hidden states entering
  // layer 1.
  KVCache nat = small_->new_cache(T, /*keep_hidden=*/true);
  small_->forward(ids, nat, {});
  // What heal goes on from: the hidden states entering layer 1, as the native forward has them.
  ASSERT_EQ(std::ssize(native_hidden), T * H);
  EXPECT_LT(test::max_abs_diff(native_hidden, std::as_const(nat).hidden(1), T * H),
            1e-5 * test::max_abs(std::as_const(nat).hidden(1), T * H));
  EXPECT_LT(test::max_abs_diff(dst.k(0), nat.k(0), T * kvr),
            1e-5 * test::max_abs(nat.k(0), T * kvr));
  EXPECT_LT(test::max_abs_diff(dst.v(0), nat.v(0), T * kvr),
            1e-5 * test::max_abs(nat.v(0), T * kvr));
  std::vector<double> normed(static_cast<size_t>(T * H));
  const std::span<const float> h1 = std::as_const(nat).hidden(1);
  for (int64_t p = 0; p < T; ++p) {
    double ss = 0;
    for (int64_t c = 0; c < H; ++c) ss += double(h1[p * H + c]) * h1[p * H + c];
    const double inv = 1.0 / std::sqrt(ss / double(H) + small_cfg_.rms_norm_eps);
    for (int64_t c = 0; c < H; ++c) normed[p * H + c] = h1[p * H + c] * inv;
  }
  const LayerMap& L = back.layers[1];
  for (const bool keys : {true, false}) {
    const int64_t s = (keys ? L.k_sources : L.v_sources).at(0), in = kvs + 2 * H;
    std::vector<float> xs(static_cast<size_t>(T * kvs));
    if (keys) {
      std::copy_n(src.k(s).begin(), T * kvs, xs.begin());
      unrotate_keys(big_->rope(), xs.data(), T, big_cfg_.num_key_value_heads);
    } else {
      std::copy_n(src.v(s).begin(), T * kvs, xs.begin());
    }
    const std::vector<float>& w = keys ? L.k_weight : L.v_weight;
    const std::vector<float>& b = keys ? L.k_bias : L.v_bias;
    std::vector<float> want(static_cast<size_t>(T * kvr));
    for (int64_t p = 0; p < T; ++p) {
      for (int64_t o2 = 0; o2 < kvr; ++o2) {
        double y = b[o2];
        const float* wr = w.data() + o2 * in;
        for (int64_t c = 0; c < kvs; ++c) y += double(wr[c]) * xs[p * kvs + c];
        for (int64_t lag = 0; lag < 2 && p - lag >= 0; ++lag) {
          for (int64_t c = 0; c < H; ++c)
            y += double(wr[kvs + lag * H + c]) * normed[(p - lag) * H + c];
        }
        want[p * kvr + o2] = static_cast<float>(y);
      }
    }
    if (keys) rotate_keys(small_->rope(), want.data(), T, small_cfg_.num_key_value_heads);
    const std::span<const float> got = keys ? dst.k(1) : dst.v(1);
    EXPECT_LT(test::max_abs_diff(got, want, T * kvr), 1e-4 * test::max_abs(want, T * kvr))
        << (keys ? "keys" : "values");
  }

  // The same statistics solve the reference ridge (no features, no native layers), and nothing
  // between: hidden-state features without their native layers would be garbage.
  FitOptions ref = o;
  ref.native_layers = 0;
  ref.embed_tokens = 0;
  EXPECT_EQ(solve_route(st, *big_, *small_, ref).features.native_layers, 0);
  ref.embed_tokens = 2;
  EXPECT_THROW(solve_route(st, *big_, *small_, ref), Error);
  // Native layers are whole receiver layers, below its depth, and feed ridge maps only.
  FitOptions bad = small_options();
  bad.native_layers = small_cfg_.num_hidden_layers;
  EXPECT_THROW(collect(*big_, *small_, corpus_, bad), Error);
  bad.native_layers = 1;
  bad.method = "depth-remap";
  EXPECT_THROW(collect(*big_, *small_, corpus_, bad), Error);
}

// The sender's K and V read together (issue 21): each K and V map reads the un-rotated keys
// and then the values of its source layers, then the token features; fitted, stored in a
// version-3 map file, read back, and applied as the formula says.
TEST_F(Fit, SenderKeysAndValuesTogetherAreFittedStoredAndApplied) {
  FitOptions o = small_options();
  o.k = 1;
  o.embed_tokens = 1;
  o.sender_kv = "joint";
  const RouteStats st = collect(*big_, *small_, corpus_, o);
  const int64_t H = small_cfg_.hidden_size, kvs = big_cfg_.kv_dim(), kvr = small_cfg_.kv_dim();
  const int64_t Ls = big_cfg_.num_hidden_layers;
  EXPECT_TRUE(st.layout.joint_kv);
  EXPECT_EQ(st.train.k.dim_x, 2 * Ls * kvs + H);
  EXPECT_EQ(st.train.v.dim_x, 2 * Ls * kvs + H);
  const MapData data = solve_route(st, *big_, *small_, o);
  EXPECT_TRUE(data.features.joint_kv);
  const int64_t in = 2 * kvs + H;
  for (const LayerMap& L : data.layers) {
    EXPECT_TRUE(L.joint_kv);
    EXPECT_EQ(L.k_in(), in);
    EXPECT_EQ(static_cast<int64_t>(L.k_weight.size()), kvr * in);
    EXPECT_EQ(static_cast<int64_t>(L.v_weight.size()), kvr * in);
  }
  EXPECT_EQ(data.info["k_candidates"][0]["sender_kv"], "joint");
  EXPECT_NE(data.info["input"].get<std::string>().find("then their values"), std::string::npos);

  test::TempDir d;
  write_map_dir(d / "map", data);
  auto header = SafetensorsFile::open(d / "map" / "map.safetensors");
  EXPECT_EQ(header->metadata().at("format_version"), "4");
  EXPECT_EQ(nlohmann::json::parse(header->metadata().at("features")),
            (nlohmann::json{{"embed_tokens", 1}, {"sender_kv", "joint"}, {"native_layers", 0}}));
  const MapData back = read_map_dir(d / "map");
  EXPECT_TRUE(back.features.joint_kv);
  for (size_t j = 0; j < back.layers.size(); ++j) {
    EXPECT_TRUE(back.layers[j].joint_kv);
    EXPECT_EQ(back.layers[j].k_weight, data.layers[j].k_weight) << j;
    EXPECT_EQ(back.layers[j].v_weight, data.layers[j].v_weight) << j;
  }

  // Applied to one window: receiver layer j's key at p is W [K_s(p) un-rotated, V_s(p), ê(t_p)]
  // + b, rotated at the receiver's angles; its value the same with the V map's source and weights.
  auto map = CacheMap::load(d / "map", *big_, *small_);
  const int64_t T = 20;
  const std::vector<int32_t> ids = test::random_ids(T, 97, 33);
  KVCache src = big_->new_cache(T), dst = small_->new_cache(T);
  big_->forward(ids, src, {});
  map->apply(*big_, src, *small_, ids, {}, dst);
  std::vector<float> emb(static_cast<size_t>(T * H));
  small_->embed(ids, emb);
  for (int64_t j = 0; j < small_cfg_.num_hidden_layers; ++j) {
    const LayerMap& L = back.layers[j];
    for (const bool keys : {true, false}) {
      const int64_t s = (keys ? L.k_sources : L.v_sources).at(0);
      std::vector<float> ks(src.k(s).begin(), src.k(s).begin() + T * kvs);
      unrotate_keys(big_->rope(), ks.data(), T, big_cfg_.num_key_value_heads);
      const std::vector<float>& w = keys ? L.k_weight : L.v_weight;
      const std::vector<float>& b = keys ? L.k_bias : L.v_bias;
      std::vector<float> want(static_cast<size_t>(T * kvr));
      for (int64_t p = 0; p < T; ++p) {
        double ss = 0;
        for (int64_t c = 0; c < H; ++c) ss += double(emb[p * H + c]) * emb[p * H + c];
        const double inv = 1.0 / std::sqrt(ss / double(H) + small_cfg_.rms_norm_eps);
        for (int64_t o2 = 0; o2 < kvr; ++o2) {
          const float* row = w.data() + o2 * in;
          double y = b[o2];
          for (int64_t c = 0; c < kvs; ++c) y += double(row[c]) * ks[p * kvs + c];
          for (int64_t c = 0; c < kvs; ++c) y += double(row[kvs + c]) * src.v(s)[p * kvs + c];
          for (int64_t c = 0; c < H; ++c) y += double(row[2 * kvs + c]) * emb[p * H + c] * inv;
          want[p * kvr + o2] = static_cast<float>(y);
        }
      }
      if (keys) rotate_keys(small_->rope(), want.data(), T, small_cfg_.num_key_value_heads);
      const auto got = keys ? dst.k(j) : dst.v(j);
      EXPECT_LT(test::max_abs_diff(got, want, T * kvr), 1e-4 * test::max_abs(want, T * kvr))
          << (keys ? "K" : "V") << " of layer " << j;
    }
  }

  // The same statistics solve maps that read K and V apart: the separate statistics' maps.
  FitOptions apart = o;
  apart.sender_kv = "separate";
  const MapData from_joint = solve_route(st, *big_, *small_, apart);
  const MapData from_separate =
      solve_route(collect(*big_, *small_, corpus_, apart), *big_, *small_, apart);
  EXPECT_FALSE(from_joint.features.joint_kv);
  for (const char* kv : {"k", "v"}) {
    EXPECT_NEAR(from_joint.info["residuals"]["total"][kv]["rel_rms"].get<double>(),
                from_separate.info["residuals"]["total"][kv]["rel_rms"].get<double>(), 1e-6)
        << kv;
  }
  // auto tries both and keeps the one with the lower held-out prefix NLL.
  FitOptions either = o;
  either.sender_kv = "auto";
  const MapData chosen = solve_route(st, *big_, *small_, either);
  const auto& cands = chosen.info["k_candidates"];
  ASSERT_EQ(cands.size(), 2u);
  EXPECT_EQ(cands[0]["sender_kv"], "separate");
  EXPECT_EQ(cands[1]["sender_kv"], "joint");
  const bool joint_wins =
      cands[1]["heldout_nll"].get<double>() < cands[0]["heldout_nll"].get<double>();
  EXPECT_EQ(chosen.features.joint_kv, joint_wins);
  // Statistics with K and V apart cannot give joint maps; other methods read one kind.
  EXPECT_THROW(solve_route(collect(*big_, *small_, corpus_, apart), *big_, *small_, o), Error);
  FitOptions remap = o;
  remap.method = "depth-remap";
  remap.embed_tokens = 0;
  EXPECT_THROW(make_layout(*big_, *small_, remap), Error);
  FitOptions bad = o;
  bad.sender_kv = "both";
  EXPECT_THROW(make_layout(*big_, *small_, bad), Error);
}

TEST_F(Fit, TokenFeaturesMakeTheFirstLayerExactAndAreChosenByHeldOutNll) {
  // Receiver layer 0's un-rotated K and V are affine in the normed embedding of the token
  // (RMSNorm, then the projections): with the token's own feature the ridge reproduces them.
  FitOptions o = small_options();
  o.k = 1;
  o.lambda = 1e-9;
  o.embed_tokens = kAutoEmbedTokens;
  const RouteStats st = collect(*big_, *small_, corpus_, o);
  EXPECT_EQ(st.layout.embed_tokens, 3);
  const MapData data = solve_route(st, *big_, *small_, o);
  const auto& cands = data.info["k_candidates"];
  ASSERT_EQ(cands.size(), 3u);  // k = 1 with 0, 1 and 3 token features
  double best = 1e30;
  int64_t best_e = -1;
  for (size_t i = 0; i < cands.size(); ++i) {
    const int64_t want_e[] = {0, 1, 3};
    EXPECT_EQ(cands[i]["embed_tokens"].get<int64_t>(), want_e[i]);
    ASSERT_TRUE(cands[i].contains("heldout_nll")) << cands[i].dump();
    if (cands[i]["heldout_nll"].get<double>() < best) {
      best = cands[i]["heldout_nll"];
      best_e = cands[i]["embed_tokens"];
    }
  }
  EXPECT_EQ(data.features.embed_tokens, best_e);
  FitOptions one = o;
  one.embed_tokens = 1;
  const MapData exact = solve_route(collect(*big_, *small_, corpus_, one), *big_, *small_, one);
  const auto& layer0 = exact.info["residuals"]["layers"][0];
  EXPECT_LT(layer0["k"]["rel_rms"].get<double>(), 1e-3);
  EXPECT_LT(layer0["v"]["rel_rms"].get<double>(), 1e-3);
  FitOptions none = o;
  none.embed_tokens = 0;
  const MapData without = solve_route(collect(*big_, *small_, corpus_, none), *big_, *small_, none);
  EXPECT_GT(without.info["residuals"]["layers"][0]["v"]["rel_rms"].get<double>(), 1e-2);
}

TEST_F(Fit, TokenFeaturesApplyToRidgeOnly) {
  FitOptions o = small_options();
  o.method = "depth-remap";
  o.embed_tokens = 1;
  EXPECT_THROW(make_layout(*big_, *small_, o), Error);
  o.method = "ridge";
  o.embed_tokens = 17;
  EXPECT_THROW(make_layout(*big_, *small_, o), Error);
}

TEST_F(Fit, DepthRemapReadsTheProportionalLayer) {
  FitOptions o = small_options();
  o.method = "depth-remap";
  const MapData data = solve_route(collect(*big_, *small_, corpus_, o), *big_, *small_, o);
  ASSERT_EQ(data.layers.size(), 2u);
  EXPECT_EQ(data.layers[0].k_sources, std::vector<int64_t>{0});  // ⌊0.5 · 3 / 2⌋
  EXPECT_EQ(data.layers[1].k_sources, std::vector<int64_t>{2});  // ⌊1.5 · 3 / 2⌋
  EXPECT_EQ(data.layers[1].v_sources, std::vector<int64_t>{2});
  EXPECT_EQ(data.info["k"].get<int64_t>(), 1);
}

TEST_F(Fit, DiagonalRealignsTheSameWeightsAtAnotherPrecision) {
  test::TempDir d;
  auto bf16 = test::tiny_model(d.path(), big_cfg_, 3, DType::BF16);  // same seed, bf16 weights
  FitOptions o = small_options();
  o.method = "diagonal";
  const MapData data = solve_route(collect(*big_, *bf16, corpus_, o), *big_, *bf16, o);
  EXPECT_EQ(data.method, "diagonal");
  const double res = data.info["residuals"]["total"]["k"]["rel_rms"].get<double>();
  EXPECT_LT(res, 0.05);
  // The re-aligned cache is at least as close to the bf16 model's own cache as a plain copy.
  auto map = CacheMap::from_data(data);
  const std::vector<int32_t> ids = test::random_ids(40, 97, 8);
  KVCache src = big_->new_cache(40), dst = bf16->new_cache(40), own = bf16->new_cache(40);
  big_->forward(ids, src, {});
  bf16->forward(ids, own, {});
  map->apply(*big_, src, *bf16, ids, {}, dst);
  double copy_err = 0, map_err = 0;
  const int64_t kv = big_cfg_.kv_dim();
  for (int64_t l = 0; l < 3; ++l) {
    for (int64_t i = 0; i < 40 * kv; ++i) {
      copy_err += std::pow(src.v(l)[i] - own.v(l)[i], 2);
      map_err += std::pow(dst.v(l)[i] - own.v(l)[i], 2);
    }
  }
  EXPECT_LE(map_err, copy_err * 1.05);
  // Different geometries cannot be re-aligned diagonally.
  EXPECT_THROW(make_layout(*big_, *small_, o), Error);
}

TEST_F(Fit, MergedShardsEqualOneRun) {
  FitOptions o = small_options();
  o.k = 2;
  const RouteStats one = collect(*big_, *small_, corpus_, o);
  o.shard_count = 3;
  RouteStats merged;
  for (int64_t s = 0; s < 3; ++s) {
    o.shard_index = s;
    RouteStats part = collect(*big_, *small_, corpus_, o);
    const std::filesystem::path f = dir_ / ("stats-" + std::to_string(s));
    part.save(f);
    RouteStats loaded = RouteStats::load(f);
    if (s == 0) {
      merged = std::move(loaded);
    } else {
      merged.merge(loaded, f.string());
    }
  }
  EXPECT_EQ(merged.shards_merged, (std::vector<int64_t>{0, 1, 2}));
  EXPECT_EQ(merged.train.sequences, one.train.sequences);
  EXPECT_EQ(merged.heldout.sequences, one.heldout.sequences);
  ASSERT_EQ(merged.select_windows.size(), one.select_windows.size());
  for (size_t i = 0; i < one.select_windows.size(); ++i) {
    EXPECT_EQ(merged.select_windows[i], one.select_windows[i]);
  }
  std::vector<std::pair<std::string, std::vector<double>>> a, b;
  for_each_array(const_cast<RouteStats&>(one), [&](const std::string& n, double* p, size_t c) {
    a.emplace_back(n, std::vector<double>(p, p + c));
  });
  for_each_array(merged, [&](const std::string& n, double* p, size_t c) {
    b.emplace_back(n, std::vector<double>(p, p + c));
  });
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i].first, b[i].first);
    for (size_t e = 0; e < a[i].second.size(); ++e) {
      ASSERT_NEAR(a[i].second[e], b[i].second[e], 1e-10 * (1 + std::abs(a[i].second[e])))
          << a[i].first;
    }
  }
  // The maps solved from both agree.
  const MapData m1 = solve_route(one, *big_, *small_, o);
  o.shard_index = 0;
  const MapData m2 = solve_route(merged, *big_, *small_, o);
  for (size_t j = 0; j < m1.layers.size(); ++j) {
    EXPECT_EQ(m1.layers[j].k_sources, m2.layers[j].k_sources);
    for (size_t i = 0; i < m1.layers[j].k_weight.size(); ++i) {
      ASSERT_NEAR(m1.layers[j].k_weight[i], m2.layers[j].k_weight[i], 1e-4);
    }
  }
  // A shard twice, a missing shard, or another setting is refused.
  RouteStats again = RouteStats::load(dir_ / "stats-1");
  EXPECT_THROW(merged.merge(again, "stats-1"), Error);
  RouteStats lone = RouteStats::load(dir_ / "stats-0");
  try {
    solve_route(lone, *big_, *small_, o);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("1 of 3 shards"), std::string::npos) << e.what();
  }
  RouteStats other = RouteStats::load(dir_ / "stats-2");
  other.settings["lambda"] = 0.5;
  EXPECT_THROW(lone.merge(other, "x"), Error);
}

TEST_F(Fit, StatisticsSizeDoesNotGrowWithTheCorpus) {
  FitOptions o = small_options();
  o.sequences = 2;
  collect(*big_, *small_, corpus_, o).save(dir_ / "a");
  o.sequences = 8;
  collect(*big_, *small_, corpus_, o).save(dir_ / "b");
  // Only the kept held-out windows (≤ select_windows of seq_len ids) differ in the header.
  const auto sa = std::filesystem::file_size(dir_ / "a"),
             sb = std::filesystem::file_size(dir_ / "b");
  EXPECT_LT(sb - sa, 2u * 40 * 4 + 200);
}

TEST_F(Fit, BadStatisticsFilesAreRefused) {
  FitOptions o = small_options();
  collect(*big_, *small_, corpus_, o).save(dir_ / "s");
  std::filesystem::resize_file(dir_ / "s", std::filesystem::file_size(dir_ / "s") - 8);
  try {
    RouteStats::load(dir_ / "s");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("truncated"), std::string::npos) << e.what();
  }
  test::write_file(dir_ / "junk", "not a stats file at all");
  EXPECT_THROW(RouteStats::load(dir_ / "junk"), Error);
}

TEST_F(Fit, EvaluationOfAnExactTransferHasNoGap) {
  const std::vector<std::vector<int32_t>> windows = {test::random_ids(30, 97, 1),
                                                     test::random_ids(30, 97, 2)};
  auto exact = CacheMap::from_data(test::identity_map(*big_));
  TokenFloorSums sums(big_->cache_geometry(), big_cfg_.vocab_size);
  sums.add_window(*big_, test::random_ids(60, 97, 3), 1);  // calibration text, not the windows
  const TokenIdentityCache tid(*big_, sums.finish(RungSpec::of(*big_, "big"), {}));
  std::vector<Condition> conds = {
      {"map", [&](const KVCache& s, std::span<const int32_t> t,
                  KVCache& d) { exact->apply(*big_, s, *big_, t, {}, d); }},
      {"zero", [&](const KVCache& s, std::span<const int32_t>,
                   KVCache& d) { fill_zero_cache(s.size(), d); }},
      {"token-identity",
       [&](const KVCache&, std::span<const int32_t> t, KVCache& d) { tid.fill(t, d); }}};
  const TransferEval ev = evaluate_transfer(*big_, *big_, windows, 20, conds, false);
  EXPECT_EQ(ev.windows, 2);
  EXPECT_EQ(ev.scored_tokens, 2 * 9);
  EXPECT_NEAR(ev.conditions[0].nll_gap, 0.0, 1e-4);
  EXPECT_NEAR(ev.conditions[0].transfer_kl, 0.0, 1e-6);
  EXPECT_NEAR(ev.native_seam_kl, 0.0, 1e-6);  // sender = receiver
  EXPECT_GT(ev.conditions[1].transfer_kl, 1e-4);
  EXPECT_GT(ev.conditions[2].transfer_kl, 1e-6);
  EXPECT_NEAR(ev.sender_nll, ev.native_nll, 1e-5);
}

}  // namespace
}  // namespace molt
