// GPT-2's byte-level alphabet. Vocabulary and merges files write each byte of a token as a
// printable code point (space is "Ġ", newline "Ċ"); molt keeps tokens as raw bytes internally.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace molt::tok {

// The code point that stands for byte b: printable bytes ('!'..'~', '¡'..'¬', '®'..'ÿ') are
// themselves; the other 68 bytes map to U+0100 + n in increasing byte order.
char32_t byte_to_code_point(uint8_t b);

// The 256 bytes in alphabet order (printable ones first, then the remapped ones). A byte-level
// BPE vocabulary gives its single-byte tokens ids in this order; so does qwen.tiktoken.
const std::array<uint8_t, 256>& byte_alphabet_order();

// "Ġhello" -> " hello"; nullopt when a character is outside the alphabet (or not UTF-8).
std::optional<std::string> byte_level_decode(std::string_view token);
// " hello" -> "Ġhello".
std::string byte_level_encode(std::string_view bytes);

}  // namespace molt::tok
