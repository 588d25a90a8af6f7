// Checkpoints: one model.safetensors or shards behind model.safetensors.index.json.
#include <gtest/gtest.h>

#include <cstring>
#include <nlohmann/json.hpp>

#include "molt/common/error.h"
#include "molt/formats/hf_config.h"
#include "molt/formats/safetensors.h"
#include "test_util.h"

namespace molt {
namespace {

using test::TempDir;

// Twelve tensors of 1 KiB (F32 [256]) with distinct contents.
struct Checkpoint {
  std::vector<std::vector<float>> data;
  std::vector<TensorToWrite> tensors;
  Checkpoint() {
    for (int i = 0; i < 12; ++i) {
      data.emplace_back(256);
      for (int k = 0; k < 256; ++k) data.back()[k] = static_cast<float>(i * 1000 + k);
    }
    for (int i = 0; i < 12; ++i) {
      tensors.push_back({fmt::format("model.layers.{}.w", i),
                         DType::F32,
                         {256},
                         std::as_bytes(std::span<const float>(data[i]))});
    }
  }
};

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

void expect_identical(const Checkpoint& c, const WeightStore& s) {
  ASSERT_EQ(s.names().size(), c.tensors.size());
  size_t total = 0;
  for (const auto& t : c.tensors) {
    const TensorView& v = s.get(t.name);
    EXPECT_EQ(v.dtype, t.dtype);
    EXPECT_EQ(v.shape, t.shape);
    ASSERT_EQ(v.nbytes, t.bytes.size());
    EXPECT_EQ(0, std::memcmp(v.data, t.bytes.data(), v.nbytes)) << t.name;
    total += v.nbytes;
  }
  EXPECT_EQ(s.total_bytes(), total);
}

TEST(WeightStore, ShardedRoundTrip) {
  TempDir tmp;
  Checkpoint c;
  write_safetensors_sharded(tmp.path(), c.tensors, 4096, {{"format", "pt"}});
  // 12 KiB at ≤ 4 KiB per shard: three shards named as Hugging Face names them.
  for (int i = 1; i <= 3; ++i) {
    EXPECT_TRUE(std::filesystem::exists(tmp / fmt::format("model-{:05d}-of-00003.safetensors", i)));
  }
  EXPECT_FALSE(std::filesystem::exists(tmp / "model.safetensors"));
  auto index = read_json_file(tmp / "model.safetensors.index.json");
  EXPECT_EQ(index["metadata"]["total_size"], 12 * 1024);
  EXPECT_EQ(index["weight_map"].size(), 12u);
  EXPECT_EQ(index["weight_map"]["model.layers.0.w"], "model-00001-of-00003.safetensors");

  WeightStore s = WeightStore::open_dir(tmp.path());
  EXPECT_EQ(s.files().size(), 3u);
  for (const auto& f : s.files()) EXPECT_EQ(f->metadata().at("format"), "pt");
  expect_identical(c, s);
  EXPECT_EQ(s.find("missing"), nullptr);
  std::string e = error_of([&] { s.get("lm_head.weight"); });
  EXPECT_NE(e.find("lm_head.weight"), std::string::npos) << e;
  EXPECT_NE(e.find(tmp.path().string()), std::string::npos) << e;
  s.release_pages();
  expect_identical(c, s);  // parked pages come back on touch
}

TEST(WeightStore, OneShardIsPlainModelSafetensors) {
  TempDir tmp;
  Checkpoint c;
  write_safetensors_sharded(tmp.path(), c.tensors, 1 << 20);
  EXPECT_TRUE(std::filesystem::exists(tmp / "model.safetensors"));
  EXPECT_FALSE(std::filesystem::exists(tmp / "model.safetensors.index.json"));
  WeightStore s = WeightStore::open_dir(tmp.path());
  EXPECT_EQ(s.files().size(), 1u);
  expect_identical(c, s);
  WeightStore moved = std::move(s);  // views survive a move of the store
  expect_identical(c, moved);
}

TEST(WeightStore, TensorLargerThanShardGetsItsOwn) {
  TempDir tmp;
  Checkpoint c;
  write_safetensors_sharded(tmp.path(), c.tensors, 100);
  WeightStore s = WeightStore::open_dir(tmp.path());
  EXPECT_EQ(s.files().size(), 12u);
  expect_identical(c, s);
}

// Bad indexes: every message names the index file and the tensor or field.
class BadIndex : public ::testing::Test {
 protected:
  void SetUp() override { write_safetensors_sharded(tmp.path(), c.tensors, 4096); }
  nlohmann::json index() { return read_json_file(tmp / "model.safetensors.index.json"); }
  std::string open_with(const nlohmann::json& j) {
    test::write_file(tmp / "model.safetensors.index.json", j.dump());
    return error_of([&] { WeightStore::open_dir(tmp.path()); });
  }
  void expect_mentions(const std::string& e, std::initializer_list<std::string> needles) {
    EXPECT_NE(e.find("model.safetensors.index.json"), std::string::npos) << e;
    for (const auto& n : needles) EXPECT_NE(e.find(n), std::string::npos) << n << " in " << e;
  }
  TempDir tmp;
  Checkpoint c;
};

TEST_F(BadIndex, TensorMissingFromItsShard) {
  auto j = index();
  j["weight_map"]["model.layers.0.w"] = "model-00002-of-00003.safetensors";
  expect_mentions(open_with(j), {"model.layers.0.w", "model-00002-of-00003.safetensors"});
}

TEST_F(BadIndex, ListedTensorAbsentEverywhere) {
  auto j = index();
  j["weight_map"]["lm_head.weight"] = "model-00003-of-00003.safetensors";
  expect_mentions(open_with(j), {"lm_head.weight", "model-00003-of-00003.safetensors"});
}

TEST_F(BadIndex, ShardFileMissing) {
  auto j = index();
  j["weight_map"]["model.layers.0.w"] = "model-00009-of-00009.safetensors";
  expect_mentions(open_with(j), {"model.layers.0.w", "model-00009-of-00009.safetensors"});
}

TEST_F(BadIndex, TensorStoredInTwoShards) {
  // Shard 1 rewritten to also hold a tensor the index maps to shard 3.
  auto j = index();
  std::vector<TensorToWrite> first;
  for (const auto& t : c.tensors) {
    if (j["weight_map"][t.name] == "model-00001-of-00003.safetensors") first.push_back(t);
  }
  ASSERT_EQ(j["weight_map"]["model.layers.9.w"], "model-00003-of-00003.safetensors");
  first.push_back(c.tensors[9]);
  write_safetensors(tmp / "model-00001-of-00003.safetensors", first);
  expect_mentions(open_with(j), {"model.layers.9.w", "model-00001-of-00003.safetensors",
                                 "model-00003-of-00003.safetensors"});
}

TEST_F(BadIndex, WeightMapMissingOrIllTyped) {
  auto j = index();
  j.erase("weight_map");
  expect_mentions(open_with(j), {"weight_map"});
  j["weight_map"] = nlohmann::json::array();
  expect_mentions(open_with(j), {"weight_map"});
  j["weight_map"] = {{"model.layers.0.w", 3}};
  expect_mentions(open_with(j), {"weight_map['model.layers.0.w']"});
  j["weight_map"] = {{"model.layers.0.w", "../elsewhere.safetensors"}};
  expect_mentions(open_with(j), {"model.layers.0.w", "../elsewhere.safetensors"});
  j = index();
  j["metadata"]["total_size"] = "big";
  expect_mentions(open_with(j), {"total_size"});
}

TEST_F(BadIndex, TensorListedTwice) {
  std::string text = index().dump();
  auto at = text.find("\"model.layers.0.w\"");
  text.insert(at, "\"model.layers.9.w\": \"model-00001-of-00003.safetensors\", ");
  test::write_file(tmp / "model.safetensors.index.json", text);
  std::string e = error_of([&] { WeightStore::open_dir(tmp.path()); });
  expect_mentions(e, {"weight_map lists tensor 'model.layers.9.w' twice"});
}

TEST_F(BadIndex, MalformedIndexJson) {
  test::write_file(tmp / "model.safetensors.index.json", "{\"weight_map\": {\"a\": }");
  std::string e = error_of([&] { WeightStore::open_dir(tmp.path()); });
  expect_mentions(e, {"malformed JSON at byte 22"});
}

TEST_F(BadIndex, BadShardIsNamed) {
  test::write_file(tmp / "model-00002-of-00003.safetensors", "1234");
  std::string e = error_of([&] { WeightStore::open_dir(tmp.path()); });
  EXPECT_NE(e.find("model-00002-of-00003.safetensors"), std::string::npos) << e;
  EXPECT_NE(e.find("shorter than"), std::string::npos) << e;
}

TEST(WeightStore, EmptyFolderIsAnError) {
  TempDir tmp;
  std::string e = error_of([&] { WeightStore::open_dir(tmp.path()); });
  EXPECT_NE(e.find(tmp.path().string()), std::string::npos) << e;
  EXPECT_NE(e.find("model.safetensors"), std::string::npos) << e;
}

}  // namespace
}  // namespace molt
