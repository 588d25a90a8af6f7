// The needle generator: deterministic per seed, the fact planted once and asked at the end,
// prompts about the context asked for, ChatML every n-th, clear errors on too little filler.
#include "molt/bench/needles.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "molt/common/error.h"
#include "molt/tokenizer/tokenizer.h"
#include "test_util.h"

namespace molt {
namespace {

const std::filesystem::path kLadder = std::filesystem::path(MOLT_SOURCE_DIR) / "models/tiny-ladder";

class Needles : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    tok_ = Tokenizer::load(kLadder / "s").release();
    filler_ = new std::string(molt::test::read_file(kLadder / "data/test.txt"));
  }
  static void TearDownTestSuite() {
    delete tok_;
    delete filler_;
  }
  static Tokenizer* tok_;
  static std::string* filler_;
};
Tokenizer* Needles::tok_ = nullptr;
std::string* Needles::filler_ = nullptr;

TEST_F(Needles, SameSeedSameSetOtherSeedOtherSet) {
  NeedleOptions o{.context = 256, .count = 6, .seed = 7};
  const auto a = make_needles(*tok_, *filler_, o);
  const auto b = make_needles(*tok_, *filler_, o);
  o.seed = 8;
  const auto c = make_needles(*tok_, *filler_, o);
  ASSERT_EQ(a.size(), 6u);
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].prompt, b[i].prompt);
    EXPECT_EQ(a[i].answer, b[i].answer);
  }
  int same = 0;
  for (size_t i = 0; i < a.size(); ++i) same += a[i].prompt == c[i].prompt;
  EXPECT_EQ(same, 0);
}

TEST_F(Needles, FactPlantedOnceQuestionLastLengthNearContext) {
  for (int64_t ctx : {128, 700, 2048}) {
    const auto items = make_needles(*tok_, *filler_, {.context = ctx, .count = 8, .seed = 3});
    std::set<std::string> answers;
    for (const NeedleItem& n : items) {
      const std::string ans(n.answer.front() == ' ' ? n.answer.substr(1) : n.answer);
      answers.insert(ans);
      // The answer appears in the body (planted) and the prompt ends on the question.
      const std::string body = n.prompt.substr(0, n.prompt.rfind("\n\n"));
      EXPECT_NE(body.find(" " + ans), std::string::npos) << n.prompt;
      if (n.chat) {
        EXPECT_TRUE(n.prompt.ends_with("<|im_end|>\n<|im_start|>assistant\n"));
        EXPECT_TRUE(n.prompt.starts_with("<|im_start|>user\n"));
        EXPECT_NE(n.answer.front(), ' ');
      } else {
        EXPECT_TRUE(n.prompt.ends_with("\nAnswer:"));
        EXPECT_EQ(n.answer.front(), ' ');
      }
      const auto ids = tok_->encode(n.prompt);
      EXPECT_GT(static_cast<int64_t>(ids.size()), ctx * 8 / 10) << ctx;
      EXPECT_LT(static_cast<int64_t>(ids.size()), ctx * 11 / 10 + 8) << ctx;
      EXPECT_GE(n.depth, 0.0);
      EXPECT_LE(n.depth, 1.0);
    }
    EXPECT_GT(answers.size(), 4u);  // varied
  }
}

TEST_F(Needles, ChatEveryNth) {
  const auto items = make_needles(*tok_, *filler_, {.context = 128, .count = 8, .chat_every = 4});
  for (size_t i = 0; i < items.size(); ++i) EXPECT_EQ(items[i].chat, i % 4 == 3) << i;
  const auto plain = make_needles(*tok_, *filler_, {.context = 128, .count = 8, .chat_every = 0});
  for (const auto& n : plain) EXPECT_FALSE(n.chat);
}

TEST_F(Needles, TooLittleFillerOrContextIsAnError) {
  EXPECT_THROW(make_needles(*tok_, "one paragraph only", {.context = 256}), Error);
  EXPECT_THROW(make_needles(*tok_, *filler_, {.context = 10}), Error);
  EXPECT_THROW(make_needles(*tok_, *filler_, {.context = 256, .count = 0}), Error);
}

TEST(NeedleMatch, TrimsWhitespaceOnly) {
  EXPECT_TRUE(needle_answer_matches(" 7305", "7305"));
  EXPECT_TRUE(needle_answer_matches("Comet\n", " Comet"));
  EXPECT_FALSE(needle_answer_matches(" 730", " 7305"));
  EXPECT_FALSE(needle_answer_matches("comet", "Comet"));
}

TEST(NeedleFile, ReadsTheContextAskedForAndNamesBadLines) {
  test::TempDir dir;
  const auto file = dir / "n.jsonl";
  std::ofstream(file) << R"({"context": 700, "prompt": "p1", "answer": " a1", "depth": 0.5})"
                      << "\n\n"
                      << R"({"context": 2048, "prompt": "p2", "answer": " a2"})"
                      << "\n"
                      << R"({"context": 700, "prompt": "p3", "answer": " a3"})"
                      << "\n"
                      << R"({"context": 700, "answer": " a4"})"
                      << "\n";
  const auto two = read_needles(file, 700, 2);
  ASSERT_EQ(two.size(), 2u);
  EXPECT_EQ(two[0].prompt, "p1");
  EXPECT_EQ(two[0].depth, 0.5);
  EXPECT_EQ(two[1].answer, " a3");
  try {
    read_needles(file, 700, 10);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("n.jsonl:5:"), std::string::npos) << e.what();
  }
  EXPECT_THROW(read_needles(file, 123, 10), Error);
  EXPECT_THROW(read_needles(dir / "absent.jsonl", 700, 1), Error);
  EXPECT_EQ(read_text_file(file).substr(0, 2), "{\"");
}

}  // namespace
}  // namespace molt
