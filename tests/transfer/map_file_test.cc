// Map files: shapes, metadata and checksums round-trip; loading refuses corrupt files and
// maps of another route with errors that name the file and the field.
#include "molt/transfer/map_file.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "molt/common/error.h"
#include "molt/formats/safetensors.h"
#include "molt/transfer/transfer.h"
#include "route_fixture.h"

namespace molt {
namespace {

// A map with distinct values everywhere, for a 3-layer sender → 2-layer receiver.
MapData sample_map(const Model& s, const Model& r) {
  MapData m;
  m.method = "ridge";
  m.sender = RungSpec::of(s, "big");
  m.receiver = RungSpec::of(r, "small");
  const int64_t kvs = s.cache_geometry().kv_dim(), kvr = r.cache_geometry().kv_dim();
  float v = 0.001f;
  auto fill = [&](size_t n) {
    std::vector<float> x(n);
    for (auto& e : x) e = (v += 0.001f);
    return x;
  };
  const std::vector<std::vector<int64_t>> src = {{0, 2}, {1, 2}};
  for (int64_t j = 0; j < 2; ++j) {
    LayerMap L;
    L.kv_s = kvs;
    L.k_sources = src[j];
    L.v_sources = {j};
    L.k_weight = fill(static_cast<size_t>(kvr * L.k_in()));
    L.k_bias = fill(static_cast<size_t>(kvr));
    L.v_weight = fill(static_cast<size_t>(kvr * L.v_in()));
    L.v_bias = fill(static_cast<size_t>(kvr));
    m.layers.push_back(L);
  }
  const int64_t hs = s.cache_geometry().hidden_size, hr = r.cache_geometry().hidden_size;
  m.boundaries.push_back({1, 2, fill(static_cast<size_t>(hr * hs)), fill(static_cast<size_t>(hr))});
  m.info["lambda"] = 0.01;
  m.info["lambda_applied_to"] = "the centred input covariance";
  m.info["k"] = 2;
  m.info["corpus"] = "wiki.txt";
  m.info["calibration"] = {{"seq_len", 1024}, {"stride", 4}};
  return m;
}

class MapFile : public ::testing::Test {
 protected:
  void SetUp() override {
    big_cfg_ = test::tiny_config(64, 3, 4, 2);
    small_cfg_ = test::tiny_config(48, 2, 2, 1, 500000.0);
    big_ = test::tiny_model(dir_ / "big", big_cfg_);
    small_ = test::tiny_model(dir_ / "small", small_cfg_);
    maps_ = dir_ / "maps";
    write_map_dir(maps_, sample_map(*big_, *small_));
  }
  std::string load_error(const Model& s, const Model& r) {
    try {
      CacheMap::load(maps_, s, r);
    } catch (const Error& e) {
      return e.what();
    }
    return "no error";
  }
  test::TempDir dir_;
  ModelConfig big_cfg_, small_cfg_;
  std::unique_ptr<Model> big_, small_;
  std::filesystem::path maps_;
};

TEST_F(MapFile, RoundTripsShapesTensorsAndMetadata) {
  const MapData want = sample_map(*big_, *small_);
  const MapData got = read_map_dir(maps_);
  EXPECT_EQ(got.method, "ridge");
  EXPECT_EQ(got.sender.to_json(), want.sender.to_json());
  EXPECT_EQ(got.receiver.to_json(), want.receiver.to_json());
  ASSERT_EQ(got.layers.size(), 2u);
  for (size_t j = 0; j < 2; ++j) {
    EXPECT_EQ(got.layers[j].k_sources, want.layers[j].k_sources);
    EXPECT_EQ(got.layers[j].v_sources, want.layers[j].v_sources);
    EXPECT_EQ(got.layers[j].k_weight, want.layers[j].k_weight);
    EXPECT_EQ(got.layers[j].k_bias, want.layers[j].k_bias);
    EXPECT_EQ(got.layers[j].v_weight, want.layers[j].v_weight);
    EXPECT_EQ(got.layers[j].v_bias, want.layers[j].v_bias);
  }
  ASSERT_EQ(got.boundaries.size(), 1u);
  EXPECT_EQ(got.boundaries[0].weight, want.boundaries[0].weight);
  EXPECT_EQ(got.boundaries[0].sender_hidden, 2);
  EXPECT_EQ(got.info["lambda"], 0.01);
  EXPECT_EQ(got.info["k"], 2);
  EXPECT_EQ(got.info["corpus"], "wiki.txt");
  EXPECT_EQ(got.info["calibration"]["stride"], 4);

  // The file itself: one tensor per receiver layer, KV head and K/V, as DESIGN.md §5 says.
  auto st = SafetensorsFile::open(maps_ / "map.safetensors");
  const TensorView* w = st->find("layers.1.k.heads.0.weight");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->shape, (std::vector<int64_t>{24, 2 * 32}));  // head_dim_r × (2 sources × kv_s)
  EXPECT_NE(st->find("layers.0.v.heads.0.bias"), nullptr);
  EXPECT_NE(st->find("boundary.r1.weight"), nullptr);
  const auto& meta = st->metadata();
  for (const char* key :
       {"format", "format_version", "method", "sender", "receiver", "sources", "lambda",
        "lambda_applied_to", "k", "calibration", "corpus", "boundary"}) {
    EXPECT_TRUE(meta.count(key)) << key;
  }
  const auto rope = nlohmann::json::parse(meta.at("receiver"))["rope"];
  EXPECT_EQ(rope["theta"], 500000.0);
  EXPECT_EQ(rope["head_dim"], 24);
  EXPECT_EQ(rope["style"], "rotate-half");

