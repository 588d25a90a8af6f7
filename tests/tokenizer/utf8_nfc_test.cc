// UTF-8 validation and lossy decoding (Unicode's "maximal subpart" substitution, as Rust's
// from_utf8_lossy), the streaming tail, White_Space, and NFC with its fast path.
#include <gtest/gtest.h>
#include <utf8proc.h>

#include "tokenizer/nfc.h"
#include "tokenizer/utf8.h"

namespace molt::tok {
namespace {

const std::string kFFFD = "\xEF\xBF\xBD";

TEST(Utf8, FindsTheFirstIllFormedByte) {
  EXPECT_EQ(find_invalid_utf8("plain ascii text, long enough for the fast path"),
            std::string::npos);
  EXPECT_EQ(find_invalid_utf8("h\xC3\xA9llo \xE4\xB8\xAD \xF0\x9F\x98\x81"), std::string::npos);
  EXPECT_EQ(find_invalid_utf8("abcdefghij\xFF"), 10u);
  EXPECT_EQ(find_invalid_utf8("\xC0\xAF"), 0u);          // overlong
  EXPECT_EQ(find_invalid_utf8("ab\xED\xA0\x80"), 2u);    // surrogate
  EXPECT_EQ(find_invalid_utf8("\xF4\x90\x80\x80"), 0u);  // above U+10FFFF
  EXPECT_EQ(find_invalid_utf8("x\xE2\x82"), 1u);         // cut short
  EXPECT_EQ(find_invalid_utf8(std::string("a\0b", 3)), std::string::npos);
}

TEST(Utf8, LossyReplacesMaximalSubparts) {
  EXPECT_EQ(utf8_lossy("ok \xC3\xA9"), "ok \xC3\xA9");
  EXPECT_EQ(utf8_lossy("\xE2\x82"), kFFFD);  // truncated: one replacement
  EXPECT_EQ(utf8_lossy("\xE2\x82"
                       "A"),
            kFFFD + "A");
  EXPECT_EQ(utf8_lossy("\xF0\x80\x80"), kFFFD + kFFFD + kFFFD);  // F0 80 is never valid
  EXPECT_EQ(utf8_lossy("\xED\xA0\x80"), kFFFD + kFFFD + kFFFD);
  EXPECT_EQ(utf8_lossy("\xC0\xAF"), kFFFD + kFFFD);
  EXPECT_EQ(utf8_lossy("\xF4\x90\x80\x80"), kFFFD + kFFFD + kFFFD + kFFFD);
  EXPECT_EQ(utf8_lossy("\xF0\x9F\x98"
                       "x\x81"),
            kFFFD + "x" + kFFFD);
  EXPECT_EQ(utf8_lossy("\xFF\xFE"), kFFFD + kFFFD);
}

TEST(Utf8, IncompleteTail) {
  EXPECT_EQ(incomplete_utf8_tail(""), 0u);
  EXPECT_EQ(incomplete_utf8_tail("abc"), 0u);
  EXPECT_EQ(incomplete_utf8_tail("a\xF0\x9F\x98"), 3u);
  EXPECT_EQ(incomplete_utf8_tail("a\xF0\x9F"), 2u);
  EXPECT_EQ(incomplete_utf8_tail("a\xE2"), 1u);
  EXPECT_EQ(incomplete_utf8_tail("a\xF0\x9F\x98\x81"), 0u);
  EXPECT_EQ(incomplete_utf8_tail("a\xFF"), 0u);      // never completes: not held back
  EXPECT_EQ(incomplete_utf8_tail("a\xE0\x80"), 0u);  // E0 80 is already ill-formed
  EXPECT_EQ(incomplete_utf8_tail("\xC3"
                                 "\xE2\x82"),
            2u);
}

TEST(Utf8, CodePointsRoundTrip) {
  for (char32_t c : {U'a', U'\u00E9', U'\u4E2D', U'\U0001F601', U'\U0010FFFF'}) {
    std::string s;
    append_utf8(s, c);
    size_t i = 0;
    EXPECT_EQ(next_code_point(s, i), c);
    EXPECT_EQ(i, s.size());
    EXPECT_EQ(prev_code_point(s, i), c);
    EXPECT_EQ(i, 0u);
  }
}

TEST(Utf8, WhiteSpaceIsTheUnicodeProperty) {
  // The 25 White_Space code points of Unicode 15; nothing else.
  const std::vector<char32_t> ws = {0x09,   0x0A,   0x0B,   0x0C,   0x0D,   0x20,   0x85,
                                    0xA0,   0x1680, 0x2000, 0x2001, 0x2002, 0x2003, 0x2004,
                                    0x2005, 0x2006, 0x2007, 0x2008, 0x2009, 0x200A, 0x2028,
                                    0x2029, 0x202F, 0x205F, 0x3000};
  int count = 0;
  for (char32_t c = 0; c < 0x110000; ++c) count += is_white_space(c) ? 1 : 0;
  EXPECT_EQ(count, 25);
  for (char32_t c : ws) EXPECT_TRUE(is_white_space(c)) << std::hex << static_cast<uint32_t>(c);
  for (char32_t c : {0x1C, 0x1D, 0x1E, 0x1F, 0x180E, 0x200B, 0xFEFF}) {
    EXPECT_FALSE(is_white_space(static_cast<char32_t>(c))) << std::hex << static_cast<uint32_t>(c);
  }
}

std::string nfc_of(const std::string& s) {
  bool changed = false;
  std::string out = nfc(s, changed);
  return changed ? out : s;
}

TEST(Nfc, ComposesAndReorders) {
  EXPECT_EQ(nfc_of("e\xCC\x81"), "\xC3\xA9");                      // e + U+0301 -> é
  EXPECT_EQ(nfc_of("\xE1\x84\x80\xE1\x85\xA1"), "\xEA\xB0\x80");   // Hangul L + V -> 가
  EXPECT_EQ(nfc_of("\xE2\x84\xAB"), "\xC3\x85");                   // Angstrom sign -> Å
  EXPECT_EQ(nfc_of("a\xCC\x87\xCC\xA3"), "\xE1\xBA\xA1\xCC\x87");  // reordered, then composed
  EXPECT_EQ(nfc_of("\xEF\xAC\x81"), "\xEF\xAC\x81");               // ﬁ ligature: NFKC only
  bool changed = true;
  nfc("ASCII stays as is; so do caf\xC3\xA9, \xE4\xB8\xAD\xE6\x96\x87 and \xED\x95\x9C", changed);
  EXPECT_FALSE(changed);
}

// The fast path skips utf8proc for text made only of "inert" code points. Prove that each one
// has combining class 0, is its own NFC form, and is never the second part of a composition.
TEST(Nfc, InertCodePointsNeedNoNormalisation) {
  std::vector<bool> second_part(0x110000, false);
  for (char32_t c = 0; c < 0x110000; ++c) {
    utf8proc_int32_t buf[8];
    int last = 0;
    const utf8proc_ssize_t n = utf8proc_decompose_char(static_cast<utf8proc_int32_t>(c), buf, 8,
                                                       UTF8PROC_DECOMPOSE, &last);
    for (utf8proc_ssize_t k = 1; k < n && k < 8; ++k) second_part[buf[k]] = true;
  }
  for (char32_t c = 0x1161; c <= 0x11C2; ++c) second_part[c] = true;  // Hangul V and T jamo
  size_t inert = 0;
  for (char32_t c = 0; c < 0x110000; ++c) {
    if (!nfc_inert(c) || (c >= 0xD800 && c <= 0xDFFF)) continue;
    ++inert;
    const auto cp = static_cast<uint32_t>(c);
    ASSERT_EQ(utf8proc_get_property(static_cast<utf8proc_int32_t>(c))->combining_class, 0) << cp;
    ASSERT_FALSE(second_part[c]) << cp;
    std::string s;
    append_utf8(s, c);
    utf8proc_uint8_t* out = utf8proc_NFC(reinterpret_cast<const utf8proc_uint8_t*>(s.c_str()));
    if (c != 0) {
      ASSERT_EQ(std::string(reinterpret_cast<char*>(out)), s) << cp;
    }
    std::free(out);
  }
  EXPECT_GT(inert, 30000u);
}

}  // namespace
}  // namespace molt::tok
