#include "tokenizer/added_tokens.h"

#include <algorithm>
#include <cstring>

#include "tokenizer/utf8.h"

namespace molt::tok {

AddedTokenMatcher::AddedTokenMatcher(const std::vector<AddedToken>& tokens) : tokens_(tokens) {
  for (uint32_t i = 0; i < tokens_.size(); ++i) {
    if (tokens_[i].content.empty()) continue;
    by_first_byte_[static_cast<uint8_t>(tokens_[i].content[0])].push_back(i);
  }
  int distinct = 0;
  for (int b = 0; b < 256; ++b) {
    if (!by_first_byte_[b].empty()) {
      ++distinct;
      only_first_byte_ = b;
    }
  }
  if (distinct != 1) only_first_byte_ = -1;
  for (auto& list : by_first_byte_) {
    // Longest first, ties in list order (a total order, so std::sort is stable here; GCC 12's
    // std::stable_sort returns its buffer with free(), which ASan reports as a mismatch).
    std::sort(list.begin(), list.end(), [&](uint32_t a, uint32_t b) {
      const size_t la = tokens_[a].content.size(), lb = tokens_[b].content.size();
      return la != lb ? la > lb : a < b;
    });
  }
}

std::optional<AddedTokenMatcher::Match> AddedTokenMatcher::find(std::string_view text, size_t from,
                                                                bool include_special) const {
  if (tokens_.empty()) return std::nullopt;
  for (size_t i = from; i < text.size(); ++i) {
    if (only_first_byte_ >= 0) {
      const void* p = std::memchr(text.data() + i, only_first_byte_, text.size() - i);
      if (p == nullptr) break;
      i = static_cast<size_t>(static_cast<const char*>(p) - text.data());
    }
    const auto& candidates = by_first_byte_[static_cast<uint8_t>(text[i])];
    for (uint32_t c : candidates) {
      const AddedToken& t = tokens_[c];
      if (t.special && !include_special) continue;
      if (text.compare(i, t.content.size(), t.content) != 0) continue;
      Match m{i, i + t.content.size(), t.id};
      // Text is well-formed UTF-8 here, so walking whole characters is safe.
      while (t.lstrip && m.begin > from) {
        size_t k = m.begin;
        if (!is_white_space(prev_code_point(text, k))) break;
        m.begin = k;
      }
      while (t.rstrip && m.end < text.size()) {
        size_t k = m.end;
        if (!is_white_space(next_code_point(text, k))) break;
        m.end = k;
      }
      return m;
    }
  }
  return std::nullopt;
}

}  // namespace molt::tok
