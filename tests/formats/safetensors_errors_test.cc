// Every malformed safetensors header is refused with a message naming the file and the field.
#include <gtest/gtest.h>

#include <cstring>
#include <nlohmann/json.hpp>

#include "molt/common/error.h"
#include "molt/formats/safetensors.h"
#include "test_util.h"

namespace molt {
namespace {

using nlohmann::json;

class BadSafetensors : public ::testing::Test {
 protected:
  // The file as a hand-written header (declared length `n`, default its size) and data block.
  void write(const std::string& header, const std::string& data, int64_t n = -1) {
    uint64_t len = n < 0 ? header.size() : static_cast<uint64_t>(n);
    std::string raw(8, '\0');
    std::memcpy(raw.data(), &len, 8);
    test::write_file(path(), raw + header + data);
  }
  void write(const json& header, size_t data_bytes) {
    write(header.dump(), std::string(data_bytes, '\x01'));
  }
  std::filesystem::path path() const { return tmp / "bad.safetensors"; }
  // Opens the file, expects an Error mentioning the file and every needle.
  void expect_error(std::initializer_list<std::string> needles) {
    std::string e = "(no error)";
    try {
      SafetensorsFile::open(path());
    } catch (const Error& err) {
      e = err.what();
    }
    EXPECT_NE(e.find(path().string()), std::string::npos) << e;
    for (const auto& n : needles) EXPECT_NE(e.find(n), std::string::npos) << n << " not in: " << e;
  }
  // A valid one-tensor header ({"w": F32 [2, 3] at [0, 24]}) to break one field of.
  static json good() {
    return {{"w", {{"dtype", "F32"}, {"shape", {2, 3}}, {"data_offsets", {0, 24}}}}};
  }
  test::TempDir tmp;
};

TEST_F(BadSafetensors, GoodBaselineOpens) {
  write(good(), 24);
  auto f = SafetensorsFile::open(path());
  EXPECT_EQ(f->tensors().size(), 1u);
  EXPECT_EQ(f->find("w")->nbytes, 24u);
  // An empty header object and trailing header spaces are legal.
  write(std::string("{}    "), "");
  EXPECT_TRUE(SafetensorsFile::open(path())->tensors().empty());
}

TEST_F(BadSafetensors, MissingFile) {
  expect_error({"cannot open"});
}

TEST_F(BadSafetensors, ShorterThanEightBytes) {
  test::write_file(path(), "");
  expect_error({"0 bytes", "shorter than the 8-byte"});
  test::write_file(path(), "abcde");
  expect_error({"5 bytes", "shorter than the 8-byte"});
}

TEST_F(BadSafetensors, HeaderLengthZero) {
  write("", "whatever", 0);
  expect_error({"header length is 0"});
}

TEST_F(BadSafetensors, HeaderLengthHuge) {
  write("{}", "", 200'000'000);
  expect_error({"header length 200000000", "limit"});
}

TEST_F(BadSafetensors, HeaderLengthPastEndOfFile) {
  write(good().dump(), std::string(24, '\0'), 4096);
  expect_error({"header length 4096", "past the end"});
}

TEST_F(BadSafetensors, MalformedJson) {
  write(std::string("{\"w\": {\"dtype\": \"F32\",}}"), "");
  expect_error({"malformed", "at byte 23"});
  write(std::string("{\"w\": \xff}"), "");
  expect_error({"malformed"});
}

TEST_F(BadSafetensors, HeaderNotAnObject) {
  write(json::array({1, 2}), 0);
  expect_error({"header is a JSON array", "expected an object"});
}

TEST_F(BadSafetensors, EntryNotAnObject) {
  write(json{{"w", {1, 2}}}, 0);
  expect_error({"tensor 'w'", "expected an object"});
}

TEST_F(BadSafetensors, MissingFields) {
  for (const char* field : {"dtype", "shape", "data_offsets"}) {
    json h = good();
    h["w"].erase(field);
    write(h, 24);
    expect_error({"tensor 'w'", "missing field", field});
  }
}

TEST_F(BadSafetensors, IllTypedFields) {
  json h = good();
  h["w"]["dtype"] = 32;
  write(h, 24);
  expect_error({"tensor 'w'", "'dtype'", "expected a string"});
  h = good();
  h["w"]["shape"] = "2x3";
  write(h, 24);
  expect_error({"tensor 'w'", "'shape'", "expected an array"});
  h["w"]["shape"] = {2, 3.5};
  write(h, 24);
  expect_error({"tensor 'w'", "'shape' dimension 1", "expected an integer"});
  h["w"]["shape"] = {2, "3"};
  write(h, 24);
  expect_error({"tensor 'w'", "'shape' dimension 1"});
}

TEST_F(BadSafetensors, UnknownDtype) {
  json h = good();
  h["w"]["dtype"] = "F8_E4M3";
  write(h, 24);
  expect_error({"tensor 'w'", "unknown dtype 'F8_E4M3'"});
}

TEST_F(BadSafetensors, NegativeDimension) {
  json h = good();
  h["w"]["shape"] = {-2, -3};
  write(h, 24);
  expect_error({"tensor 'w'", "'shape' dimension 0 is negative"});
}

TEST_F(BadSafetensors, OffsetsNotTwoNonNegativeIntegers) {
  for (json bad : {json("0-24"), json({0}), json({0, 24, 48}), json({-8, 16}), json({0, 24.0}),
                   json({"0", "24"})}) {
    json h = good();
    h["w"]["data_offsets"] = bad;
    write(h, 24);
    expect_error({"tensor 'w'", "'data_offsets'", "two non-negative integers"});
  }
}

TEST_F(BadSafetensors, OffsetsDecreasing) {
  json h = good();
  h["w"]["data_offsets"] = {24, 0};
  write(h, 24);
  expect_error({"tensor 'w'", "'data_offsets' [24, 0] decreases"});
}

TEST_F(BadSafetensors, OffsetsPastDataBlock) {
  write(good(), 20);
  expect_error({"tensor 'w'", "'data_offsets' [0, 24]", "past the data block (20 bytes)"});
}

TEST_F(BadSafetensors, ByteSizeNotShapeTimesDtype) {
  json h = good();
  h["w"]["dtype"] = "BF16";
  write(h, 24);
  expect_error({"tensor 'w'", "hold 24 bytes", "BF16", "needs 6 × 2"});
  // A shape whose element count overflows 64 bits.
  h = good();
  h["w"]["shape"] = {int64_t{1} << 40, int64_t{1} << 40};
  write(h, 24);
  expect_error({"tensor 'w'", "overflow"});
}

TEST_F(BadSafetensors, OverlappingTensors) {
  json h = good();
  h["v"] = {{"dtype", "F32"}, {"shape", {4}}, {"data_offsets", {16, 32}}};
  write(h, 32);
  expect_error({"'w' [0, 24)", "'v' [16, 32)", "overlap"});
  // Touching is fine.
  h["v"]["data_offsets"] = {24, 40};
  write(h, 40);
  EXPECT_EQ(SafetensorsFile::open(path())->tensors().size(), 2u);
}

TEST_F(BadSafetensors, MetadataNotStringToString) {
  json h = good();
  h["__metadata__"] = {"format", "pt"};
  write(h, 24);
  expect_error({"__metadata__", "expected an object of strings"});
  h["__metadata__"] = {{"format", "pt"}, {"version", 2}};
  write(h, 24);
  expect_error({"__metadata__ field 'version'", "expected a string"});
}

TEST_F(BadSafetensors, DuplicateTensorName) {
  std::string e = R"({"dtype": "F32", "shape": [2], "data_offsets": [0, 8]})";
  write(R"({"w": )" + e + R"(, "w": )" + e + "}", std::string(8, '\0'));
  expect_error({"tensor 'w' appears twice"});
}

}  // namespace
}  // namespace molt
