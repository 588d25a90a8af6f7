// Inputs the tokenizer fuzzers found (tests/fuzz/regressions/): each is refused with a
// molt::Error naming the file, and nothing else escapes.
#include "fuzz_regressions.h"

#include <gtest/gtest.h>

#include "molt/common/error.h"
#include "molt/tokenizer/chat_template.h"
#include "molt/tokenizer/tokenizer.h"
#include "test_util.h"

namespace molt {
namespace {

TEST(FuzzRegressions, TokenizerJson) {
  test::TempDir tmp;
  const auto file = tmp / "tokenizer.json";
  test::expect_all_refused(
      "tokenizer_json",
      [&](const std::string& bytes) {
        test::write_file(file, bytes);
        Tokenizer::load(file);
      },
      file.string());
}

// The harness's input: vocab.json, "\n--merges.txt--\n", merges.txt (or merges.txt alone).
TEST(FuzzRegressions, VocabJsonAndMergesTxt) {
  test::TempDir tmp;
  test::expect_all_refused(
      "vocab_merges",
      [&](const std::string& bytes) {
        const std::string sep = "\n--merges.txt--\n";
        const size_t at = bytes.find(sep);
        std::filesystem::remove(tmp / "vocab.json");
        if (at == std::string::npos) {
          test::write_file(tmp / "merges.txt", bytes);
        } else {
          test::write_file(tmp / "vocab.json", bytes.substr(0, at));
          test::write_file(tmp / "merges.txt", bytes.substr(at + sep.size()));
        }
        Tokenizer::load(tmp.path());
      },
      tmp.path().string());
}

TEST(FuzzRegressions, Tiktoken) {
  test::TempDir tmp;
  const auto file = tmp / "qwen.tiktoken";
  test::expect_all_refused(
      "tiktoken",
      [&](const std::string& bytes) {
        test::write_file(file, bytes);
        Tokenizer::load(file);
      },
      file.string());
}

// Tool JSON is re-serialised by recursion: deep nesting is refused, not a stack overflow.
TEST(FuzzRegressions, ChatTemplateRefusesDeeplyNestedToolJson) {
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  EXPECT_THROW(apply_chat_template({{"user", "hi"}}, true, {deep}), Error);
  ChatMessage call{"assistant", "", {{"f", deep}}};
  EXPECT_THROW(apply_chat_template({{"user", "hi"}, call}, true), Error);
  // A few levels are what real schemas use.
  EXPECT_NO_THROW(apply_chat_template({{"user", "hi"}}, true, {R"({"a": [[{"b": [1]}]]})"}));
}

}  // namespace
}  // namespace molt
