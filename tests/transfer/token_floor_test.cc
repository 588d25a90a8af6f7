// The token-identity floor (DESIGN.md §6): fitted on calibration text, stored beside the map with
// its checksum, equal to a plain reference computation, and blind to the evaluation windows.
#include "molt/transfer/token_floor.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "molt/common/error.h"
#include "molt/transfer/corpus.h"
#include "molt/transfer/fit.h"
#include "molt/transfer/rope_sandwich.h"
#include "route_fixture.h"

namespace molt {
namespace {

constexpr int64_t kWindows = 6, kLen = 40, kStride = 2;

// Per-token means over windows cut from `ids` the way TokenStream does (consecutive, whole
// windows only), keys un-rotated, rows at positions 0, stride, ... — written out plainly.
struct Reference {
  std::map<int32_t, std::vector<double>> k, v;  // [L·kv] sums per id
  std::map<int32_t, double> n;
  std::vector<double> all_k, all_v;
  double all_n = 0;
};

Reference reference(const Model& m, const std::vector<int32_t>& ids) {
  const CacheGeometry g = m.cache_geometry();
  const int64_t kv = g.kv_dim(), M = g.n_layers * kv;
  Reference r;
  r.all_k.assign(static_cast<size_t>(M), 0.0);
  r.all_v = r.all_k;
  for (int64_t w = 0; w < kWindows; ++w) {
    const std::vector<int32_t> win(ids.begin() + w * kLen, ids.begin() + (w + 1) * kLen);
    KVCache c = m.new_cache(kLen);
    m.forward(win, c, {});
    for (int64_t l = 0; l < g.n_layers; ++l) {
      std::vector<float> keys(c.k(l).begin(), c.k(l).begin() + kLen * kv);
      unrotate_keys(m.rope(), keys.data(), kLen, g.n_kv_heads);
      for (int64_t p = 0; p < kLen; p += kStride) {
        const int32_t t = win[static_cast<size_t>(p)];
        auto& sk = r.k[t];
        auto& sv = r.v[t];
        sk.resize(static_cast<size_t>(M), 0.0);
        sv.resize(static_cast<size_t>(M), 0.0);
        for (int64_t e = 0; e < kv; ++e) {
          sk[l * kv + e] += keys[p * kv + e];
          sv[l * kv + e] += c.v(l)[p * kv + e];
          r.all_k[l * kv + e] += keys[p * kv + e];
          r.all_v[l * kv + e] += c.v(l)[p * kv + e];
        }
        if (l == 0) {
          r.n[t] += 1;
          r.all_n += 1;
        }
      }
    }
  }
  return r;
}

// Within F16 rounding of the reference (half an F16 step, and its subnormal step).
void expect_f16_of(double ref, float got, const std::string& what) {
  ASSERT_LE(std::abs(got - ref), std::abs(ref) * 0x1p-11 + 0x1p-24) << what << ": " << ref;
}

std::vector<int32_t> read_ids(const std::filesystem::path& p) {
  std::ifstream f(p);
  std::vector<int32_t> ids;
  for (int32_t t; f >> t;) ids.push_back(t);
  return ids;
}

class TokenFloorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    big_cfg_ = test::tiny_config(64, 3, 4, 2);
    small_cfg_ = test::tiny_config(48, 2, 2, 1, 500000.0);
    big_ = test::tiny_model(dir_ / "big", big_cfg_, 3);
    small_ = test::tiny_model(dir_ / "small", small_cfg_, 4);
    calib_ = dir_ / "calibration.txt";
    // Calibration ids 0..59 only: ids 60..96 are never seen.
    test::write_ids_file(calib_, kWindows * kLen + 11, 60, 21);
  }
  TokenFloor fit(const Model& m) const {
    auto stream = TokenStream::ids(calib_);
    return fit_token_floor(m, RungSpec::of(m, "small"), *stream, {kWindows, kLen, kStride},
                           {{"corpus", "calibration.txt"}});
  }
  // A map directory (identity map of `small`) to store the floor beside.
  std::filesystem::path map_dir() const {
    const std::filesystem::path d = dir_ / "maps";
    write_map_dir(d, test::identity_map(*small_));
    return d;
  }
  test::TempDir dir_;
  ModelConfig big_cfg_, small_cfg_;
  std::unique_ptr<Model> big_, small_;
  std::filesystem::path calib_;
};

