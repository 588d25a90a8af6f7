// Encoding behaviour on the real Qwen2.5 vocabulary: NFC, whitespace and digit rules, scripts,
// emoji, control characters, long runs, added tokens, invalid UTF-8, and properties on random
// text checked against an independent BPE (tiktoken's rule: merge the adjacent pair whose
// joined bytes have the lowest rank).
#include <gtest/gtest.h>
#include <utf8proc.h>

#include <climits>
#include <random>
#include <thread>

#include "molt/common/error.h"
#include "qwen_vocab.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/utf8.h"

namespace molt {
namespace {

using Ids = std::vector<int32_t>;

#define QWEN(tok)            \
  MOLT_REQUIRE_SHARED(dir_); \
  const Tokenizer& tok = test::qwen_tiktoken(dir_)

Ids cat(std::initializer_list<Ids> parts) {
  Ids out;
  for (const Ids& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

TEST(QwenEncode, NfcComesFirst) {
  QWEN(tok);
  EXPECT_EQ(tok.encode("e\xCC\x81"), (Ids{963}));  // e + U+0301
  EXPECT_EQ(tok.encode("\xC3\xA9"), (Ids{963}));   // é
  // Without the normaliser the same text gives two tokens.
  tok::TokenizerSpec spec = tok::load_tiktoken(dir_ / "qwen.tiktoken");
  spec.nfc = false;
  Tokenizer raw(std::make_unique<Tokenizer::Impl>(std::move(spec)));
  EXPECT_EQ(raw.encode("e\xCC\x81"), (Ids{68, 53839}));
  EXPECT_NE(raw.fingerprint(), tok.fingerprint());
}

TEST(QwenEncode, WhitespaceRules) {
  QWEN(tok);
  const int32_t b = tok.token_id(" b");
  ASSERT_GE(b, 0);
  EXPECT_EQ(tok.encode("a    b"), (Ids{64, 262, b}));         // "a" "   " " b"
  EXPECT_EQ(tok.encode("a\n\n  b"), (Ids{64, 271, 220, b}));  // "\n\n" " " " b"
  EXPECT_EQ(tok.encode("    Hello\n    Hello"), (Ids{262, 21927, 198, 262, 21927}));
  EXPECT_EQ(tok.encode("\t\n"), (Ids{1572}));
  EXPECT_EQ(tok.encode("\n\n\n"), (Ids{1406}));
}

TEST(QwenEncode, DigitsOneByOne) {
  QWEN(tok);
  EXPECT_EQ(tok.encode("12345"), (Ids{16, 17, 18, 19, 20}));
  EXPECT_EQ(tok.encode("in 2024."), (Ids{tok.token_id("in"), 220, 17, 15, 17, 19, 13}));
  EXPECT_EQ(tok.encode("3.14"), (Ids{18, 13, 16, 19}));
}

TEST(QwenEncode, CjkEmojiAndMixedScripts) {
  QWEN(tok);
  EXPECT_EQ(tok.encode("我想在apple工作"), (Ids{104100, 18493, 22377, 99257}));
  EXPECT_EQ(tok.encode(" 😁"), (Ids{26525, 223}));
  EXPECT_EQ(tok.encode("🚀"), (Ids{145836}));
  // A newline between a letter and a letter is its own piece, so scripts compose.
  const auto vectors = test::read_vocab_vectors(dir_);
  const std::string ru = vectors[20].input, km = vectors[21].input, zh = "我想在apple工作";
  EXPECT_EQ(tok.encode(km), vectors[21].ids);
  EXPECT_EQ(tok.encode(ru + "\n" + zh + "\n" + km),
            cat({tok.encode(ru), {198}, tok.encode(zh), {198}, tok.encode(km)}));
  EXPECT_EQ(tok.encode(ru), (Ids{78762, 14144, 1456, 13073, 63471, 33594, 3038, 133178, 79012}));
}

TEST(QwenEncode, ControlCharacters) {
  QWEN(tok);
  // Byte tokens of non-printable bytes follow the 188 printable ones in byte order.
  EXPECT_EQ(tok.encode(std::string(1, '\0')), (Ids{188}));
  EXPECT_EQ(tok.encode("\x1C"), (Ids{216}));
  EXPECT_EQ(tok.encode("\x1F"), (Ids{219}));
  EXPECT_EQ(tok.encode("\x7F"), (Ids{221}));
  const std::string s = std::string("a\0b\x1C\x1D \x1E\x1F\x07\x1B[0m\n", 15);
  EXPECT_EQ(tok.decode(tok.encode(s)), s);
  // U+001C..U+001F are not whitespace: " \x1C " is " \x1C" + " ", not one whitespace run.
  EXPECT_EQ(tok.encode(" \x1C "), cat({tok.encode(" \x1C"), {220}}));
}

TEST(QwenEncode, LongRunsOfSpacesAndNewlines) {
  QWEN(tok);
  const std::string spaces(10'000, ' ');
  const Ids ids = tok.encode(spaces + "x");
  EXPECT_EQ(tok.decode(ids), spaces + "x");
  EXPECT_EQ(ids, cat({tok.encode(std::string(9'999, ' ')), tok.encode(" x")}));
  EXPECT_LT(ids.size(), 1'000u);  // runs of spaces have their own tokens
  const std::string newlines(50'000, '\n');
  EXPECT_EQ(tok.decode(tok.encode(newlines)), newlines);
  std::string mixed;
  for (int i = 0; i < 5'000; ++i) mixed += "  \n\t";
  EXPECT_EQ(tok.decode(tok.encode(mixed)), mixed);
}

TEST(QwenEncode, AddedTokensAreSplitOutFirst) {
  QWEN(tok);
  const Ids chat = tok.encode("<|im_start|>user\nhi<|im_end|>\n");
  EXPECT_EQ(chat, (Ids{151644, tok.token_id("user"), 198, tok.token_id("hi"), 151645, 198}));
  EXPECT_EQ(tok.encode("a<|endoftext|><|endoftext|>b"), (Ids{64, 151643, 151643, 65}));
  // As text, the same characters are ordinary BPE pieces.
  const Ids plain = tok.encode("<|im_end|>", /*parse_special=*/false);
  EXPECT_GT(plain.size(), 1u);
  EXPECT_EQ(tok.decode(plain), "<|im_end|>");
  EXPECT_EQ(tok.token_id("<|im_end|>"), 151645);
  EXPECT_EQ(tok.token_id("<|nope|>"), -1);
  EXPECT_EQ(tok.token_id(" Hello"), 21927);
  EXPECT_EQ(tok.vocab_size(), 151665);
  EXPECT_EQ(tok.added_tokens().size(), 22u);
  EXPECT_EQ(tok.decode(std::vector<int32_t>{151644, 872, 151645}, /*skip_special=*/true),
            tok.decode(std::vector<int32_t>{872}));
}

TEST(QwenEncode, InvalidUtf8IsAnErrorUnlessByteFallback) {
  QWEN(tok);
  try {
    tok.encode("ok \xFF then");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not valid UTF-8: byte 0xFF at offset 3"),
              std::string::npos)
        << e.what();
  }
  const std::string bad = "caf\xC3 \xE2\x82 ok \xFF<|im_end|>\xF0\x9F\x98";
  const Ids ids = tok.encode(bad, true, InvalidUtf8::kByteFallback);
  EXPECT_EQ(tok.decode_bytes(ids), bad);
  EXPECT_NE(std::find(ids.begin(), ids.end(), 151645), ids.end());
  EXPECT_EQ(tok.encode("\xFF", true, InvalidUtf8::kByteFallback), (Ids{tok.token_id("\xFF")}));
  EXPECT_THROW(tok.decode(std::vector<int32_t>{151665}), Error);
  EXPECT_THROW(tok.decode(std::vector<int32_t>{-1}), Error);
}

// --- Properties on random text ------------------------------------------------------------

std::string random_unicode(std::mt19937& rng, size_t length) {
  static const std::vector<std::pair<char32_t, char32_t>> ranges = {
      {'a', 'z'},         {'A', 'Z'},         {'0', '9'},         {' ', ' '},
      {' ', ' '},         {'\n', '\n'},       {'\t', '\r'},       {'!', '/'},
      {'\'', '\''},       {0x01, 0x1F},       {0x7F, 0xFF},       {0x100, 0x24F},
      {0x300, 0x36F},     {0x370, 0x3FF},     {0x400, 0x4FF},     {0x590, 0x6FF},
      {0x900, 0x97F},     {0xE00, 0xE7F},     {0x1100, 0x11FF},   {0x1E00, 0x1EFF},
      {0x2000, 0x206F},   {0x20A0, 0x20CF},   {0x2190, 0x23FF},   {0x3000, 0x30FF},
      {0x4E00, 0x9FFF},   {0xAC00, 0xD7A3},   {0xF900, 0xFAFF},   {0xFF00, 0xFFEF},
      {0x1D400, 0x1D7FF}, {0x1F300, 0x1FAFF}, {0x20000, 0x2A6DF}, {0x10FFF0, 0x10FFFF}};
  std::string s;
  for (size_t k = 0; k < length; ++k) {
    const auto& [lo, hi] = ranges[rng() % ranges.size()];
    tok::append_utf8(s, lo + static_cast<char32_t>(rng() % (hi - lo + 1)));
  }
  return s;
}

std::string nfc(const std::string& s) {
  utf8proc_uint8_t* out = nullptr;
  const auto n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(s.data()),
                              static_cast<utf8proc_ssize_t>(s.size()), &out,
                              static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
  std::string r(reinterpret_cast<char*>(out), static_cast<size_t>(n));
  std::free(out);
  return r;
}

// tiktoken's byte-pair merge: repeatedly join the adjacent parts whose concatenation has the
// lowest rank (leftmost on ties); each remaining part is a token.
Ids tiktoken_bpe(const Tokenizer& tok, std::string_view piece) {
  std::vector<std::string> parts;
  for (char c : piece) parts.emplace_back(1, c);
  for (;;) {
    int32_t best_rank = INT32_MAX;
    size_t best = 0;
    for (size_t i = 0; i + 1 < parts.size(); ++i) {
      const int32_t r = tok.token_id(parts[i] + parts[i + 1]);
      if (r >= 0 && r < 151643 && r < best_rank) {
        best_rank = r;
        best = i;
      }
    }
    if (best_rank == INT32_MAX) break;
    parts[best] += parts[best + 1];
    parts.erase(parts.begin() + static_cast<std::ptrdiff_t>(best) + 1);
  }
  Ids ids;
  for (const auto& p : parts) ids.push_back(tok.token_id(p));
  return ids;
}

Ids reference_encode(const Tokenizer& tok, const std::string& text) {
  static const tok::PreTokenizer pre = [] {
    tok::PreTokenizer p;
    p.add(tok::kQwen2Pattern, false);
    return p;
  }();
  const std::string normal = nfc(text);
  std::vector<std::string_view> pieces;
  pre.split(normal, pieces);
  Ids ids;
  for (std::string_view p : pieces) {
    const Ids part = tiktoken_bpe(tok, p);
    ids.insert(ids.end(), part.begin(), part.end());
  }
  return ids;
}

TEST(QwenEncode, RoundTripIsNfcOnRandomUnicode) {
  QWEN(tok);
  std::mt19937 rng(7);
  for (int trial = 0; trial < 2000; ++trial) {
    const std::string s = random_unicode(rng, 1 + rng() % 60);
    const Ids ids = tok.encode(s, /*parse_special=*/false);
    ASSERT_EQ(tok.decode(ids), nfc(s)) << "trial " << trial;
  }
}

TEST(QwenEncode, MatchesTiktokenRuleOnRandomText) {
  QWEN(tok);
  std::mt19937 rng(11);
  for (int trial = 0; trial < 400; ++trial) {
    const std::string s = random_unicode(rng, 1 + rng() % 40);
    ASSERT_EQ(tok.encode(s, false), reference_encode(tok, s)) << "text: '" << s << "'";
  }
  // Pieces longer than 64 bytes take the heap-based merge.
  for (const std::string& s :
       {std::string(300, '!'), std::string(200, '-') + "=" + std::string(77, '-'),
        std::string("Pneumonoultramicroscopicsilicovolcanoconiosis") +
            "Supercalifragilisticexpialidocious" + "Antidisestablishmentarianism",
        std::string(100, 'a'), std::string("\xE4\xB8\xAD") + std::string(90, '.')}) {
    ASSERT_EQ(tok.encode(s, false), reference_encode(tok, s)) << s;
  }
}

TEST(QwenEncode, CacheAndThreadsGiveTheSameIds) {
  QWEN(tok);
  std::mt19937 rng(3);
  std::vector<std::string> texts;
  for (int i = 0; i < 200; ++i) texts.push_back(random_unicode(rng, 30));
  std::vector<Ids> first;
  tok.clear_cache();
  for (const auto& t : texts) first.push_back(tok.encode(t));
  std::vector<std::thread> threads;
  std::vector<int> ok(4, 1);
  for (int th = 0; th < 4; ++th) {
    threads.emplace_back([&, th] {
      for (int rep = 0; rep < 3; ++rep) {
        for (size_t i = 0; i < texts.size(); ++i) {
          if (tok.encode(texts[i]) != first[i]) ok[th] = 0;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(ok, (std::vector<int>{1, 1, 1, 1}));
}

}  // namespace
}  // namespace molt
