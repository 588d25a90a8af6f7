// Fuzzes the chat template's input (src/tokenizer/chat_template.cc): the input is a JSON
// conversation the way front ends receive one,
//   {"messages": [{"role", "content", "tool_calls": [{"name", "arguments"}]}], "tools": [...],
//    "add_generation_prompt": true}
// (or just the messages array). Tool schemas and call arguments are JSON text the template
// re-serialises itself. The rendered prompt is then encoded with the tiny ladder's tokenizer.
#include <nlohmann/json.hpp>

#include "molt/tokenizer/chat_template.h"
#include "tokenizer_exercise.h"

namespace {

using nlohmann::json;

std::string text_of(const json& j, const char* key) {
  if (!j.is_object() || !j.contains(key)) return "";
  const json& v = j[key];
  return v.is_string() ? v.get<std::string>() : v.dump();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::unique_ptr<molt::Tokenizer> tok =
      molt::Tokenizer::load(MOLT_SOURCE_DIR "/models/tiny-ladder/s/tokenizer.json");
  // Reading the conversation is the harness's job (the template takes structs), so a
  // malformed outer document is simply skipped.
  const json in = json::parse(data, data + size, nullptr, /*allow_exceptions=*/false);
  if (in.is_discarded()) return 0;
  const json& msgs = in.is_object() && in.contains("messages") ? in["messages"] : in;
  if (!msgs.is_array()) return 0;
  std::vector<molt::ChatMessage> messages;
  for (const json& m : msgs) {
    molt::ChatMessage cm{text_of(m, "role"), text_of(m, "content")};
    if (m.is_object() && m.contains("tool_calls") && m["tool_calls"].is_array()) {
      for (const json& c : m["tool_calls"]) {
        const json& fn = c.is_object() && c.contains("function") ? c["function"] : c;
        cm.tool_calls.push_back({text_of(fn, "name"), text_of(fn, "arguments")});
      }
    }
    messages.push_back(std::move(cm));
  }
  std::vector<std::string> tools;
  if (in.is_object() && in.contains("tools") && in["tools"].is_array()) {
    for (const json& t : in["tools"])
      tools.push_back(t.is_string() ? t.get<std::string>() : t.dump());
  }
  const bool add = in.is_object() && in.value("add_generation_prompt", json(true)) == json(true);
  return molt::fuzz::guarded([&] {
    const std::string prompt = molt::apply_chat_template(messages, add, tools);
    MOLT_FUZZ_CHECK(prompt.starts_with("<|im_start|>system\n"), "prompt starts with '%.40s'",
                    prompt.c_str());
    const std::vector<int32_t> ids = tok->encode(prompt);
    bool ascii = true;
    for (char c : prompt) ascii = ascii && static_cast<unsigned char>(c) < 0x80;
    // Byte-level BPE loses nothing; NFC only changes non-ASCII text.
    if (ascii) MOLT_FUZZ_CHECK(tok->decode(ids) == prompt, "encode/decode changed the prompt");
  });
}
