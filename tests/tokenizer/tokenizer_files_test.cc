// Small tokenizers written by hand in every supported file layout: tokenizer.json (both merge
// spellings, added tokens, normalisers, pre-tokenizers), vocab.json + merges.txt, merges.txt
// alone, tiktoken; how a folder is searched; and a clear error naming the file for each kind of
// broken input.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "molt/common/error.h"
#include "molt/tokenizer/tokenizer.h"
#include "test_util.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/pretokenizer.h"

namespace molt {
namespace {

using nlohmann::json;
using Ids = std::vector<int32_t>;
namespace fs = std::filesystem;

// Byte-level spelling of the byte token with id i (ids 0..255 in alphabet order).
std::string byte_name(int i) {
  return tok::byte_level_encode(std::string(1, static_cast<char>(tok::byte_alphabet_order()[i])));
}

// Merges in rank order; merge i makes token 256 + i.
const std::vector<std::pair<std::string, std::string>> kMerges = {
    {"h", "e"}, {"l", "l"},   {"he", "ll"}, {"hell", "o"}, {"Ġ", "w"},
    {"o", "r"}, {"Ġw", "or"}, {"l", "d"},   {"Ġwor", "ld"}};
constexpr int32_t kHello = 259, kWorld = 264, kLl = 257, kEnd = 265, kTool = 266;
// Byte token ids, from the alphabet order: printable bytes first.
constexpr int32_t kE = 68, kL = 75, kO = 78, kLt = 27, kBar = 91, kN = 77, kD = 67, kGt = 29;

json base_vocab() {
  json v = json::object();
  for (int i = 0; i < 256; ++i) v[byte_name(i)] = i;
  for (size_t i = 0; i < kMerges.size(); ++i) v[kMerges[i].first + kMerges[i].second] = 256 + i;
  return v;
}

json added_token(int32_t id, const std::string& content, bool special) {
  return {{"id", id},        {"content", content},  {"single_word", false}, {"lstrip", false},
          {"rstrip", false}, {"normalized", false}, {"special", special}};
}

// A Qwen2-style tokenizer.json over the small vocabulary.
json small_tokenizer_json(bool array_merges = false) {
  json merges = json::array();
  for (const auto& [a, b] : kMerges) {
    merges.push_back(array_merges ? json::array({a, b}) : json(a + " " + b));
  }
  return {
      {"version", "1.0"},
      {"truncation", nullptr},
      {"added_tokens", {added_token(kEnd, "<|end|>", true), added_token(kTool, "<tool>", false)}},
      {"normalizer", {{"type", "NFC"}}},
      {"pre_tokenizer",
       {{"type", "Sequence"},
        {"pretokenizers",
         {{{"type", "Split"},
           {"pattern", {{"Regex", std::string(tok::kQwen2Pattern)}}},
           {"behavior", "Isolated"},
           {"invert", false}},
          {{"type", "ByteLevel"},
           {"add_prefix_space", false},
           {"trim_offsets", false},
           {"use_regex", false}}}}}},
      {"post_processor", {{"type", "ByteLevel"}, {"trim_offsets", false}}},
      {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
      {"model",
       {{"type", "BPE"},
        {"dropout", nullptr},
        {"unk_token", nullptr},
        {"continuing_subword_prefix", ""},
        {"end_of_word_suffix", ""},
        {"fuse_unk", false},
        {"byte_fallback", false},
        {"ignore_merges", false},
        {"vocab", base_vocab()},
        {"merges", merges}}}};
}

std::string merges_txt() {
  std::string s = "#version: 0.2\n";
  for (const auto& [a, b] : kMerges) s += a + " " + b + "\n";
  return s;
}

std::unique_ptr<Tokenizer> load_json(const test::TempDir& dir, const json& j) {
  test::write_file(dir / "tokenizer.json", j.dump());
  return Tokenizer::load(dir / "tokenizer.json");
}

TEST(TokenizerJson, EncodesByMergeRank) {
  test::TempDir dir;
  auto tok = load_json(dir, small_tokenizer_json());
  EXPECT_EQ(tok->format(), "tokenizer.json");
  EXPECT_EQ(tok->vocab_size(), 267);
  EXPECT_EQ(tok->encode("hello world"), (Ids{kHello, kWorld}));
  EXPECT_EQ(tok->encode("ello"), (Ids{kE, kLl, kO}));  // no merge joins "e" and "ll"
  EXPECT_EQ(tok->encode("hello<|end|> world<tool>"), (Ids{kHello, kEnd, kWorld, kTool}));
  // Special tokens can be read as text; the non-special <tool> is still matched.
  EXPECT_EQ(tok->encode("<|end|><tool>", /*parse_special=*/false),
            (Ids{kLt, kBar, kE, kN, kD, kBar, kGt, kTool}));
  EXPECT_EQ(tok->decode(Ids{kHello, kEnd, kWorld}), "hello<|end|> world");
  EXPECT_EQ(tok->decode(Ids{kHello, kEnd, kWorld}, /*skip_special=*/true), "hello world");
  EXPECT_TRUE(tok->is_special(kEnd));
  EXPECT_FALSE(tok->is_special(kTool));
  EXPECT_EQ(tok->token_id(" world"), kWorld);
  EXPECT_EQ(tok->token_id("Ġworld"), -1);  // raw bytes, not the byte-level spelling
}

TEST(TokenizerJson, MergeSpellingsAreEquivalent) {
  test::TempDir a, b;
  auto strings = load_json(a, small_tokenizer_json(false));
  auto arrays = load_json(b, small_tokenizer_json(true));
  EXPECT_EQ(arrays->encode("hello world"), (Ids{kHello, kWorld}));
  EXPECT_EQ(strings->fingerprint(), arrays->fingerprint());
}

TEST(TokenizerJson, NormalizerChoice) {
  test::TempDir a, b;
  auto nfc = load_json(a, small_tokenizer_json());
  json j = small_tokenizer_json();
  j["normalizer"] = nullptr;
  auto none = load_json(b, j);
  // é is bytes C3 A9; e + U+0301 is 65 CC 81 (byte ids from the alphabet order).
  EXPECT_EQ(nfc->encode("e\xCC\x81"), (Ids{127, 102}));
  EXPECT_EQ(none->encode("e\xCC\x81"), (Ids{kE, 136, 223}));
  EXPECT_NE(nfc->fingerprint(), none->fingerprint());
}

TEST(TokenizerJson, ByteLevelRegexWithPrefixSpace) {
  test::TempDir dir;
  json j = small_tokenizer_json();
  j["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"use_regex", true}};
  auto tok = load_json(dir, j);
  // " hello" has no merge for "Ġ h": [" ", "hello"]; " world" is one token.
  EXPECT_EQ(tok->encode("hello world"), (Ids{220, kHello, kWorld}));
  EXPECT_EQ(tok->encode(" world"), (Ids{kWorld}));
}

TEST(TokenizerJson, IgnoreMergesTakesWholeTokens) {
  test::TempDir a, b;
  json j = small_tokenizer_json();
  j["model"]["vocab"]["lo"] = 267;  // a token no merge makes
  auto merged = load_json(a, j);
  j["model"]["ignore_merges"] = true;
  auto whole = load_json(b, j);
  EXPECT_EQ(merged->encode("lo"), (Ids{kL, kO}));
  EXPECT_EQ(whole->encode("lo"), (Ids{267}));
}

TEST(TokenizerJson, AddedTokensLongestFirstAndStrip) {
  test::TempDir dir;
  json j = small_tokenizer_json();
  j["added_tokens"].push_back(added_token(267, "<a>", true));
  j["added_tokens"].push_back(added_token(268, "<a><b>", true));
  json s = added_token(269, "<s>", true);
  s["rstrip"] = true;
  j["added_tokens"].push_back(s);
  json t = added_token(270, "</s>", true);
  t["lstrip"] = true;
  j["added_tokens"].push_back(t);
  auto tok = load_json(dir, j);
  EXPECT_EQ(tok->encode("x<a><b><a>"), (Ids{87, 268, 267}));
  EXPECT_EQ(tok->encode("<s>  hi"), (Ids{269, 71, 72}));  // spaces swallowed on the right
  EXPECT_EQ(tok->encode("hi \xE3\x80\x80</s>"), (Ids{71, 72, 270}));  // and on the left
  EXPECT_EQ(tok->encode("<a>  hi"), (Ids{267, 220, 220, 71, 72}));
}

TEST(TokenizerFolder, SearchOrderAndAddedTokenSources) {
  test::TempDir dir;
  test::write_file(dir / "vocab.json", base_vocab().dump());
  test::write_file(dir / "merges.txt", merges_txt());
  test::write_file(dir / "tokenizer_config.json",
                   json({{"tokenizer_class", "Qwen2Tokenizer"},
                         {"added_tokens_decoder",
                          {{"265", {{"content", "<|end|>"}, {"special", true}}},
                           {"266", {{"content", "<tool>"}, {"special", false}}}}}})
                       .dump());
  auto slow = Tokenizer::load(dir.path());
  EXPECT_EQ(slow->format(), "vocab.json+merges.txt");
  EXPECT_EQ(slow->encode("hello<|end|> world"), (Ids{kHello, kEnd, kWorld}));
  EXPECT_FALSE(slow->is_special(kTool));
  EXPECT_EQ(Tokenizer::load(dir / "vocab.json")->format(), "vocab.json+merges.txt");
  EXPECT_EQ(Tokenizer::load(dir / "merges.txt")->format(), "vocab.json+merges.txt");

  // tokenizer.json wins over the slow files; the same content gives the same fingerprint.
  test::write_file(dir / "tokenizer.json", small_tokenizer_json().dump());
  auto fast = Tokenizer::load(dir.path());
  EXPECT_EQ(fast->format(), "tokenizer.json");
  EXPECT_EQ(fast->fingerprint(), slow->fingerprint());

  // merges.txt alone: byte tokens 0..255 in alphabet order, merge i -> 256 + i; specials from
  // an explicit file.
  test::TempDir bare;
  test::write_file(bare / "merges.txt", merges_txt());
  test::write_file(bare / "extra.json", json({{"<|end|>", 265}, {"<tool>", 266}}).dump());
  auto from_merges = Tokenizer::load(bare.path(), bare / "extra.json");
  EXPECT_EQ(from_merges->format(), "merges.txt");
  EXPECT_EQ(from_merges->encode("hello<tool> world"), (Ids{kHello, kTool, kWorld}));
  EXPECT_EQ(from_merges->fingerprint(), fast->fingerprint());
}

std::string base64(const std::string& in) {
  static const char* a = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  size_t i = 0;
  for (; i + 2 < in.size(); i += 3) {
    const uint32_t v = (uint8_t(in[i]) << 16) | (uint8_t(in[i + 1]) << 8) | uint8_t(in[i + 2]);
    for (int k = 3; k >= 0; --k) out += a[(v >> (6 * k)) & 63];
  }
  if (i + 1 == in.size()) {
    const uint32_t v = uint8_t(in[i]) << 16;
    out += std::string{a[v >> 18], a[(v >> 12) & 63], '=', '='};
  } else if (i + 2 == in.size()) {
    const uint32_t v = (uint8_t(in[i]) << 16) | (uint8_t(in[i + 1]) << 8);
    out += std::string{a[v >> 18], a[(v >> 12) & 63], a[(v >> 6) & 63], '='};
  }
  return out;
}

std::string small_tiktoken() {
  std::string s;
  int rank = 0;
  const json vocab = base_vocab();
  std::vector<std::string> by_id(vocab.size());
  for (const auto& [name, id] : vocab.items()) by_id[id.get<int>()] = *tok::byte_level_decode(name);
  for (const std::string& bytes : by_id) s += base64(bytes) + " " + std::to_string(rank++) + "\n";
  return s;
}

TEST(Tiktoken, RankFileWithSpecialsBeside) {
  test::TempDir dir;
  test::write_file(dir / "small.tiktoken", small_tiktoken());
  test::write_file(dir / "small_specials.json", json({{"<|end|>", 265}, {"<tool>", 266}}).dump());
  auto tok = Tokenizer::load(dir.path());
  EXPECT_EQ(tok->format(), "tiktoken");
  EXPECT_EQ(tok->encode("hello<|end|> world"), (Ids{kHello, kEnd, kWorld}));
  EXPECT_TRUE(tok->is_special(kTool));  // a plain map has no flags: all special
  test::TempDir other;
  auto fast = load_json(other, small_tokenizer_json());
  EXPECT_EQ(tok->fingerprint(), fast->fingerprint());
  EXPECT_EQ(Tokenizer::load(dir / "small.tiktoken")->fingerprint(), tok->fingerprint());
}

// --- Broken inputs: each error names the file and what is wrong. ---------------------------

void expect_error(const std::function<void()>& f, const std::vector<std::string>& parts) {
  try {
    f();
    ADD_FAILURE() << "expected molt::Error containing '" << parts[0] << "'";
  } catch (const Error& e) {
    for (const std::string& p : parts) {
      EXPECT_NE(std::string(e.what()).find(p), std::string::npos)
          << "message: " << e.what() << "\nmissing: " << p;
    }
  }
}

TEST(TokenizerErrors, CorruptOrTruncatedTokenizerJson) {
  test::TempDir dir;
  const fs::path p = dir / "tokenizer.json";
  const std::string full = small_tokenizer_json().dump();
  test::write_file(p, full.substr(0, full.size() / 2));
  expect_error([&] { Tokenizer::load(p); }, {p.string(), "not valid JSON"});
  test::write_file(p, "{\"version\": \"1.0\"}");
  expect_error([&] { Tokenizer::load(p); }, {p.string(), "no 'model' object"});

  auto with = [&](const std::function<void(json&)>& edit, const std::vector<std::string>& parts) {
    json j = small_tokenizer_json();
    edit(j);
    test::write_file(p, j.dump());
    std::vector<std::string> all = parts;
    all.push_back(p.string());
    expect_error([&] { Tokenizer::load(p); }, all);
  };
  with([](json& j) { j["model"]["merges"][0] = "h zz"; },
       {"model.merges[0]", "'zz' is not in the vocabulary"});
  with([](json& j) { j["model"]["merges"][0] = "hello"; }, {"model.merges[0]", "two tokens"});
  with([](json& j) { j["model"]["merges"].push_back("ll o"); },
       {"merge 9", "not in the vocabulary"});
  with([](json& j) { j["model"]["type"] = "Unigram"; }, {"model type 'Unigram'"});
  with([](json& j) { j["normalizer"] = {{"type", "Lowercase"}}; }, {"normalizer 'Lowercase'"});
  with([](json& j) { j["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Removed"; },
       {"Split behavior 'Removed'"});
  with([](json& j) { j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(a"; },
       {"pre-tokenizer pattern '(a'"});
  with([](json& j) { j["model"]["vocab"]["\xE2\x96\x81hi"] = 300; }, {"byte-level alphabet"});
  with([](json& j) { j["model"]["vocab"]["zz"] = 5; }, {"id 5 is used twice"});
  with([](json& j) { j["added_tokens"][0]["single_word"] = true; }, {"single_word"});
  with([](json& j) { j["added_tokens"][0]["id"] = 5; }, {"'<|end|>' has id 5"});
  with([](json& j) { j["decoder"] = {{"type", "WordPiece"}}; }, {"decoder 'WordPiece'"});
  with([](json& j) { j["model"]["continuing_subword_prefix"] = "##"; },
       {"continuing_subword_prefix"});
}

TEST(TokenizerErrors, BrokenSlowFiles) {
  test::TempDir dir;
  test::write_file(dir / "vocab.json", base_vocab().dump());
  std::string m = merges_txt();
  test::write_file(dir / "merges.txt", m.substr(0, m.size() - 4));  // cut inside the last line
  expect_error([&] { Tokenizer::load(dir.path()); },
               {(dir / "merges.txt").string(), "line 10", "expected two tokens"});
  test::write_file(dir / "merges.txt", merges_txt() + "Ġ qq\n");
  expect_error([&] { Tokenizer::load(dir.path()); },
               {(dir / "merges.txt").string(), "line 11", "'qq'"});
  test::write_file(dir / "merges.txt", merges_txt());
  test::write_file(dir / "vocab.json", "{\"a\": 0, ");
  expect_error([&] { Tokenizer::load(dir.path()); },
               {(dir / "vocab.json").string(), "not valid JSON"});
  test::write_file(dir / "vocab.json", base_vocab().dump());
  test::write_file(dir / "tokenizer_config.json", "{\"added_tokens_decoder\": ");
  expect_error([&] { Tokenizer::load(dir.path()); },
               {(dir / "tokenizer_config.json").string(), "not valid JSON"});
}

TEST(TokenizerErrors, BrokenRankFiles) {
  test::TempDir dir;
  const fs::path p = dir / "r.tiktoken";
  const std::string good = small_tiktoken();
  auto expect = [&](const std::string& content, const std::vector<std::string>& parts) {
    test::write_file(p, content);
    std::vector<std::string> all = parts;
    all.push_back(p.string());
    expect_error([&] { Tokenizer::load(p); }, all);
  };
  expect(good + "aGVsbG8=", {"line 266", "truncated or corrupt"});
  expect(good + "aGVsbG8= 1x\n", {"line 266", "rank '1x'"});
  expect("IQ== 0\n!!!! 1\n", {"line 2", "'!!!!' is not valid base64"});
  expect("IQ== 0\nIg== 0\n", {"line 2", "rank 0 already given on line 1"});
  expect("", {"no tokens"});
  // Cut at a line boundary: the added tokens no longer follow the last rank.
  test::write_file(dir / "s_specials.json", json({{"<|end|>", 265}}).dump());
  expect(good.substr(0, good.find("\n", good.size() / 2) + 1), {"looks truncated", "265"});
}

TEST(TokenizerErrors, PathsAndSpecials) {
  test::TempDir dir;
  expect_error([&] { Tokenizer::load(dir / "missing"); },
               {(dir / "missing").string(), "no such file"});
  expect_error([&] { Tokenizer::load(dir.path()); }, {dir.path().string(), "no tokenizer.json"});
  test::write_file(dir / "weights.bin", "x");
  expect_error([&] { Tokenizer::load(dir / "weights.bin"); }, {"cannot tell the tokenizer format"});
  test::write_file(dir / "tokenizer.json", small_tokenizer_json().dump());
  test::write_file(dir / "sp.json", "[1, 2");
  expect_error([&] { Tokenizer::load(dir.path(), dir / "sp.json"); }, {(dir / "sp.json").string()});
  test::write_file(dir / "sp.json", json({{"<x>", "one"}}).dump());
  expect_error([&] { Tokenizer::load(dir.path(), dir / "sp.json"); }, {"'<x>'", "not an integer"});
  test::write_file(dir / "sp.json", json({{"<x>", 300}, {"<y>", 300}}).dump());
  expect_error([&] { Tokenizer::load(dir.path(), dir / "sp.json"); }, {"id 300"});

  test::TempDir two;
  test::write_file(two / "merges.txt", merges_txt());
  test::write_file(two / "a_specials.json", "{}");
  test::write_file(two / "b_specials.json", "{}");
  expect_error([&] { Tokenizer::load(two.path()); }, {"several *specials.json"});
}

TEST(TokenizerErrors, ExplicitSpecialsReplaceSameContent) {
  test::TempDir dir;
  test::write_file(dir / "tokenizer.json", small_tokenizer_json().dump());
  test::write_file(dir / "sp.json", json({{"<tool>", 280}, {"<new>", 281}}).dump());
  auto tok = Tokenizer::load(dir / "tokenizer.json", dir / "sp.json");
  EXPECT_EQ(tok->token_id("<tool>"), 280);
  EXPECT_EQ(tok->encode("<new><|end|>"), (Ids{281, kEnd}));
  EXPECT_EQ(tok->vocab_size(), 282);
  EXPECT_THROW(tok->token_bytes(270), Error);  // a hole in the id space
}

}  // namespace
}  // namespace molt
