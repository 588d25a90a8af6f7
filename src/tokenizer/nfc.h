// NFC normalisation (Hugging Face's "NFC" normalizer) through utf8proc.
#pragma once

#include <string>
#include <string_view>

namespace molt::tok {

// True for code points that are unchanged by NFC whatever surrounds them: canonical combining
// class 0, their own NFC form, and never the second half of a canonical composition. Text made
// only of these is already NFC, which lets ASCII, Latin-1, CJK and Hangul skip utf8proc.
bool nfc_inert(char32_t c);

// Returns the NFC form of well-formed UTF-8. Sets `changed` to false (and returns an empty
// string) when the input is already NFC by the fast check, so callers can keep their view.
std::string nfc(std::string_view text, bool& changed);

}  // namespace molt::tok
