#include "tokenizer/byte_level.h"

#include "tokenizer/utf8.h"

namespace molt::tok {
namespace {

bool printable(int b) {
  return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
}

struct Tables {
  std::array<char32_t, 256> to_cp{};
  std::array<uint8_t, 256> order{};
  std::array<int16_t, 0x200> from_cp{};  // every alphabet code point is below U+0144

  Tables() {
    from_cp.fill(-1);
    int n = 0, k = 0;
    for (int b = 0; b < 256; ++b) {
      if (printable(b)) order[k++] = static_cast<uint8_t>(b);
    }
    for (int b = 0; b < 256; ++b) {
      to_cp[b] = printable(b) ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + n++);
      if (!printable(b)) order[k++] = static_cast<uint8_t>(b);
      from_cp[to_cp[b]] = static_cast<int16_t>(b);
    }
  }
};

const Tables& tables() {
  static const Tables t;
  return t;
}

}  // namespace

char32_t byte_to_code_point(uint8_t b) {
  return tables().to_cp[b];
}

const std::array<uint8_t, 256>& byte_alphabet_order() {
  return tables().order;
}

std::optional<std::string> byte_level_decode(std::string_view token) {
  if (find_invalid_utf8(token) != std::string_view::npos) return std::nullopt;
  const Tables& t = tables();
  std::string out;
  out.reserve(token.size());
  size_t i = 0;
  while (i < token.size()) {
    const char32_t c = next_code_point(token, i);
    if (c >= t.from_cp.size() || t.from_cp[c] < 0) return std::nullopt;
    out.push_back(static_cast<char>(t.from_cp[c]));
  }
  return out;
}

std::string byte_level_encode(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char b : bytes) append_utf8(out, tables().to_cp[static_cast<uint8_t>(b)]);
  return out;
}

}  // namespace molt::tok