TEST_F(TokenFloorTest, EqualsTheMeansOfAPlainReferenceOverTheCalibrationWindows) {
  const TokenFloor f = fit(*small_);
  const Reference r = reference(*small_, read_ids(calib_));
  const int64_t kv = small_cfg_.kv_dim();
  std::vector<int32_t> seen;
  for (const auto& [t, n] : r.n) seen.push_back(t);
  ASSERT_EQ(f.ids, seen);  // ascending, exactly the ids at the sampled positions
  EXPECT_EQ(f.info["calibration"]["windows"], kWindows);
  EXPECT_EQ(f.info["calibration"]["rows"], kWindows * kLen / kStride);
  EXPECT_EQ(f.info["calibration"]["distinct_tokens"], static_cast<int64_t>(seen.size()));
  for (int64_t l = 0; l < small_cfg_.num_hidden_layers; ++l) {
    for (size_t i = 0; i < seen.size(); ++i) {
      const double n = r.n.at(seen[i]);
      for (int64_t e = 0; e < kv; ++e) {
        expect_f16_of(r.k.at(seen[i])[l * kv + e] / n, f.k[l][i * kv + e], "k");
        expect_f16_of(r.v.at(seen[i])[l * kv + e] / n, f.v[l][i * kv + e], "v");
      }
    }
    const size_t all = seen.size();  // the last row: the mean over every row
    for (int64_t e = 0; e < kv; ++e) {
      expect_f16_of(r.all_k[l * kv + e] / r.all_n, f.k[l][all * kv + e], "all k");
      expect_f16_of(r.all_v[l * kv + e] / r.all_n, f.v[l][all * kv + e], "all v");
    }
  }
}

TEST_F(TokenFloorTest, FitStatisticsGiveTheFloorTheReceiverAloneGives) {
  // `molt fit` derives the floor from its per-token sums (training + held-out windows);
  // `molt fit floor` re-reads the same windows with the receiver alone.
  FitOptions o;
  o.sequences = kWindows;
  o.seq_len = kLen;
  o.stride = kStride;
  o.heldout_every = 3;
  auto stream = TokenStream::ids(calib_);
  const RouteStats st = collect_stats(*big_, *small_, *stream, o);
  const TokenFloor a = token_floor_from_stats(st, RungSpec::of(*small_, "small"), {});
  const TokenFloor b = fit(*small_);
  ASSERT_EQ(a.ids, b.ids);
  EXPECT_EQ(a.info["calibration"], b.info["calibration"]);
  for (size_t l = 0; l < a.k.size(); ++l) {
    for (size_t i = 0; i < a.k[l].size(); ++i) {
      // Sums in another order: at most one F16 step apart.
      ASSERT_LE(std::abs(a.k[l][i] - b.k[l][i]), std::abs(b.k[l][i]) * 0x1p-10 + 0x1p-24);
      ASSERT_LE(std::abs(a.v[l][i] - b.v[l][i]), std::abs(b.v[l][i]) * 0x1p-10 + 0x1p-24);
    }
  }
}

TEST_F(TokenFloorTest, RoundTripsThroughTheMapDirectoryWithItsChecksum) {
  const std::filesystem::path d = map_dir();
  EXPECT_FALSE(has_token_floor(d));  // an old directory: the map alone, and it still loads
  EXPECT_NO_THROW(read_map_dir(d));
  const TokenFloor f = fit(*small_);
  write_token_floor(d, f);
  ASSERT_TRUE(has_token_floor(d));
  const auto index = nlohmann::json::parse(test::read_file(d / "index.json"));
  EXPECT_EQ(index["files"]["floor.safetensors"]["sha256"], sha256_file(d / "floor.safetensors"));
  EXPECT_TRUE(index["files"].contains("map.safetensors"));

  const TokenFloor back = read_token_floor(d);
  EXPECT_EQ(back.ids, f.ids);
  EXPECT_EQ(back.k, f.k);  // the in-memory floor is already F16: bit for bit
  EXPECT_EQ(back.v, f.v);
  EXPECT_EQ(back.sha256, sha256_file(d / "floor.safetensors"));
  EXPECT_EQ(back.info["corpus"], "calibration.txt");
  EXPECT_EQ(back.info["calibration"], f.info["calibration"]);
  const nlohmann::json p = back.provenance();
  EXPECT_EQ(p["file"], (d / "floor.safetensors").string());
  EXPECT_EQ(p["sha256"], back.sha256);
  // F16, and only the rows of ids seen (plus the all-token mean).
  const int64_t rows = static_cast<int64_t>(f.ids.size()) + 1;
  EXPECT_LT(std::filesystem::file_size(d / "floor.safetensors"),
            static_cast<uintmax_t>(rows * small_cfg_.kv_dim() * 2 * 2 * 2 + 4 * rows + 4096));
}

