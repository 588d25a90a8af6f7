// The Qwen2.5 chat template: expected strings written out by hand from
// qwen2.5_chat_template.jinja, branch by branch.
#include "molt/tokenizer/chat_template.h"

#include <gtest/gtest.h>

#include "molt/common/error.h"
#include "qwen_vocab.h"

namespace molt {
namespace {

const std::string kDefaultSystem =
    "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful "
    "assistant.<|im_end|>\n";

TEST(ChatTemplate, DefaultSystemPromptAndGenerationPrompt) {
  EXPECT_EQ(apply_chat_template({{"user", "Hi", {}}}, true),
            kDefaultSystem + "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(apply_chat_template({{"user", "Hi", {}}}, false),
            kDefaultSystem + "<|im_start|>user\nHi<|im_end|>\n");
}

TEST(ChatTemplate, FirstSystemMessageReplacesTheDefault) {
  const std::vector<ChatMessage> conv = {{"system", "Be brief.", {}},
                                         {"user", "Hello", {}},
                                         {"assistant", "Hi there.", {}},
                                         {"user", "Bye", {}}};
  EXPECT_EQ(apply_chat_template(conv, false),
            "<|im_start|>system\nBe brief.<|im_end|>\n"
            "<|im_start|>user\nHello<|im_end|>\n"
            "<|im_start|>assistant\nHi there.<|im_end|>\n"
            "<|im_start|>user\nBye<|im_end|>\n");
}

TEST(ChatTemplate, LaterSystemMessagesAndEmptyContent) {
  const std::vector<ChatMessage> conv = {
      {"user", "a", {}}, {"system", "late", {}}, {"assistant", "", {}}, {"user", "", {}}};
  EXPECT_EQ(apply_chat_template(conv, true), kDefaultSystem +
                                                 "<|im_start|>user\na<|im_end|>\n"
                                                 "<|im_start|>system\nlate<|im_end|>\n"
                                                 "<|im_start|>assistant\n<|im_end|>\n"
                                                 "<|im_start|>user\n<|im_end|>\n"
                                                 "<|im_start|>assistant\n");
}

TEST(ChatTemplate, ToolsToolCallsAndGroupedToolResponses) {
  const std::string tool =
      R"({"type":"function","function":{"name":"get_weather","description":"Wetter für eine Stadt",)"
      R"("parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}})";
  ChatMessage call{
      "assistant",
      "",
      {{"get_weather", R"({"city":"Paris"})"}, {"get_weather", R"({"city": "Köln"})"}}};
  const std::vector<ChatMessage> conv = {{"user", "Weather in Paris and Köln?", {}},
                                         call,
                                         {"tool", "18°C", {}},
                                         {"tool", "15°C", {}},
                                         {"assistant", "Paris 18°C, Köln 15°C.", {}}};
  EXPECT_EQ(
      apply_chat_template(conv, false, {tool}),
      "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant."
      "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
      "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
      R"({"type": "function", "function": {"name": "get_weather", "description": "Wetter für eine Stadt", )"
      R"("parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}})"
      "\n</tools>\n\nFor each function call, return a json object with function name and arguments "
      "within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, "
      "\"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n"
      "<|im_start|>user\nWeather in Paris and Köln?<|im_end|>\n"
      "<|im_start|>assistant"
      "\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
      "\"Paris\"}}\n</tool_call>"
      "\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
      "\"Köln\"}}\n</tool_call>"
      "<|im_end|>\n"
      "<|im_start|>user\n<tool_response>\n18°C\n</tool_response>"
      "\n<tool_response>\n15°C\n</tool_response><|im_end|>\n"
      "<|im_start|>assistant\nParis 18°C, Köln 15°C.<|im_end|>\n");
}

TEST(ChatTemplate, SystemMessageWithToolsAndContentBeforeCalls) {
  const std::vector<ChatMessage> conv = {
      {"system", "Sys.", {}},
      {"user", "q", {}},
      {"assistant", "Let me check.", {{"f", R"({"s": "a\nb", "n": [1, 2.5, true, null]})"}}},
      {"tool", "ok", {}}};
  EXPECT_EQ(apply_chat_template(conv, true, {R"({"name":"f"})"}),
            "<|im_start|>system\nSys.\n\n# Tools\n\nYou may call one or more functions to assist "
            "with the user query.\n\nYou are provided with function signatures within "
            "<tools></tools> XML tags:\n<tools>\n{\"name\": \"f\"}\n</tools>\n\nFor each function "
            "call, return a json object with function name and arguments within "
            "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, "
            "\"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n"
            "<|im_start|>user\nq<|im_end|>\n"
            "<|im_start|>assistant\nLet me check.\n<tool_call>\n{\"name\": \"f\", \"arguments\": "
            "{\"s\": \"a\\nb\", \"n\": [1, 2.5, true, null]}}\n</tool_call><|im_end|>\n"
            "<|im_start|>user\n<tool_response>\nok\n</tool_response><|im_end|>\n"
            "<|im_start|>assistant\n");
}

TEST(ChatTemplate, StringArgumentsAreQuotedLikeTojson) {
  const std::vector<ChatMessage> conv = {{"assistant", "", {{"f", R"("{\"a\": 1}")"}}}};
  EXPECT_EQ(apply_chat_template(conv, false),
            kDefaultSystem +
                "<|im_start|>assistant\n<tool_call>\n{\"name\": \"f\", \"arguments\": "
                "\"{\\\"a\\\": 1}\"}\n</tool_call><|im_end|>\n");
}

TEST(ChatTemplate, RejectsWhatTheTemplateCannotRender) {
  EXPECT_THROW(apply_chat_template({}, true), Error);
  try {
    apply_chat_template({{"developer", "x", {}}}, true);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("role 'developer'"), std::string::npos);
  }
  EXPECT_THROW(apply_chat_template({{"assistant", "", {{"f", "{not json"}}}}, false), Error);
  EXPECT_THROW(apply_chat_template({{"user", "x", {}}}, false, {"[1,"}), Error);
}

TEST(ChatTemplate, EncodesToChatMlTokens) {
  MOLT_REQUIRE_SHARED(dir);
  const Tokenizer& tok = test::qwen_tiktoken(dir);
  const std::vector<int32_t> ids = tok.encode(apply_chat_template({{"user", "Hi", {}}}, true));
  const int32_t start = 151644, end = 151645;
  ASSERT_GE(ids.size(), 10u);
  EXPECT_EQ(ids[0], start);
  EXPECT_EQ(ids[1], tok.token_id("system"));
  EXPECT_EQ(ids[2], 198);
  const std::vector<int32_t> tail = {
      end, 198, start, tok.token_id("user"),      198, tok.token_id("Hi"),
      end, 198, start, tok.token_id("assistant"), 198};
  ASSERT_EQ(std::vector<int32_t>(ids.end() - 11, ids.end()), tail);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), start), 3);
}

}  // namespace
}  // namespace molt
