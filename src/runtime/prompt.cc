// Prompt encoding: the ladder's one tokenizer, the chat template and its stop id.
#include "molt/runtime/prompt.h"

#include "molt/common/error.h"

namespace molt {
namespace {

const Tokenizer& tokenizer(const Ladder& ladder, const char* what) {
  const Tokenizer* tok = ladder.tokenizer();
  if (tok == nullptr) {
    fail("{}: ladder {} has no tokenizer files ({}); give token ids instead", what,
         ladder.manifest().file.string(), ladder.tokenizer_note());
  }
  return *tok;
}

}  // namespace

Prompt prompt_from_ids(const Ladder& ladder, std::vector<int32_t> ids, const char* what) {
  if (ids.empty()) fail("{}: no token ids", what);
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= ladder.vocab_size()) {
      fail("{}: id {} at position {} is outside the ladder's vocabulary (0..{})", what, ids[i], i,
           ladder.vocab_size() - 1);
    }
  }
  return {std::move(ids), {}};
}

Prompt encode_text(const Ladder& ladder, std::string_view text, const char* what) {
  if (text.empty()) fail("{}: the prompt is empty", what);
  Prompt p{tokenizer(ladder, what).encode(text), {}};
  if (p.ids.empty()) fail("{}: the prompt encodes to no tokens", what);
  return p;
}

Prompt encode_chat(const Ladder& ladder, const std::vector<ChatMessage>& messages,
                   const char* what) {
  if (messages.empty()) fail("{}: no messages", what);
  const Tokenizer& tok = tokenizer(ladder, what);
  const int32_t im_end = tok.token_id("<|im_end|>");
  if (im_end < 0 || tok.token_id("<|im_start|>") < 0) {
    fail("{}: the ladder's tokenizer has no <|im_start|> / <|im_end|> tokens", what);
  }
  std::string text;
  try {
    text = apply_chat_template(messages, /*add_generation_prompt=*/true);
  } catch (const Error& e) {
    fail("{}: {}", what, e.what());
  }
  return {tok.encode(text), {im_end}};
}

}  // namespace molt
