// Tokenizer's private state, built once from a TokenizerSpec.
#pragma once

#include <functional>
#include <string>
#include <unordered_map>
#include <vector>

#include "molt/tokenizer/tokenizer.h"
#include "tokenizer/added_tokens.h"
#include "tokenizer/bpe.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/spec.h"

namespace molt {

namespace tok {
struct StringHash {  // lets the map look up string_views without building a string
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
}  // namespace tok

struct Tokenizer::Impl {
  explicit Impl(tok::TokenizerSpec spec);

  std::string fingerprint;  // first: computed from the spec before its vocabulary moves away

  // Encodes text that holds no added tokens (already split out) and is well-formed UTF-8.
  void encode_plain(std::string_view text, std::vector<int32_t>& out) const;
  void encode_valid(std::string_view text, bool parse_special, std::vector<int32_t>& out) const;

  std::filesystem::path source;
  std::string format;
  bool nfc = true;
  bool add_prefix_space = false;
  tok::PreTokenizer pretokenizer;
  tok::Bpe bpe;
  std::vector<AddedToken> added;
  tok::AddedTokenMatcher matcher;
  std::unordered_map<std::string, int32_t, tok::StringHash, std::equal_to<>> added_by_content;
  std::vector<std::string> id_to_bytes;  // base vocabulary overlaid with added tokens
  std::vector<uint8_t> special;          // per id
};

// SHA-256 (hex) of the canonical form of a spec; see Tokenizer::fingerprint().
std::string tokenizer_fingerprint(const tok::TokenizerSpec& spec);

}  // namespace molt
