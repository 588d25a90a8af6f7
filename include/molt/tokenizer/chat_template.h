// Qwen2.5's chat template (ChatML), written out in C++. For every input below the output is
// byte-identical to rendering the Jinja template shipped in Qwen2.5 Instruct's
// tokenizer_config.json (shared/data/qwen2.5/qwen2.5_chat_template.jinja) with Hugging Face's
// apply_chat_template(messages, tools=tools, add_generation_prompt=...).
//
//   apply_chat_template({{"user", "Hi"}}, true) ==
//     "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant."
//     "<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
//
// Encode the result with Tokenizer::encode(text) (parse_special = true) so that <|im_start|>
// and <|im_end|> become single tokens; generation stops at <|im_end|>.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace molt {

// A tool call made by the assistant. `arguments` is JSON text (normally an object); it is
// re-serialised the way the template's `tojson` filter writes it.
struct ToolCall {
  std::string name;
  std::string arguments = "{}";
};

struct ChatMessage {
  std::string role;  // "system", "user", "assistant" or "tool"
  std::string content;
  std::vector<ToolCall> tool_calls = {};  // assistant messages only
};

inline constexpr std::string_view kQwenDefaultSystemPrompt =
    "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.";

// `tools`: JSON text of each tool's schema (as passed to apply_chat_template(tools=...));
// when non-empty the system turn lists them in the template's "# Tools" section.
// A first "system" message replaces the default system prompt; later system messages are
// rendered in place. Throws molt::Error for an empty conversation, an unknown role (the Jinja
// template would silently drop it) or tool JSON that does not parse.
std::string apply_chat_template(const std::vector<ChatMessage>& messages,
                                bool add_generation_prompt,
                                const std::vector<std::string>& tools = {});

}  // namespace molt
