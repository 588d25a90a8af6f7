// molt tokenize / detokenize / bench tokenizer, end to end through the binary.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "test_util.h"

namespace molt {
namespace {

using test::run_molt;

// merges.txt loads fastest (no merges to derive from ranks); the folder and rank-file forms
// are exercised once each below.
std::string qwen_arg(const std::filesystem::path& dir) {
  return "--tokenizer " + (dir / "merges.txt").string() + " --specials " +
         (dir / "qwen2.5_specials.json").string();
}

TEST(CliTokenize, TextStdinAndJsonl) {
  MOLT_REQUIRE_SHARED(dir);
  auto r = run_molt("tokenize --tokenizer " + dir.string() + " --text 'Hello world'");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output, "9707 1879\n");
  r = run_molt("tokenize " + qwen_arg(dir), "Hello world");
  EXPECT_EQ(r.output, "9707 1879\n");
  r = run_molt("tokenize " + qwen_arg(dir) + " --jsonl",
               "\"Hello world\"\n\"<|im_end|>\"\n\" 3 33\"\n");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output, "[9707,1879]\n[151645]\n[220,18,220,18,18]\n");
  r = run_molt("tokenize " + qwen_arg(dir) + " --no-special --text '<|im_end|>'");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.output.find("151645"), std::string::npos) << r.output;
  r = run_molt("tokenize " + qwen_arg(dir) + " --chat --text Hi");
  EXPECT_EQ(r.output.rfind("151644 ", 0), 0u) << r.output;  // <|im_start|> first
  // A rank file with an explicit specials file.
  r = run_molt("tokenize --tokenizer " + (dir / "qwen.tiktoken").string() + " --specials " +
               (dir / "qwen2.5_specials.json").string() + " --text 'a<|endoftext|>'");
  EXPECT_EQ(r.output, "64 151643\n");
}

TEST(CliTokenize, Detokenize) {
  MOLT_REQUIRE_SHARED(dir);
  auto r = run_molt("detokenize " + qwen_arg(dir) + " --ids '9707 1879'");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output, "Hello world");
  r = run_molt("detokenize " + qwen_arg(dir), "[9707, 1879, 151645]\n");
  EXPECT_EQ(r.output, "Hello world<|im_end|>");
  r = run_molt("detokenize " + qwen_arg(dir) + " --skip-special", "9707,151645");
  EXPECT_EQ(r.output, "Hello");
  r = run_molt("detokenize " + qwen_arg(dir) + " --jsonl", "[9707,1879]\n[26525]\n");
  EXPECT_EQ(r.output, "\"Hello world\"\n\" \xEF\xBF\xBD\"\n");  // half an emoji -> U+FFFD
  r = run_molt("detokenize " + qwen_arg(dir) + " --ids '9707 999999'");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("token id 999999 is not in the vocabulary"), std::string::npos)
      << r.output;
  r = run_molt("detokenize " + qwen_arg(dir) + " --ids '9707 x'");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("'x' is not a token id"), std::string::npos) << r.output;
}

TEST(CliTokenize, InvalidUtf8AndByteFallback) {
  MOLT_REQUIRE_SHARED(dir);
  const std::string bad = "ok \xFF\xC3";
  auto r = run_molt("tokenize " + qwen_arg(dir), bad);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("molt: error: stdin: input is not valid UTF-8: byte 0xFF at offset 3"),
            std::string::npos)
      << r.output;
  r = run_molt("tokenize " + qwen_arg(dir) + " --byte-fallback", bad);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  const std::string ids = r.output;
  r = run_molt("detokenize " + qwen_arg(dir) + " --raw-bytes", ids);
  EXPECT_EQ(r.output, bad);
  r = run_molt("tokenize " + qwen_arg(dir) + " --jsonl", "\"fine\"\n[1]\n");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("stdin line 2: expected a JSON string"), std::string::npos) << r.output;
}

TEST(CliTokenize, BrokenTokenizerFilesAreNamed) {
  test::TempDir dir;
  test::write_file(dir / "tokenizer.json", "{\"model\": {\"type\": \"BPE\", \"vocab\": {");
  auto r = run_molt("tokenize --tokenizer " + dir.path().string() + " --text hi");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("molt: error: " + (dir / "tokenizer.json").string() + ": malformed JSON"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("not valid JSON"), std::string::npos) << r.output;
  r = run_molt("detokenize --tokenizer " + (dir / "nope.tiktoken").string() + " --ids 1");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("nope.tiktoken: no such file or directory"), std::string::npos)
      << r.output;
  r = run_molt("tokenize --text hi");
  EXPECT_NE(r.exit_code, 0);  // --tokenizer is required
}

TEST(CliTokenize, BenchPrintsFigures) {
  MOLT_REQUIRE_SHARED(dir);
  test::TempDir tmp;
  std::string text;
  for (int i = 0; i < 50; ++i)
    text += "The licenses for most software are designed to take away your freedom. ";
  test::write_file(tmp / "prose.txt", text);
  auto r = run_molt("bench tokenizer " + qwen_arg(dir) + " --text-file " +
                    (tmp / "prose.txt").string() + " --seconds 0.05 --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto j = nlohmann::json::parse(r.output);
  EXPECT_EQ(j["bytes"], text.size());
  EXPECT_GT(j["tokens"].get<int>(), 500);
  EXPECT_GT(j["encode_cold_mb_s"].get<double>(), 0);
  EXPECT_GT(j["encode_warm_mb_s"].get<double>(), 0);
  EXPECT_TRUE(j["round_trip_exact"].get<bool>());
  EXPECT_EQ(j["threads"], 1);
}

}  // namespace
}  // namespace molt
