// Corpus streams: windows read in small blocks equal the ids of the whole file, for id files
// and for text tokenized block by block (cut at line starts).
#include "molt/transfer/corpus.h"

#include <gtest/gtest.h>

#include <fstream>

#include "molt/common/error.h"
#include "molt/tokenizer/tokenizer.h"
#include "route_fixture.h"

namespace molt {
namespace {

std::vector<int32_t> all_windows(TokenStream& s, int64_t len) {
  std::vector<int32_t> all, w;
  while (s.next_window(len, w)) all.insert(all.end(), w.begin(), w.end());
  return all;
}

TEST(Corpus, IdWindowsAcrossBlockBoundaries) {
  test::TempDir d;
  const std::vector<int32_t> ids = test::random_ids(5000, 100000, 3);
  {
    std::ofstream f(d / "ids.txt");
    for (size_t i = 0; i < ids.size(); ++i) f << ids[i] << (i % 7 == 0 ? ",\n" : "  ");
  }
  auto s = TokenStream::ids(d / "ids.txt", 64);  // numbers split across 64-byte blocks
  const std::vector<int32_t> got = all_windows(*s, 100);
  ASSERT_EQ(got.size(), 5000u);
  EXPECT_EQ(got, ids);
  // skip_window drops exactly one window.
  auto t = TokenStream::ids(d / "ids.txt", 64);
  std::vector<int32_t> w;
  ASSERT_TRUE(t->skip_window(10));
  ASSERT_TRUE(t->next_window(3, w));
  EXPECT_EQ(w, std::vector<int32_t>(ids.begin() + 10, ids.begin() + 13));
}

TEST(Corpus, BadIdsAreNamed) {
  test::TempDir d;
  test::write_file(d / "ids.txt", "1 2 3 x7 4");
  auto s = TokenStream::ids(d / "ids.txt");
  std::vector<int32_t> w;
  try {
    s->next_window(2, w);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'x7' at byte 6 is not a token id"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(TokenStream::ids(d / "absent.txt"), Error);
}

TEST(Corpus, TextTokenizedInBlocksEqualsTheWholeText) {
  MOLT_REQUIRE_SHARED(dir);
  auto tok = Tokenizer::load(dir / "qwen.tiktoken");
  std::string text;
  const char* lines[] = {"The access code for the north gate is 7305.",
                         "  indented line with  spaces",
                         "",
                         "Übergrößenträger naïve café — 東京 2024!",
                         "\tTabbed: x = y + 1;",
                         "What is the access code?\n\n\nThree blank lines above."};
  for (int i = 0; i < 60; ++i) text += std::string(lines[i % 6]) + (i % 5 == 0 ? "\r\n" : "\n");
  test::TempDir d;
  test::write_file(d / "c.txt", text);
  const std::vector<int32_t> whole = tok->encode(text, true, InvalidUtf8::kByteFallback);
  for (size_t block : {size_t{50}, size_t{333}, size_t{1} << 20}) {
    auto s = TokenStream::text(d / "c.txt", *tok, block);
    const std::vector<int32_t> got = all_windows(*s, 17);
    ASSERT_EQ(got.size(), whole.size() / 17 * 17) << block;
    EXPECT_TRUE(std::equal(got.begin(), got.end(), whole.begin())) << "block " << block;
  }
}

}  // namespace
}  // namespace molt
