#include "tokenizer/nfc.h"

#include <utf8proc.h>

#include <cstdlib>
#include <memory>

#include "molt/common/error.h"
#include "tokenizer/utf8.h"

namespace molt::tok {

bool nfc_inert(char32_t c) {
  // Combining marks start at U+0300; CJK unified ideographs and precomposed Hangul syllables
  // neither decompose under NFC nor combine with what precedes them (a test checks every one).
  return c < 0x300 || (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0xAC00 && c <= 0xD7A3);
}

std::string nfc(std::string_view text, bool& changed) {
  bool inert = true;
  for (size_t i = 0; i < text.size() && inert;) {
    if (static_cast<uint8_t>(text[i]) < 0x80) {
      ++i;
    } else {
      inert = nfc_inert(next_code_point(text, i));
    }
  }
  if (inert) {
    changed = false;
    return {};
  }
  utf8proc_uint8_t* out = nullptr;
  const utf8proc_ssize_t n =
      utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                   static_cast<utf8proc_ssize_t>(text.size()), &out,
                   static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
  std::unique_ptr<utf8proc_uint8_t, decltype(&std::free)> owned(out, &std::free);
  if (n < 0) fail("NFC normalisation failed: {}", utf8proc_errmsg(n));
  changed = true;
  return std::string(reinterpret_cast<const char*>(out), static_cast<size_t>(n));
}

}  // namespace molt::tok
