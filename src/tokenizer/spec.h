// What a tokenizer file says, read into one plain struct; the loaders fill it and Tokenizer is
// built from it, so every format goes through the same checks and the same fingerprint.
#pragma once

#include <cstdint>
#include <filesystem>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <utility>
#include <vector>

#include "molt/tokenizer/tokenizer.h"

namespace molt::tok {

struct SplitSpec {
  std::string pattern;
  bool literal = false;
};

struct TokenizerSpec {
  std::filesystem::path source;  // the file named in error messages
  std::string format;
  std::vector<std::string> vocab;                   // id -> raw bytes; empty = no token
  std::vector<std::pair<int32_t, int32_t>> merges;  // (left, right) ids in rank order
  std::vector<AddedToken> added;
  bool nfc = true;
  std::vector<SplitSpec> splits;
  bool add_prefix_space = false;
  bool ignore_merges = false;
};

TokenizerSpec load_tokenizer_json(const std::filesystem::path& path);
// vocab_path may be empty: the vocabulary is then rebuilt from the merges (see Tokenizer::load).
TokenizerSpec load_vocab_merges(const std::filesystem::path& vocab_path,
                                const std::filesystem::path& merges_path);
TokenizerSpec load_tiktoken(const std::filesystem::path& path);
// A specials file: {"content": id}, a tokenizer_config.json ("added_tokens_decoder"), a
// tokenizer.json ("added_tokens") or a list of {"id", "content", ...}.
std::vector<AddedToken> load_added_tokens(const std::filesystem::path& path);
std::vector<AddedToken> parse_added_tokens(const nlohmann::json& j, const std::string& where);

// Merges implied by a rank table (tiktoken): for each multi-byte token in rank order, BPE its
// bytes using only lower ranks; when that leaves exactly two parts they are its merge. This is
// how Hugging Face converts tiktoken files, and it reproduces Qwen's merges.txt.
std::vector<std::pair<int32_t, int32_t>> merges_from_ranks(const std::vector<std::string>& vocab);

// Ids index vectors sized to the largest id, so a few bytes claiming id 16,000,000 would cost
// half a GiB of empty slots. Real files number their tokens densely; refuses an id space more
// than about twice what the file holds (`count` tokens) before anything is sized from it.
void check_id_space(const std::string& where, int64_t largest_id, size_t count);

// Reading helpers shared by the loaders; errors name the file.
std::string read_file_bytes(const std::filesystem::path& path);
nlohmann::json parse_json_file(const std::filesystem::path& path);

}  // namespace molt::tok
