// Shared by the tokenizer tests: the Qwen2.5 tokenizer loaded once per format, and the 46
// llama.cpp test vectors.
#pragma once

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "molt/tokenizer/tokenizer.h"
#include "test_util.h"

namespace molt::test {

// Loaded on first use and kept for the whole test binary (each load takes a fraction of a second).
inline const Tokenizer& qwen_tiktoken(const std::filesystem::path& dir) {
  static std::unique_ptr<Tokenizer> tok =
      Tokenizer::load(dir / "qwen.tiktoken", dir / "qwen2.5_specials.json");
  return *tok;
}
inline const Tokenizer& qwen_merges(const std::filesystem::path& dir) {
  static std::unique_ptr<Tokenizer> tok =
      Tokenizer::load(dir / "merges.txt", dir / "qwen2.5_specials.json");
  return *tok;
}

struct VocabVector {
  std::string input;
  std::vector<int32_t> ids;
};

// ggml-vocab-qwen2.gguf.inp / .out: inputs separated by "\n__ggml_vocab_test__\n" (the final
// empty piece dropped); one output line per input, each id preceded by a space.
inline std::vector<VocabVector> read_vocab_vectors(const std::filesystem::path& dir) {
  const std::string inp = read_file(dir / "ggml-vocab-qwen2.gguf.inp");
  const std::string out = read_file(dir / "ggml-vocab-qwen2.gguf.out");
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<VocabVector> v;
  size_t pos = 0;
  while (pos < inp.size()) {
    size_t end = inp.find(sep, pos);
    if (end == std::string::npos) end = inp.size();
    v.push_back({inp.substr(pos, end - pos), {}});
    pos = end + sep.size();
  }
  size_t line_start = 0;
  for (VocabVector& x : v) {
    const size_t eol = out.find('\n', line_start);
    std::istringstream line(out.substr(line_start, eol - line_start));
    int32_t id;
    while (line >> id) x.ids.push_back(id);
    line_start = eol + 1;
  }
  return v;
}

}  // namespace molt::test
