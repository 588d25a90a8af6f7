// Finds added tokens (<|im_start|>, <tool_call>, ...) in raw text: the leftmost occurrence, and
// the longest token among those starting there (Hugging Face's leftmost-longest Aho-Corasick).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "molt/tokenizer/tokenizer.h"

namespace molt::tok {

class AddedTokenMatcher {
 public:
  struct Match {
    size_t begin, end;  // the text replaced by the token (wider than it with lstrip / rstrip)
    int32_t id;
  };
  explicit AddedTokenMatcher(const std::vector<AddedToken>& tokens);
  // First match at or after `from`; special tokens are only matched when include_special.
  std::optional<Match> find(std::string_view text, size_t from, bool include_special) const;

 private:
  std::vector<AddedToken> tokens_;
  std::array<std::vector<uint32_t>, 256> by_first_byte_;  // longest first
  int only_first_byte_ = -1;  // when all tokens start with one byte ('<' for Qwen): memchr
};

}  // namespace molt::tok
