// Inputs the fuzzers found (tests/fuzz/regressions/) and the bounds every size read from a file
// must respect: each is refused with a molt::Error naming the file, nothing else escapes, and
// no claim in a header makes the reader allocate what the claim says.
#include "fuzz_regressions.h"

#include <gtest/gtest.h>

#include <cstring>
#include <nlohmann/json.hpp>
#include <vector>

#include "molt/common/error.h"
#include "molt/formats/hf_config.h"
#include "molt/formats/safetensors.h"
#include "test_util.h"

namespace molt {
namespace {

using nlohmann::json;

std::string safetensors_bytes(const std::string& header, const std::string& data) {
  std::string raw(8, '\0');
  const uint64_t n = header.size();
  std::memcpy(raw.data(), &n, 8);
  return raw + header + data;
}

TEST(FuzzRegressions, SafetensorsHeaders) {
  test::TempDir tmp;
  const auto file = tmp / "input.safetensors";
  test::expect_all_refused(
      "safetensors",
      [&](const std::string& bytes) {
        test::write_file(file, bytes);
        SafetensorsFile::open(file);
      },
      file.string());
}

TEST(FuzzRegressions, SafetensorsIndex) {
  test::TempDir tmp;
  const std::vector<float> f32(4, 1.0f);
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(f32.data()), 16);
  write_safetensors(tmp / "model-00001-of-00002.safetensors",
                    {{"model.norm.weight", DType::F32, {4}, bytes}});
  test::expect_all_refused(
      "safetensors_index",
      [&](const std::string& text) {
        test::write_file(tmp / "model.safetensors.index.json", text);
        WeightStore::open_dir(tmp.path());
      },
      "model.safetensors.index.json");
}

TEST(FuzzRegressions, ConfigJson) {
  test::TempDir tmp;
  const auto file = tmp / "config.json";
  test::expect_all_refused(
      "hf_config",
      [&](const std::string& text) {
        test::write_file(file, text);
        parse_model_config(read_json_file(file), file.string());
      },
      "config.json");
}

TEST(FuzzRegressions, GenerationConfigJson) {
  test::TempDir tmp;
  test::write_file(tmp / "config.json", R"({"architectures": ["Qwen2ForCausalLM"],
      "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
      "num_key_value_heads": 2, "intermediate_size": 128, "vocab_size": 256})");
  test::expect_all_refused(
      "generation_config",
      [&](const std::string& text) {
        test::write_file(tmp / "generation_config.json", text);
        load_model_config(tmp.path());
      },
      "generation_config.json");
}

// A header may claim any shape; the reader only hands out views of bytes that are there, so a
// claim of 2^40 elements (4 TiB of F32) is refused before anything of that size exists.
TEST(FuzzRegressions, HeaderClaimingAHugeTensorIsRefusedWithoutAllocating) {
  test::TempDir tmp;
  const auto file = tmp / "huge.safetensors";
  auto refused = [&](const std::string& header, const std::string& needle) {
    test::write_file(file, safetensors_bytes(header, std::string(16, '\0')));
    try {
      SafetensorsFile::open(file);
      ADD_FAILURE() << "accepted " << header;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(file.string()), std::string::npos) << e.what();
    }
  };
  // Offsets that match the claim run past the 16 bytes of data.
  refused(R"({"w":{"dtype":"F32","shape":[1099511627776],"data_offsets":[0,4398046511104]}})",
          "runs past the data block");
  // Offsets that fit do not hold the claimed bytes.
  refused(R"({"w":{"dtype":"F32","shape":[1048576,1048576],"data_offsets":[0,16]}})",
          "needs 1099511627776 × 4 bytes");
  // The element count itself overflows 64 bits.
  refused(R"({"w":{"dtype":"BF16","shape":[4294967296,4294967296,4],"data_offsets":[0,16]}})",
          "overflows");
  // The byte count overflows (2^62 elements × 4 bytes).
  refused(R"({"w":{"dtype":"F32","shape":[4611686018427387904],"data_offsets":[0,16]}})",
          "needs 4611686018427387904 × 4 bytes");
  // A header length of 2^40 is refused before it is read.
  std::string raw(8, '\0');
  const uint64_t n = uint64_t{1} << 40;
  std::memcpy(raw.data(), &n, 8);
  test::write_file(file, raw + "{}");
  EXPECT_THROW(SafetensorsFile::open(file), Error);
}

// config.json sizes are bounded before anything is sized from them, and narrowing to int
// happens after the range check.
TEST(FuzzRegressions, ConfigSizesAreBounded) {
  json c = {{"architectures", {"Qwen2ForCausalLM"}},
            {"hidden_size", 64},
            {"num_hidden_layers", 2},
            {"num_attention_heads", 4},
            {"num_key_value_heads", 2},
            {"intermediate_size", 128},
            {"vocab_size", 256}};
  EXPECT_NO_THROW(parse_model_config(c, "config.json"));
  auto refused = [&](const char* key, json value, const std::string& needle) {
    json bad = c;
    bad[key] = std::move(value);
    try {
      parse_model_config(bad, "config.json");
      ADD_FAILURE() << "accepted " << bad.dump();
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  refused("vocab_size", int64_t{1} << 40, "'vocab_size' is 1099511627776, larger than");
  refused("hidden_size", int64_t{1} << 40, "'hidden_size'");
  refused("num_hidden_layers", int64_t{1} << 20, "'num_hidden_layers'");
  refused("head_dim", int64_t{1} << 32, "'head_dim'");
  // 2^32 + 4 bits would pass as 4 after a narrowing cast.
  refused("quantization", json{{"group_size", 64}, {"bits", (int64_t{1} << 32) + 4}},
          "'quantization.bits' is 4294967300, out of range");
}

// 200 KB of "[[[[" parses without recursion, but dump() in an error message (and any reader
// that recurses) would then exhaust the stack: every reader refuses such nesting up front.
TEST(FuzzRegressions, DeeplyNestedJsonIsRefused) {
  test::TempDir tmp;
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  test::write_file(tmp / "config.json", R"({"hidden_size": )" + deep + "}");
  try {
    parse_model_config(read_json_file(tmp / "config.json"), "config.json");
    ADD_FAILURE() << "accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("nests deeper than 512 levels"), std::string::npos)
        << e.what();
  }
  EXPECT_NO_THROW(parse_json_text(std::string(512, '[') + std::string(512, ']'), "ok"));
  EXPECT_THROW(parse_json_text(std::string(513, '[') + std::string(513, ']'), "deep"), Error);
  test::write_file(tmp / "model.safetensors.index.json", R"({"weight_map": )" + deep + "}");
  EXPECT_THROW(WeightStore::open_dir(tmp.path()), Error);
  test::write_file(tmp / "deep.safetensors", safetensors_bytes(R"({"a": )" + deep + "}", ""));
  EXPECT_THROW(SafetensorsFile::open(tmp / "deep.safetensors"), Error);
}

}  // namespace
}  // namespace molt
