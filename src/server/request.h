// An OpenAI completion request (chat or plain), read and checked field by field. Unknown fields
// are ignored (clients send many); a known field of the wrong type or out of range is refused
// with a 400 naming it (ApiError::param), as OpenAI does.
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

#include "molt/model/sampler.h"
#include "molt/runtime/policy.h"
#include "molt/scheduler/planner.h"
#include "molt/tokenizer/chat_template.h"

namespace molt::server {

struct CompletionRequest {
  bool chat = true;  // /v1/chat/completions (messages) or /v1/completions (prompt)
  std::string model;
  std::vector<ChatMessage> messages;
  std::string prompt;               // completions: text ...
  std::vector<int32_t> prompt_ids;  // ... or token ids
  std::optional<int64_t> max_tokens;
  SamplingParams sampling;  // OpenAI's defaults: temperature 1, top_p 1, a fresh seed
  bool seeded = false;
  std::vector<std::string> stop;  // up to 4 sequences; the answer ends before the first match
  bool stream = false;
  bool include_usage = false;
  bool echo = false;  // completions: the prompt is prepended to the text
  // vLLM's and llama.cpp's extension: run to max_tokens past end-of-sequence and <|im_end|>.
  bool ignore_eos = false;
  sched::Priority priority = sched::Priority::kForeground;
  std::optional<Policy> policy;  // the server's default when absent
};

// A POST body as JSON. Throws ApiError (400, invalid_json) when it is empty or not JSON,
// including a number no double holds (1e400).
nlohmann::json parse_request_body(const std::string& body);

// `chat` selects the endpoint's schema. Throws ApiError (400).
CompletionRequest parse_completion_request(const nlohmann::json& body, bool chat);

}  // namespace molt::server
