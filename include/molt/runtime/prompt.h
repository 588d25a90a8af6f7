// Prompt encoding shared by every front end: token ids as given, plain text, or chat messages
// through the ChatML template (whose turns end at <|im_end|>, so that id joins the stop ids).
//
//   molt::Prompt p = molt::encode_chat(*ladder, {{"user", "Why is the sky blue?"}});
//   options.stop_ids.insert(options.stop_ids.end(), p.stop_ids.begin(), p.stop_ids.end());
//   molt::Generation g(*ladder, budget, p.ids, options);
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "molt/ladder/ladder.h"
#include "molt/tokenizer/chat_template.h"

namespace molt {

struct Prompt {
  std::vector<int32_t> ids;
  std::vector<int32_t> stop_ids;  // to add to SessionOptions::stop_ids (chat: <|im_end|>)
};

// `what` names the input in errors (a flag, a request field, a C API argument).
// Ids must be non-empty and inside the ladder's vocabulary.
Prompt prompt_from_ids(const Ladder& ladder, std::vector<int32_t> ids, const char* what = "ids");
// Plain text through the ladder's tokenizer; errors when it is empty or the ladder has none.
Prompt encode_text(const Ladder& ladder, std::string_view text, const char* what = "prompt");
// Chat messages through the ChatML template with the assistant turn opened; errors when there
// are no messages, a role is unknown, or the tokenizer lacks <|im_start|> / <|im_end|>.
Prompt encode_chat(const Ladder& ladder, const std::vector<ChatMessage>& messages,
                   const char* what = "chat");

}  // namespace molt