  // index.json holds the SHA-256 of the file, and load() accepts the matching route.
  const auto index = nlohmann::json::parse(test::read_file(maps_ / "index.json"));
  EXPECT_EQ(index["files"]["map.safetensors"]["sha256"], sha256_file(maps_ / "map.safetensors"));
  EXPECT_EQ(sha256_file(maps_ / "map.safetensors").size(), 64u);
  auto map = CacheMap::load(maps_, *big_, *small_);
  EXPECT_EQ(map->method(), "ridge");
  EXPECT_EQ(map->data().layers[0].k_sources, (std::vector<int64_t>{0, 2}));
}

TEST(Sha256, KnownVector) {
  test::TempDir d;
  test::write_file(d / "abc", "abc");
  EXPECT_EQ(sha256_file(d / "abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST_F(MapFile, ACorruptFileFailsTheChecksum) {
  {
    std::fstream f(maps_ / "map.safetensors", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-3, std::ios::end);
    f.put('\x7f');
  }
  const std::string e = load_error(*big_, *small_);
  EXPECT_NE(e.find("index.json"), std::string::npos) << e;
  EXPECT_NE(e.find("SHA-256 of map.safetensors"), std::string::npos) << e;
}

TEST_F(MapFile, AMissingOrBrokenIndexIsRefused) {
  std::filesystem::remove(maps_ / "index.json");
  EXPECT_NE(load_error(*big_, *small_).find("index.json: missing"), std::string::npos);
  test::write_file(maps_ / "index.json", "{\"format\": \"molt-map-index\", \"files\": ");
  EXPECT_NE(load_error(*big_, *small_).find("not valid JSON"), std::string::npos);
  test::write_file(maps_ / "index.json", "{\"format\": \"molt-map-index\", \"files\": {}}");
  EXPECT_NE(load_error(*big_, *small_).find("does not list map.safetensors"), std::string::npos);
}

TEST_F(MapFile, AnotherRouteIsRefusedNamingTheField) {
  // Sender and receiver swapped.
  std::string e = load_error(*small_, *big_);
  EXPECT_NE(e.find("sender n_layers is 3 in the map but 2"), std::string::npos) << e;
  // Same geometry, another RoPE θ.
  test::TempDir d;
  ModelConfig c = small_cfg_;
  c.rope_theta = 10000.0;
  auto other_theta = test::tiny_model(d.path(), c);
  e = load_error(*big_, *other_theta);
  EXPECT_NE(e.find("receiver RoPE spec (theta 500000"), std::string::npos) << e;
  EXPECT_NE(e.find("map.safetensors"), std::string::npos) << e;
  // Same layers, other head_dim.
  test::TempDir d2;
  auto other_heads = test::tiny_model(d2.path(), test::tiny_config(48, 2, 4, 1, 500000.0));
  e = load_error(*big_, *other_heads);
  EXPECT_NE(e.find("receiver head_dim is 24 in the map but 12"), std::string::npos) << e;
}

TEST_F(MapFile, AnUnknownKeysModeIsRefused) {
  MapData m = sample_map(*big_, *small_);
  m.info["keys"] = "sideways";
  write_map_dir(maps_, m);
  const std::string e = load_error(*big_, *small_);
  EXPECT_NE(e.find("'keys' is \"sideways\""), std::string::npos) << e;
  EXPECT_NE(e.find("map.safetensors"), std::string::npos) << e;
  m.info["keys"] = "rotated";  // the RoPE sandwich's ablation reads back as it was written
  write_map_dir(maps_, m);
  EXPECT_EQ(read_map_dir(maps_).info["keys"], "rotated");
}

// What a map reads of the sender (format_version 3): "joint" or "separate", nothing else, and
// only in a version-3 file; a version-2 file without it reads K and V apart.
TEST_F(MapFile, AnUnknownSenderKvOrAnOlderVersionWithItIsRefused) {
  auto st = SafetensorsFile::open(maps_ / "map.safetensors");
  std::vector<TensorToWrite> all;
  for (const TensorView& t : st->tensors())
    all.push_back({t.name, t.dtype, t.shape, {t.data, t.nbytes}});
  const std::filesystem::path other = dir_ / "kv";
  std::filesystem::create_directories(other);
  auto rewrite = [&](const std::string& version, const std::string& features) {
    auto meta = st->metadata();
    meta["format_version"] = version;
    meta["features"] = features;
    write_safetensors(other / "map.safetensors", all, meta);
    const nlohmann::json index = {
        {"format", "molt-map-index"},
        {"files", {{"map.safetensors", {{"sha256", sha256_file(other / "map.safetensors")}}}}}};
    test::write_file(other / "index.json", index.dump());
  };
  auto error = [&]() -> std::string {
    try {
      read_map_dir(other);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  rewrite("3", R"({"embed_tokens": 0, "sender_kv": "both"})");
  std::string e = error();
  EXPECT_NE(e.find("'features.sender_kv' is \"both\""), std::string::npos) << e;
  EXPECT_NE(e.find("map.safetensors"), std::string::npos) << e;
  rewrite("2", R"({"embed_tokens": 0, "sender_kv": "joint"})");
  e = error();
  EXPECT_NE(e.find("'features.sender_kv'"), std::string::npos) << e;
  // A joint map's weights are twice as wide as these: the shapes are checked against it.
  rewrite("3", R"({"embed_tokens": 0, "sender_kv": "joint"})");
  e = error();
  EXPECT_NE(e.find("layers.0.k.heads.0.weight"), std::string::npos) << e;
  rewrite("2", R"({"embed_tokens": 0})");
  EXPECT_FALSE(read_map_dir(other).features.joint_kv);
  rewrite("3", R"({"embed_tokens": 0, "sender_kv": "separate"})");
  EXPECT_FALSE(read_map_dir(other).features.joint_kv);
  // Native layers (format_version 4): a layer count below the receiver's, only in version 4;
  // a version-3 file has none.
  EXPECT_EQ(read_map_dir(other).features.native_layers, 0);
  rewrite("4", R"({"embed_tokens": 0, "sender_kv": "separate", "native_layers": 1})");
  EXPECT_EQ(read_map_dir(other).features.native_layers, 1);
  rewrite("3", R"({"embed_tokens": 0, "sender_kv": "separate", "native_layers": 1})");
  e = error();
  EXPECT_NE(e.find("'features.native_layers' is 1"), std::string::npos) << e;
  for (const char* bad : {"-1", "99", "1.5", "\"one\""}) {
    rewrite("4", fmt::format(R"({{"embed_tokens": 0, "native_layers": {}}})", bad));
    e = error();
    EXPECT_NE(e.find("'features.native_layers'"), std::string::npos) << bad << ": " << e;
  }
}

TEST_F(MapFile, AMissingOrMisshapenTensorIsNamed) {
  // Rewrite the file without one tensor (and a fresh index, so the checksum passes).
  auto st = SafetensorsFile::open(maps_ / "map.safetensors");
  std::vector<TensorToWrite> keep;
  for (const TensorView& t : st->tensors()) {
    if (t.name == "layers.1.v.heads.0.weight") continue;
    keep.push_back({t.name, t.dtype, t.shape, {t.data, t.nbytes}});
  }
  const std::filesystem::path other = dir_ / "other";
  std::filesystem::create_directories(other);
  write_safetensors(other / "map.safetensors", keep, st->metadata());
  nlohmann::json index = {
      {"format", "molt-map-index"},
      {"files", {{"map.safetensors", {{"sha256", sha256_file(other / "map.safetensors")}}}}}};
  test::write_file(other / "index.json", index.dump());
  try {
    read_map_dir(other);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tensor 'layers.1.v.heads.0.weight' is missing"),
              std::string::npos)
        << e.what();
  }
  // Sources that disagree with the tensor shapes.
  auto meta = st->metadata();
  meta["sources"] = R"({"k": [[0], [1, 2]], "v": [[0], [1]]})";
  std::vector<TensorToWrite> all;
  for (const TensorView& t : st->tensors())
    all.push_back({t.name, t.dtype, t.shape, {t.data, t.nbytes}});
  write_safetensors(other / "map.safetensors", all, meta);
  index["files"]["map.safetensors"]["sha256"] = sha256_file(other / "map.safetensors");
  test::write_file(other / "index.json", index.dump());
  try {
    read_map_dir(other);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(
                  "'layers.0.k.heads.0.weight' has shape [24, 64], expected [24, 32]"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace molt
