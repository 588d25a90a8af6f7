// StreamDecoder: never emits half a character, flushes what is left, and always adds up to
// decode() of the same ids.
#include <gtest/gtest.h>

#include <random>

#include "molt/common/error.h"
#include "qwen_vocab.h"

namespace molt {
namespace {

const std::string kFFFD = "\xEF\xBF\xBD";

TEST(StreamDecoder, HoldsBackSplitCharacters) {
  MOLT_REQUIRE_SHARED(dir);
  const Tokenizer& tok = test::qwen_tiktoken(dir);
  StreamDecoder d(tok);
  // " 😁" is [" \xF0\x9F\x98", "\x81"]: the emoji spans two tokens.
  EXPECT_EQ(d.push(26525), " ");
  EXPECT_EQ(d.pending_bytes(), 3u);
  EXPECT_EQ(d.push(223), "😁");
  EXPECT_EQ(d.pending_bytes(), 0u);
  EXPECT_EQ(d.flush(), "");

  // One byte token at a time: a character appears when its last byte arrives.
  const std::string text = "\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x81!";  // é € 😁 !
  std::vector<std::string> out;
  for (char b : text) out.push_back(d.push(tok.token_id(std::string(1, b))));
  EXPECT_EQ(out, (std::vector<std::string>{"", "\xC3\xA9", "", "", "\xE2\x82\xAC", "", "", "",
                                           "\xF0\x9F\x98\x81", "!"}));
}

TEST(StreamDecoder, InvalidBytesAndFlush) {
  MOLT_REQUIRE_SHARED(dir);
  const Tokenizer& tok = test::qwen_tiktoken(dir);
  StreamDecoder d(tok);
  // A byte that can never start a character is replaced at once.
  EXPECT_EQ(d.push(tok.token_id("\xFF")), kFFFD);
  // A character cut short by the end of the stream becomes one U+FFFD at flush.
  EXPECT_EQ(d.push(tok.token_id("\xE2")), "");
  EXPECT_EQ(d.push(tok.token_id("\x82")), "");
  EXPECT_EQ(d.flush(), kFFFD);
  EXPECT_EQ(d.flush(), "");
  // A lead byte followed by a non-continuation: the lead is replaced, the rest kept.
  EXPECT_EQ(d.push(tok.token_id("\xE2")), "");
  EXPECT_EQ(d.push(tok.token_id("a")), kFFFD + "a");
}

TEST(StreamDecoder, SkipsSpecialTokensWhenAsked) {
  MOLT_REQUIRE_SHARED(dir);
  const Tokenizer& tok = test::qwen_tiktoken(dir);
  StreamDecoder keep(tok), skip(tok, /*skip_special=*/true);
  EXPECT_EQ(keep.push(151645), "<|im_end|>");
  EXPECT_EQ(skip.push(151645), "");
  EXPECT_THROW(skip.push(151665), Error);
}

TEST(StreamDecoder, AddsUpToDecodeOnRandomIds) {
  MOLT_REQUIRE_SHARED(dir);
  const Tokenizer& tok = test::qwen_tiktoken(dir);
  std::mt19937 rng(5);
  for (int trial = 0; trial < 300; ++trial) {
    std::vector<int32_t> ids(1 + rng() % 30);
    for (auto& id : ids) {
      // Favour byte tokens (ids 0..255) so that characters get split often.
      id = static_cast<int32_t>(rng() % 3 == 0 ? rng() % 256 : rng() % tok.vocab_size());
    }
    StreamDecoder d(tok);
    std::string streamed;
    for (int32_t id : ids) {
      const std::string piece = d.push(id);
      streamed += piece;
    }
    streamed += d.flush();
    ASSERT_EQ(streamed, tok.decode(ids)) << "trial " << trial;
  }
}

}  // namespace
}  // namespace molt
