// Generated blocks of hand-written pages (README figures): bodies are replaced and nothing else;
// malformed markers are refused naming the page, the line and the block.
#include "molt/bench/generated_block.h"

#include <gtest/gtest.h>

#include "molt/common/error.h"

namespace molt {
namespace {

const std::string kPage =
    "# Title\n"
    "Hand text 1.\n"
    "<!-- generated: tiny-ladder-rungs (molt bench eval-report) -->\n"
    "old body\n"
    "old body 2\n"
    "<!-- end generated: tiny-ladder-rungs -->\n"
    "More hand text.\n"
    "<!-- generated: b -->\n"
    "<!-- end generated: b -->\n"
    "End.";

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(GeneratedBlock, ReadsBodiesByName) {
  const auto blocks = generated_blocks(kPage, "page.md");
  ASSERT_EQ(blocks.size(), 2u);
  EXPECT_EQ(blocks.at("tiny-ladder-rungs"), "old body\nold body 2\n");
  EXPECT_EQ(blocks.at("b"), "");
}

TEST(GeneratedBlock, ReplacesBodiesAndNothingElse) {
  const std::string out =
      fill_generated_blocks(kPage, {{"tiny-ladder-rungs", "new\n"}, {"b", "B 1\nB 2\n"}}, "p");
  EXPECT_EQ(out,
            "# Title\n"
            "Hand text 1.\n"
            "<!-- generated: tiny-ladder-rungs (molt bench eval-report) -->\n"
            "new\n"
            "<!-- end generated: tiny-ladder-rungs -->\n"
            "More hand text.\n"
            "<!-- generated: b -->\n"
            "B 1\nB 2\n"
            "<!-- end generated: b -->\n"
            "End.");
  // Filling what it wrote changes nothing.
  EXPECT_EQ(fill_generated_blocks(out, {{"tiny-ladder-rungs", "new\n"}, {"b", "B 1\nB 2\n"}}, "p"),
            out);
}

TEST(GeneratedBlock, RefusesWhatItCannotFill) {
  EXPECT_NE(error_of([] {
              fill_generated_blocks("no blocks\n", {{"a", ""}}, "x.md");
            }).find("x.md: no generated blocks"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              fill_generated_blocks(kPage, {{"b", ""}}, "x.md");
            }).find("no generator for block 'tiny-ladder-rungs'"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              generated_blocks("<!-- generated: a -->\nx\n", "x.md");
            }).find("x.md:1: generated block 'a' is never closed"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              generated_blocks("<!-- generated: a -->\n<!-- generated: b -->\n", "x.md");
            }).find("x.md:2: generated block 'b' opens inside block 'a'"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              generated_blocks("<!-- generated: a -->\n<!-- end generated: b -->\n", "x.md");
            }).find("x.md:2: end of generated block 'b' where 'a' is open"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              generated_blocks(
                  "<!-- generated: a -->\n<!-- end generated: a -->\n<!-- generated: a -->\n"
                  "<!-- end generated: a -->\n",
                  "x.md");
            }).find("x.md:3: generated block 'a' appears twice"),
            std::string::npos);
}

}  // namespace
}  // namespace molt
