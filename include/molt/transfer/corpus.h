// Calibration / evaluation text as a stream of fixed-length token windows. The file is read in
// blocks, so memory does not depend on its length.
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

namespace molt {

class Tokenizer;

class TokenStream {
 public:
  // Text, tokenized with `tokenizer` in blocks of about 1 MiB cut at the start of a line (the
  // Qwen2 pre-tokenizer never joins a newline to the letters after it, so the cut does not
  // change the ids).
  static std::unique_ptr<TokenStream> text(const std::filesystem::path& path,
                                           const Tokenizer& tokenizer,
                                           size_t block_bytes = size_t{1} << 20);
  // Whitespace- or comma-separated token ids (synthetic models without a tokenizer).
  static std::unique_ptr<TokenStream> ids(const std::filesystem::path& path,
                                          size_t block_bytes = size_t{1} << 20);

  // Fills `out` with the next `len` ids; false (and `out` untouched) when fewer remain.
  bool next_window(int64_t len, std::vector<int32_t>& out);
  // Skips a window (another shard's) without keeping it.
  bool skip_window(int64_t len);
  const std::filesystem::path& path() const { return path_; }

 private:
  TokenStream() = default;
  bool fill(size_t want);
  std::filesystem::path path_;
  std::ifstream file_;
  const Tokenizer* tokenizer_ = nullptr;  // null: the file holds ids
  std::vector<int32_t> buf_;
  size_t pos_ = 0;
  std::string carry_;   // text after the last cut, or a partial number
  int64_t offset_ = 0;  // bytes consumed, for error messages
  size_t block_ = 0;
};

}  // namespace molt
