#include "tokenizer/utf8.h"

#include <cstring>

namespace molt::tok {
namespace {

// Expected length of a sequence from its lead byte; 0 for bytes that never lead.
int sequence_length(uint8_t lead) {
  if (lead < 0x80) return 1;
  if (lead >= 0xC2 && lead <= 0xDF) return 2;
  if (lead >= 0xE0 && lead <= 0xEF) return 3;
  if (lead >= 0xF0 && lead <= 0xF4) return 4;
  return 0;
}

// The second byte's range depends on the lead (no overlongs, surrogates or > U+10FFFF).
bool second_byte_ok(uint8_t lead, uint8_t b) {
  switch (lead) {
    case 0xE0:
      return b >= 0xA0 && b <= 0xBF;
    case 0xED:
      return b >= 0x80 && b <= 0x9F;
    case 0xF0:
      return b >= 0x90 && b <= 0xBF;
    case 0xF4:
      return b >= 0x80 && b <= 0x8F;
    default:
      return b >= 0x80 && b <= 0xBF;
  }
}

}  // namespace

Utf8Step utf8_step(std::string_view s, size_t i) {
  const auto* p = reinterpret_cast<const uint8_t*>(s.data()) + i;
  const size_t avail = s.size() - i;
  const int need = sequence_length(p[0]);
  if (need == 0) return {Utf8Step::kInvalid, 1};
  if (need == 1) return {Utf8Step::kValid, 1};
  for (int k = 1; k < need; ++k) {
    if (static_cast<size_t>(k) >= avail) return {Utf8Step::kTruncated, avail};
    const bool ok = k == 1 ? second_byte_ok(p[0], p[1]) : (p[k] & 0xC0) == 0x80;
    if (!ok) return {Utf8Step::kInvalid, static_cast<size_t>(k)};
  }
  return {Utf8Step::kValid, static_cast<size_t>(need)};
}

size_t find_invalid_utf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    // ASCII fast path, eight bytes at a time.
    while (i + 8 <= s.size()) {
      uint64_t w;
      std::memcpy(&w, s.data() + i, 8);
      if (w & 0x8080808080808080ull) break;
      i += 8;
    }
    if (i >= s.size()) break;
    if (static_cast<uint8_t>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    const Utf8Step st = utf8_step(s, i);
    if (st.kind != Utf8Step::kValid) return i;
    i += st.length;
  }
  return std::string_view::npos;
}

char32_t next_code_point(std::string_view s, size_t& i) {
  const auto* p = reinterpret_cast<const uint8_t*>(s.data()) + i;
  if (p[0] < 0x80) {
    i += 1;
    return p[0];
  }
  if (p[0] < 0xE0) {
    i += 2;
    return ((p[0] & 0x1Fu) << 6) | (p[1] & 0x3Fu);
  }
  if (p[0] < 0xF0) {
    i += 3;
    return ((p[0] & 0x0Fu) << 12) | ((p[1] & 0x3Fu) << 6) | (p[2] & 0x3Fu);
  }
  i += 4;
  return ((p[0] & 0x07u) << 18) | ((p[1] & 0x3Fu) << 12) | ((p[2] & 0x3Fu) << 6) | (p[3] & 0x3Fu);
}

char32_t prev_code_point(std::string_view s, size_t& i) {
  size_t start = i - 1;
  while (start > 0 && (static_cast<uint8_t>(s[start]) & 0xC0) == 0x80) --start;
  size_t j = start;
  const char32_t c = next_code_point(s, j);
  i = start;
  return c;
}

void append_utf8(std::string& out, char32_t c) {
  if (c < 0x80) {
    out.push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (c >> 6)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (c >> 12)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (c >> 18)));
    out.push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
}

std::string utf8_lossy(std::string_view bytes) {
  if (find_invalid_utf8(bytes) == std::string_view::npos) return std::string(bytes);
  std::string out;
  out.reserve(bytes.size() + 8);
  size_t i = 0;
  while (i < bytes.size()) {
    const Utf8Step st = utf8_step(bytes, i);
    if (st.kind == Utf8Step::kValid) {
      out.append(bytes.substr(i, st.length));
    } else {
      out.append("\xEF\xBF\xBD");  // U+FFFD
    }
    i += st.length;
  }
  return out;
}

size_t incomplete_utf8_tail(std::string_view s) {
  // A character is at most 4 bytes, so only the last 3 bytes can start an unfinished one.
  const size_t from = s.size() > 3 ? s.size() - 3 : 0;
  for (size_t i = from; i < s.size(); ++i) {
    const uint8_t b = static_cast<uint8_t>(s[i]);
    if ((b & 0xC0) == 0x80) continue;  // continuation bytes never start a character
    const Utf8Step st = utf8_step(s, i);
    if (st.kind == Utf8Step::kTruncated) return s.size() - i;
  }
  return 0;
}

bool is_white_space(char32_t c) {
  if (c <= 0x20) return c == 0x20 || (c >= 0x09 && c <= 0x0D);
  if (c < 0x85) return false;
  return c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 ||
         c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

}  // namespace molt::tok
