// What the tokenizer harnesses do with a tokenizer that loaded: encode and decode a few fixed
// texts, so that a vocabulary the loader accepted but cannot serve is found too.
#pragma once

#include <string>
#include <vector>

#include "fuzz_util.h"
#include "molt/tokenizer/tokenizer.h"

namespace molt::fuzz {

inline void exercise(const Tokenizer& tok) {
  (void)tok.fingerprint();
  static const char* const kTexts[] = {"Hello world",
                                       "<|im_start|>user\nHi<|im_end|>\n",
                                       "  x = 12345;\n\n\tcafe\xcc\x81 \xe4\xb8\xad",
                                       "a",
                                       "\xf0\x9f\x98\x80!!",
                                       ""};
  for (const char* text : kTexts) {
    guarded([&] {
      const std::vector<int32_t> ids = tok.encode(text);
      const std::string back = tok.decode_bytes(ids);
      (void)tok.decode(ids, /*skip_special=*/true);
      StreamDecoder stream(tok);
      std::string streamed;
      for (int32_t id : ids) streamed += stream.push(id);
      streamed += stream.flush();
      MOLT_FUZZ_CHECK(streamed == tok.decode(ids), "stream decode differs for '%s'", text);
      (void)back;
    });
  }
  guarded([&] {
    (void)tok.encode(
        "ab\xff\xfe"
        "cd",
        true, InvalidUtf8::kByteFallback);
  });
  for (const AddedToken& a : tok.added_tokens()) {
    MOLT_FUZZ_CHECK(tok.token_id(a.content) >= 0, "added token '%s' has no id", a.content.c_str());
    MOLT_FUZZ_CHECK(a.id < tok.vocab_size(), "added token id %d past vocab_size", a.id);
  }
  const int64_t n = tok.vocab_size();
  for (int64_t id = 0; id < n && id < 300; ++id) {
    guarded([&] { (void)tok.token_bytes(static_cast<int32_t>(id)); });
  }
}

}  // namespace molt::fuzz
