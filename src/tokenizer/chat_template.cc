// A line-by-line transcription of qwen2.5_chat_template.jinja; comments quote its branches.
#include "molt/tokenizer/chat_template.h"

#include <nlohmann/json.hpp>

#include "molt/common/error.h"

namespace molt {
namespace {

using ordered_json = nlohmann::ordered_json;

// Hugging Face's `tojson` filter is json.dumps(x, ensure_ascii=False): ", " and ": "
// separators, keys in their given order, non-ASCII characters written as they are.
void python_json(const ordered_json& j, std::string& out, int depth = 0) {
  // The parser itself is iterative; this recursion is not, so bound it (a tool schema nests a
  // few levels; 100k levels of "[[[[" would exhaust the stack).
  constexpr int kMaxDepth = 512;
  if (depth >= kMaxDepth && (j.is_object() || j.is_array())) {
    fail("chat template: JSON nests deeper than {} levels", kMaxDepth);
  }
  if (j.is_object()) {
    out += '{';
    bool first = true;
    for (const auto& [key, value] : j.items()) {
      if (!first) out += ", ";
      first = false;
      out += ordered_json(key).dump(-1, ' ', false);
      out += ": ";
      python_json(value, out, depth + 1);
    }
    out += '}';
  } else if (j.is_array()) {
    out += '[';
    for (size_t i = 0; i < j.size(); ++i) {
      if (i > 0) out += ", ";
      python_json(j[i], out, depth + 1);
    }
    out += ']';
  } else {
    out += j.dump(-1, ' ', false);
  }
}

std::string tojson(const std::string& text, const std::string& what) {
  ordered_json j;
  try {
    j = ordered_json::parse(text);
  } catch (const nlohmann::json::exception& e) {  // parse_error, or out_of_range for 1e400
    fail("chat template: {} is not valid JSON: {}", what, e.what());
  }
  std::string out;
  python_json(j, out);
  return out;
}

}  // namespace

std::string apply_chat_template(const std::vector<ChatMessage>& messages,
                                bool add_generation_prompt, const std::vector<std::string>& tools) {
  if (messages.empty()) fail("chat template: the conversation has no messages");
  for (size_t i = 0; i < messages.size(); ++i) {
    const std::string& r = messages[i].role;
    if (r != "system" && r != "user" && r != "assistant" && r != "tool") {
      fail("chat template: message {} has role '{}' (expected system, user, assistant or tool)", i,
           r);
    }
  }
  const bool system_first = messages[0].role == "system";
  std::string out;
  if (!tools.empty()) {
    out += "<|im_start|>system\n";
    out += system_first ? messages[0].content : std::string(kQwenDefaultSystemPrompt);
    out +=
        "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
        "You are provided with function signatures within <tools></tools> XML tags:\n<tools>";
    for (size_t i = 0; i < tools.size(); ++i) {
      out += "\n";
      out += tojson(tools[i], "tool " + std::to_string(i));
    }
    out +=
        "\n</tools>\n\nFor each function call, return a json object with function name and "
        "arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": "
        "<function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n";
  } else if (system_first) {
    out += "<|im_start|>system\n" + messages[0].content + "<|im_end|>\n";
  } else {
    out += "<|im_start|>system\n" + std::string(kQwenDefaultSystemPrompt) + "<|im_end|>\n";
  }

  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    const bool first = i == 0, last = i + 1 == messages.size();
    // (user) or (system and not loop.first) or (assistant and not tool_calls)
    if (m.role == "user" || (m.role == "system" && !first) ||
        (m.role == "assistant" && m.tool_calls.empty())) {
      out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
    } else if (m.role == "assistant") {
      out += "<|im_start|>" + m.role;
      if (!m.content.empty()) out += "\n" + m.content;
      for (const ToolCall& call : m.tool_calls) {
        out += "\n<tool_call>\n{\"name\": \"";
        out += call.name;
        out += "\", \"arguments\": ";
        out += tojson(call.arguments, "arguments of tool call '" + call.name + "'");
        out += "}\n</tool_call>";
      }
      out += "<|im_end|>\n";
    } else if (m.role == "tool") {
      if (first || messages[i - 1].role != "tool") out += "<|im_start|>user";
      out += "\n<tool_response>\n" + m.content + "\n</tool_response>";
      if (last || messages[i + 1].role != "tool") out += "<|im_end|>\n";
    }
    // A first system message was written above.
  }
  if (add_generation_prompt) out += "<|im_start|>assistant\n";
  return out;
}

}  // namespace molt
