// Planted-fact questions ("needles", DESIGN.md §6) generated from held-out prose: one fact at a
// uniform depth of about N tokens of filler, asked at the end, plain or in ChatML. The
// templates, entities and answer kinds are the ones the tiny ladder was trained on
// (tools/tiny-ladder/episodes.py), so a model that copies specifics can answer them.
// A seed fixes the set on every platform (own integer RNG, no std distributions).
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace molt {

class Tokenizer;

struct NeedleItem {
  std::string prompt;  // ends right before the answer
  std::string answer;  // with its leading space in plain prompts
  double depth = 0;    // where the fact sits in the filler, 0..1
  bool chat = false;
};

struct NeedleOptions {
  int64_t context = 700;  // prompt length in tokens, about
  int64_t count = 30;
  uint64_t seed = 1;
  int64_t chat_every = 4;  // every n-th needle is a ChatML turn (0: none)
};

// `filler` is prose with paragraphs separated by blank lines (at least a few KB). Throws
// molt::Error when it has too little text for the context asked.
std::vector<NeedleItem> make_needles(const Tokenizer& tok, std::string_view filler,
                                     const NeedleOptions& opt);

// Needles from JSON lines {prompt, answer, context, depth?}: the first `count` whose "context"
// equals `context`. Errors name the file and line, or say that none matched.
std::vector<NeedleItem> read_needles(const std::filesystem::path& file, int64_t context,
                                     int64_t count);
// A whole text file (filler prose); errors name the file.
std::string read_text_file(const std::filesystem::path& file);

// Exact match after trimming surrounding whitespace (how needle accuracy is scored).
bool needle_answer_matches(std::string_view got, std::string_view expected);

}  // namespace molt
