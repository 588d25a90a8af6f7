// UTF-8 helpers: strict validation (Unicode Table 3-7), code point iteration, the lossy
// conversion Hugging Face's decoders use (Rust's String::from_utf8_lossy) and the incomplete
// tail a streaming decoder must hold back.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace molt::tok {

// One step over a byte string: a well-formed character, an ill-formed sequence (length = its
// "maximal subpart", at least 1 byte), or a well-formed prefix cut off by the end of the input.
struct Utf8Step {
  enum Kind { kValid, kInvalid, kTruncated } kind;
  size_t length;
};
Utf8Step utf8_step(std::string_view s, size_t i);

// Offset of the first byte that does not start a well-formed character, or npos.
size_t find_invalid_utf8(std::string_view s);

// Decodes the character at s[i] of a well-formed string and advances i past it.
char32_t next_code_point(std::string_view s, size_t& i);
// Decodes the character that ends at s[i] (exclusive) and moves i back to its first byte.
char32_t prev_code_point(std::string_view s, size_t& i);

void append_utf8(std::string& out, char32_t c);

// Replaces each maximal ill-formed subpart by U+FFFD, exactly as Rust's from_utf8_lossy.
std::string utf8_lossy(std::string_view bytes);

// Number of bytes at the end of s that start a character that later bytes could complete.
size_t incomplete_utf8_tail(std::string_view s);

// Unicode White_Space (what Rust's char::is_whitespace and Oniguruma's \s accept).
bool is_white_space(char32_t c);

}  // namespace molt::tok
