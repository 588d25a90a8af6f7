// The Qwen2 pre-tokenizer: hand-derived splits, Oniguruma's \s (White_Space) rather than PCRE2's,
// long runs, and agreement with an independent transcription of the regex on random text.
#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer/pretokenizer.h"

#include <gtest/gtest.h>
#include <pcre2.h>

#include <random>

#include "molt/common/error.h"
#include "tokenizer/utf8.h"

namespace molt::tok {
namespace {

std::vector<std::string> qwen_pieces(std::string_view text) {
  static const PreTokenizer pre = [] {
    PreTokenizer p;
    p.add(kQwen2Pattern, false);
    return p;
  }();
  std::vector<std::string_view> views;
  pre.split(text, views);
  return {views.begin(), views.end()};
}

using Pieces = std::vector<std::string>;

TEST(Qwen2PreTokenizer, WordsSpacesAndContractions) {
  EXPECT_EQ(qwen_pieces("Hello world"), (Pieces{"Hello", " world"}));
  EXPECT_EQ(qwen_pieces("Hello, y'all! How're you?"),
            (Pieces{"Hello", ",", " y", "'all", "!", " How", "'re", " you", "?"}));
  // (?i:...) makes contractions case-insensitive.
  EXPECT_EQ(qwen_pieces("I'M HE'LL"), (Pieces{"I", "'M", " HE", "'LL"}));
  // A punctuation or symbol character may lead a word: "[^\r\n\p{L}\p{N}]?\p{L}+".
  // A space before punctuation stays with the punctuation, not the word after it.
  EXPECT_EQ(qwen_pieces("$hello (world)"), (Pieces{"$hello", " (", "world", ")"}));
}

TEST(Qwen2PreTokenizer, DigitsAreSingle) {
  EXPECT_EQ(qwen_pieces("12345"), (Pieces{"1", "2", "3", "4", "5"}));
  EXPECT_EQ(qwen_pieces("in 2024."), (Pieces{"in", " ", "2", "0", "2", "4", "."}));
  EXPECT_EQ(qwen_pieces("3.14"), (Pieces{"3", ".", "1", "4"}));
  // Other numeric characters are \p{N} too: Arabic-Indic digits and vulgar fractions.
  EXPECT_EQ(qwen_pieces("\xD9\xA1\xD9\xA2 \xC2\xBD"),
            (Pieces{"\xD9\xA1", "\xD9\xA2", " ", "\xC2\xBD"}));
}

TEST(Qwen2PreTokenizer, WhitespaceRuns) {
  // The last space of a run goes with the next word; a run at the end stays whole.
  EXPECT_EQ(qwen_pieces("a    b"), (Pieces{"a", "   ", " b"}));
  EXPECT_EQ(qwen_pieces("a   "), (Pieces{"a", "   "}));
  // Newlines: "\s*[\r\n]+" takes whitespace up to the last newline of the run.
  EXPECT_EQ(qwen_pieces("a\n\n  b"), (Pieces{"a", "\n\n", " ", " b"}));
  EXPECT_EQ(qwen_pieces("a \n \n b"), (Pieces{"a", " \n \n", " b"}));
  EXPECT_EQ(qwen_pieces("a\r\n\tb"), (Pieces{"a", "\r\n", "\tb"}));
  // Punctuation swallows the newlines that follow it.
  EXPECT_EQ(qwen_pieces("end.\n\nNext"), (Pieces{"end", ".\n\n", "Next"}));
  EXPECT_EQ(qwen_pieces("    Hello\n    Hello"), (Pieces{"   ", " Hello", "\n", "   ", " Hello"}));
}

TEST(Qwen2PreTokenizer, ScriptsAndEmoji) {
  // CJK ideographs are \p{L}: a run is one piece.
  EXPECT_EQ(qwen_pieces("我想在apple工作"), (Pieces{"我想在apple工作"}));
  EXPECT_EQ(qwen_pieces("Привет мир"), (Pieces{"Привет", " мир"}));
  // Emoji are neither letters nor numbers: " ?[^\s\p{L}\p{N}]+".
  EXPECT_EQ(qwen_pieces("you 😁 ?"), (Pieces{"you", " 😁", " ?"}));
  EXPECT_EQ(qwen_pieces("🚀 (normal)"), (Pieces{"🚀", " (", "normal", ")"}));
  // Devanagari signs are marks (\p{M}), not letters: a mark leads the next letters as a
  // prefix, or stands alone.
  EXPECT_EQ(qwen_pieces("नमस्ते"), (Pieces{"नमस", "्त", "े"}));
}

TEST(Qwen2PreTokenizer, UnicodeWhiteSpaceNotPcre2Space) {
  // U+001C..U+001F are not White_Space: they behave like punctuation.
  EXPECT_EQ(qwen_pieces(" \x1C "), (Pieces{" \x1C", " "}));
  EXPECT_EQ(qwen_pieces(":\x1F"), (Pieces{":\x1F"}));
  // U+180E (Mongolian vowel separator) is Cf since Unicode 6.3; PCRE2's \s still accepts it.
  EXPECT_EQ(qwen_pieces(" \xE1\xA0\x8E "), (Pieces{" \xE1\xA0\x8E", " "}));
  // U+0085 (NEL), U+00A0, U+3000 are White_Space.
  EXPECT_EQ(qwen_pieces(" \xC2\x85 "), (Pieces{" \xC2\x85 "}));
  EXPECT_EQ(qwen_pieces("a\xE3\x80\x80\xE3\x80\x80"
                        "b"),
            (Pieces{"a", "\xE3\x80\x80",
                    "\xE3\x80\x80"
                    "b"}));
  // Zero-width space U+200B is not White_Space.
  EXPECT_EQ(qwen_pieces("a\xE2\x80\x8B b"), (Pieces{"a", "\xE2\x80\x8B", " b"}));
}

TEST(Qwen2PreTokenizer, RewriteSpellsOutWhiteSpace) {
  const std::string r = rewrite_whitespace_escapes(R"(\s+(?!\S)|[^\s\p{L}]|\\s|[\]\s])");
  EXPECT_EQ(r.find("\\s"), r.find("\\\\s") + 1);  // only the escaped backslash remains
  EXPECT_NE(r.find("[^\\t\\n"), std::string::npos);
  EXPECT_EQ(rewrite_whitespace_escapes("[[:alpha:]\\s]"),
            "[[:alpha:]" +
                rewrite_whitespace_escapes("\\s").substr(
                    1, rewrite_whitespace_escapes("\\s").size() - 2) +
                "]");
}

TEST(Qwen2PreTokenizer, LongRunsAreLinear) {
  const std::string spaces(1'000'000, ' ');
  EXPECT_EQ(qwen_pieces(spaces + "x"), (Pieces{std::string(999'999, ' '), " x"}));
  std::string mixed;
  for (int i = 0; i < 200'000; ++i) mixed += " \n";
  EXPECT_EQ(qwen_pieces(mixed), (Pieces{mixed}));  // ends in a newline: one "\s*[\r\n]+" piece
  const std::string bangs(500'000, '!');
  EXPECT_EQ(qwen_pieces(bangs), (Pieces{bangs}));
}

TEST(PreTokenizer, LiteralSplitAndSequence) {
  PreTokenizer p;
  p.add("--", true);
  p.add(R"(\p{N})", false);
  std::vector<std::string_view> v;
  p.split("a--b1--", v);
  EXPECT_EQ(Pieces(v.begin(), v.end()), (Pieces{"a", "--", "b", "1", "--"}));
  EXPECT_THROW(PreTokenizer().add("(unclosed", false), molt::Error);
}

// --- An independent transcription of the Qwen2 pattern, alternative by alternative. -------

class Classes {
 public:
  Classes() : letter_(compile("^\\p{L}$")), number_(compile("^\\p{N}$")) {}
  ~Classes() {
    pcre2_code_free(letter_);
    pcre2_code_free(number_);
  }
  bool letter(char32_t c) const { return is(letter_, c); }
  bool number(char32_t c) const { return is(number_, c); }

 private:
  static pcre2_code* compile(const char* p) {
    int err;
    PCRE2_SIZE off;
    return pcre2_compile(reinterpret_cast<PCRE2_SPTR>(p), PCRE2_ZERO_TERMINATED,
                         PCRE2_UTF | PCRE2_UCP, &err, &off, nullptr);
  }
  static bool is(pcre2_code* re, char32_t c) {
    std::string s;
    append_utf8(s, c);
    pcre2_match_data* md = pcre2_match_data_create(1, nullptr);
    const int rc =
        pcre2_match(re, reinterpret_cast<PCRE2_SPTR>(s.data()), s.size(), 0, 0, md, nullptr);
    pcre2_match_data_free(md);
    return rc > 0;
  }
  pcre2_code* letter_;
  pcre2_code* number_;
};

std::vector<std::string> reference_pieces(std::string_view text) {
  static const Classes cls;
  std::vector<char32_t> c;
  std::vector<size_t> at;  // byte offset of each character, plus the end
  for (size_t i = 0; i < text.size();) {
    at.push_back(i);
    c.push_back(next_code_point(text, i));
  }
  at.push_back(text.size());
  const size_t n = c.size();
  auto L = [&](size_t k) { return k < n && cls.letter(c[k]); };
  auto N = [&](size_t k) { return k < n && cls.number(c[k]); };
  auto S = [&](size_t k) { return k < n && is_white_space(c[k]); };
  auto NL = [&](size_t k) { return k < n && (c[k] == '\r' || c[k] == '\n'); };
  auto lower = [&](size_t k) {
    return k < n && c[k] < 128 ? std::tolower(static_cast<int>(c[k])) : -1;
  };
  std::vector<std::string> out;
  size_t i = 0;
  while (i < n) {
    size_t end = i;
    if (c[i] == '\'' && (lower(i + 1) == 's' || lower(i + 1) == 't' || lower(i + 1) == 'm' ||
                         lower(i + 1) == 'd')) {
      end = i + 2;  // 's 't 'm 'd
    } else if (c[i] == '\'' && ((lower(i + 1) == 'r' && lower(i + 2) == 'e') ||
                                (lower(i + 1) == 'v' && lower(i + 2) == 'e') ||
                                (lower(i + 1) == 'l' && lower(i + 2) == 'l'))) {
      end = i + 3;  // 're 've 'll
    } else if (L(i) || (!NL(i) && !L(i) && !N(i) && L(i + 1))) {
      end = L(i) ? i : i + 1;  // [^\r\n\p{L}\p{N}]?\p{L}+
      while (L(end)) ++end;
    } else if (N(i)) {
      end = i + 1;  // \p{N}
    } else if ((c[i] == ' ' && i + 1 < n && !S(i + 1) && !L(i + 1) && !N(i + 1)) ||
               (!S(i) && !L(i) && !N(i))) {
      end = c[i] == ' ' ? i + 1 : i;  //  ?[^\s\p{L}\p{N}]+[\r\n]*
      while (end < n && !S(end) && !L(end) && !N(end)) ++end;
      while (NL(end)) ++end;
    } else {
      size_t run = i;  // whitespace run [i, run)
      while (S(run)) ++run;
      size_t last_nl = n;
      for (size_t k = i; k < run; ++k) {
        if (NL(k)) last_nl = k;
      }
      if (last_nl != n) {
        end = last_nl + 1;  // \s*[\r\n]+
      } else if (run == n || run - 1 > i) {
        end = run == n ? run : run - 1;  // \s+(?!\S)
      } else {
        end = run;  // \s+
      }
    }
    out.emplace_back(text.substr(at[i], at[end] - at[i]));
    i = end;
  }
  return out;
}

// Characters that exercise every branch: ASCII classes, controls, Unicode spaces, marks,
// letters and digits of several scripts, emoji.
std::string random_text(std::mt19937& rng, size_t length) {
  static const std::vector<std::pair<char32_t, char32_t>> ranges = {
      {'a', 'z'},       {'A', 'Z'},       {'0', '9'},        {' ', ' '},       {' ', ' '},
      {'\n', '\n'},     {'\r', '\r'},     {'\t', '\t'},      {'!', '/'},       {':', '@'},
      {'\'', '\''},     {'\'', '\''},     {'s', 's'},        {'l', 'l'},       {0x1C, 0x1F},
      {0x00, 0x08},     {0x85, 0x85},     {0xA0, 0xBF},      {0xC0, 0x17F},    {0x300, 0x36F},
      {0x391, 0x3C9},   {0x410, 0x44F},   {0x660, 0x669},    {0x900, 0x97F},   {0x1680, 0x1680},
      {0x180E, 0x180E}, {0x2000, 0x206F}, {0x3000, 0x3000},  {0x3040, 0x30FF}, {0x4E00, 0x4E80},
      {0xAC00, 0xAC40}, {0xFF01, 0xFF5E}, {0x1F300, 0x1F64F}};
  std::string s;
  for (size_t k = 0; k < length; ++k) {
    const auto& [lo, hi] = ranges[rng() % ranges.size()];
    append_utf8(s, lo + static_cast<char32_t>(rng() % (hi - lo + 1)));
  }
  return s;
}

TEST(Qwen2PreTokenizer, MatchesReferenceOnRandomText) {
  std::mt19937 rng(20240607);
  for (int trial = 0; trial < 3000; ++trial) {
    const std::string s = random_text(rng, 1 + rng() % 40);
    ASSERT_EQ(qwen_pieces(s), reference_pieces(s)) << "text: '" << s << "'";
  }
}

}  // namespace
}  // namespace molt::tok