TEST_F(TokenFloorTest, ACorruptOrUnlistedFloorIsRefusedNamingIt) {
  const std::filesystem::path d = map_dir();
  write_token_floor(d, fit(*small_));
  std::string bytes = test::read_file(d / "floor.safetensors");
  bytes[bytes.size() - 3] ^= 0x5a;
  test::write_file(d / "floor.safetensors", bytes);
  try {
    read_token_floor(d);
    FAIL() << "a corrupt floor was read";
  } catch (const Error& e) {
    const std::string w = e.what();
    EXPECT_NE(w.find("floor.safetensors"), std::string::npos) << w;
    EXPECT_NE(w.find("SHA-256"), std::string::npos) << w;
  }
  EXPECT_NO_THROW(read_map_dir(d));  // the map itself is intact (a switch never hashes the floor)

  write_map_dir(d, test::identity_map(*small_));  // a fresh index lists the map alone
  EXPECT_FALSE(has_token_floor(d));
  try {
    read_token_floor(d);
    FAIL() << "an unlisted floor was read";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("does not list floor.safetensors"), std::string::npos)
        << e.what();
  }
}

TEST_F(TokenFloorTest, AFloorOfAnotherReceiverIsRefused) {
  const std::filesystem::path d = map_dir();
  write_token_floor(d, fit(*small_));
  try {
    const TokenIdentityCache t(*big_, read_token_floor(d));
    FAIL() << "a floor of another geometry was accepted";
  } catch (const Error& e) {
    const std::string w = e.what();
    EXPECT_NE(w.find("floor.safetensors"), std::string::npos) << w;
    EXPECT_NE(w.find("another receiver"), std::string::npos) << w;
  }
}

TEST_F(TokenFloorTest, FillingNeverLooksAtTheEvaluationWindows) {
  // Evaluation ids 60..96 never occur in calibration: every position gets the all-token mean,
  // however often the evaluation text repeats them. A floor built from these windows (the old
  // leak) would hold their own rows instead.
  const TokenFloor f = fit(*small_);
  const TokenIdentityCache tid(*small_, f);
  std::vector<int32_t> eval = test::random_ids(30, 37, 5);
  for (int32_t& t : eval) t += 60;
  eval[7] = f.ids[3];  // one id calibration did see: its own row
  KVCache c = small_->new_cache(30);
  tid.fill(eval, c);
  const int64_t kv = small_cfg_.kv_dim(), all = static_cast<int64_t>(f.ids.size());
  for (int64_t l = 0; l < small_cfg_.num_hidden_layers; ++l) {
    std::vector<float> keys(c.k(l).begin(), c.k(l).begin() + 30 * kv);
    unrotate_keys(small_->rope(), keys.data(), 30, small_cfg_.num_key_value_heads);
    for (int64_t p = 0; p < 30; ++p) {
      const int64_t row = p == 7 ? 3 : all;
      for (int64_t e = 0; e < kv; ++e) {
        ASSERT_NEAR(keys[p * kv + e], f.k[l][row * kv + e], 1e-4) << l << " " << p;
        ASSERT_EQ(c.v(l)[p * kv + e], f.v[l][row * kv + e]) << l << " " << p;
      }
    }
  }
}

}  // namespace
}  // namespace molt
