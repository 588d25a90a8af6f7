// The 46 llama.cpp Qwen2 vectors (Hugging Face's own ids) from every file format, and the
// equivalence of the formats: merges.txt rebuilds qwen.tiktoken's vocabulary and merges.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "qwen_vocab.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/spec.h"

namespace molt {
namespace {

using test::read_vocab_vectors;

void expect_all_vectors(const Tokenizer& tok, const std::filesystem::path& dir) {
  const auto vectors = read_vocab_vectors(dir);
  ASSERT_EQ(vectors.size(), 46u);
  for (size_t i = 0; i < vectors.size(); ++i) {
    EXPECT_EQ(tok.encode(vectors[i].input), vectors[i].ids)
        << "vector " << i << ": '" << vectors[i].input << "' (" << tok.format() << ")";
  }
}

TEST(QwenVectors, All46FromTiktoken) {
  MOLT_REQUIRE_SHARED(dir);
  const Tokenizer& tok = test::qwen_tiktoken(dir);
  EXPECT_EQ(tok.format(), "tiktoken");
  expect_all_vectors(tok, dir);
}

TEST(QwenVectors, All46FromMergesTxt) {
  MOLT_REQUIRE_SHARED(dir);
  const Tokenizer& tok = test::qwen_merges(dir);
  EXPECT_EQ(tok.format(), "merges.txt");
  expect_all_vectors(tok, dir);
}

TEST(QwenVectors, VectorFileHasTheDocumentedShape) {
  MOLT_REQUIRE_SHARED(dir);
  const auto v = read_vocab_vectors(dir);
  ASSERT_EQ(v.size(), 46u);
  EXPECT_EQ(v[0].input, "ied 4 \xC2\xBD months");
  EXPECT_EQ(v[2].input, "");  // input 3 is the empty string
  EXPECT_TRUE(v[2].ids.empty());
  EXPECT_EQ(v[11].ids, (std::vector<int32_t>{9707, 1879}));  // "Hello world"
}

TEST(QwenFormats, MergesTxtRebuildsTheTiktokenVocabularyAndMerges) {
  MOLT_REQUIRE_SHARED(dir);
  const tok::TokenizerSpec ranks = tok::load_tiktoken(dir / "qwen.tiktoken");
  const tok::TokenizerSpec merges = tok::load_vocab_merges({}, dir / "merges.txt");
  ASSERT_EQ(ranks.vocab.size(), 151643u);
  ASSERT_EQ(merges.vocab.size(), ranks.vocab.size());
  // Ranks 0..255 are the single bytes in GPT-2's alphabet order (printable bytes first).
  for (int i = 0; i < 256; ++i) {
    ASSERT_EQ(ranks.vocab[i], std::string(1, static_cast<char>(tok::byte_alphabet_order()[i])))
        << "rank " << i;
  }
  EXPECT_EQ(ranks.vocab[0], "!");
  EXPECT_EQ(ranks.vocab[220], " ");
  EXPECT_EQ(ranks.vocab[198], "\n");
  for (size_t i = 0; i < ranks.vocab.size(); ++i) {
    ASSERT_EQ(merges.vocab[i], ranks.vocab[i]) << "id " << i;
  }
  // Merges derived from the ranks are exactly merges.txt, one per token, merge i -> 256 + i.
  ASSERT_EQ(ranks.merges.size(), 151643u - 256u);
  ASSERT_EQ(ranks.merges, merges.merges);
}

TEST(QwenFormats, SameFingerprintFromEveryFormat) {
  MOLT_REQUIRE_SHARED(dir);
  const Tokenizer& a = test::qwen_tiktoken(dir);
  const Tokenizer& b = test::qwen_merges(dir);
  EXPECT_EQ(a.fingerprint().size(), 64u);
  EXPECT_EQ(a.fingerprint(), b.fingerprint());
  // The folder finds qwen.tiktoken and qwen2.5_specials.json on its own.
  auto c = Tokenizer::load(dir);
  EXPECT_EQ(c->format(), "tiktoken");
  EXPECT_EQ(c->fingerprint(), a.fingerprint());
  EXPECT_EQ(c->vocab_size(), 151665);
  // Without the added tokens the fingerprint differs.
  test::TempDir tmp;
  std::filesystem::copy_file(dir / "merges.txt", tmp / "merges.txt");
  auto d = Tokenizer::load(tmp.path());
  EXPECT_EQ(d->vocab_size(), 151643);
  EXPECT_NE(d->fingerprint(), a.fingerprint());
}

// A full-size tokenizer.json and vocab.json + merges.txt + tokenizer_config.json, written in
// Hugging Face's layout from the reference files, give the same ids and fingerprint.
TEST(QwenFormats, HuggingFaceJsonFilesMatchTheRankFile) {
  MOLT_REQUIRE_SHARED(dir);
  const Tokenizer& ref = test::qwen_tiktoken(dir);
  const tok::TokenizerSpec ranks = tok::load_tiktoken(dir / "qwen.tiktoken");
  nlohmann::json vocab = nlohmann::json::object();
  for (size_t i = 0; i < ranks.vocab.size(); ++i) vocab[tok::byte_level_encode(ranks.vocab[i])] = i;
  nlohmann::json merges = nlohmann::json::array();
  for (const auto& [l, r] : ranks.merges) {
    merges.push_back(
        {tok::byte_level_encode(ranks.vocab[l]), tok::byte_level_encode(ranks.vocab[r])});
  }
  nlohmann::json added = nlohmann::json::array();
  nlohmann::json decoder = nlohmann::json::object();
  for (const AddedToken& a : ref.added_tokens()) {
    const bool special = a.id <= 151656;  // as in Qwen2.5's tokenizer.json
    added.push_back({{"id", a.id},
                     {"content", a.content},
                     {"single_word", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"normalized", false},
                     {"special", special}});
    decoder[std::to_string(a.id)] = {{"content", a.content}, {"special", special}};
  }
  nlohmann::json j = {{"version", "1.0"},
                      {"added_tokens", added},
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
                      {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", false}}},
                      {"model",
                       {{"type", "BPE"},
                        {"dropout", nullptr},
                        {"unk_token", nullptr},
                        {"continuing_subword_prefix", ""},
                        {"end_of_word_suffix", ""},
                        {"fuse_unk", false},
                        {"byte_fallback", false},
                        {"ignore_merges", false},
                        {"vocab", vocab},
                        {"merges", merges}}}};
  test::TempDir tmp;
  test::write_file(tmp / "tokenizer.json", j.dump());
  auto from_json = Tokenizer::load(tmp / "tokenizer.json");
  EXPECT_EQ(from_json->format(), "tokenizer.json");
  EXPECT_EQ(from_json->fingerprint(), ref.fingerprint());
  EXPECT_FALSE(from_json->is_special(151657));  // <tool_call> is not special in Qwen2.5
  EXPECT_TRUE(from_json->is_special(151645));
  expect_all_vectors(*from_json, dir);

  test::TempDir slow;
  test::write_file(slow / "vocab.json", vocab.dump());
  std::filesystem::copy_file(dir / "merges.txt", slow / "merges.txt");
  test::write_file(
      slow / "tokenizer_config.json",
      nlohmann::json({{"added_tokens_decoder", decoder}, {"tokenizer_class", "Qwen2Tokenizer"}})
          .dump());
  auto from_slow = Tokenizer::load(slow.path());
  EXPECT_EQ(from_slow->format(), "vocab.json+merges.txt");
  EXPECT_EQ(from_slow->fingerprint(), ref.fingerprint());
  expect_all_vectors(*from_slow, dir);
}

}  // namespace
}  // namespace molt
