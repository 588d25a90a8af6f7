// The request reader and the stop-sequence matcher, without a server.
#include "server/request.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "server/api_error.h"
#include "server/stop_text.h"

namespace molt::server {
namespace {

using nlohmann::json;

TEST(Request, OpenAIDefaultsAndFields) {
  const json body = {
      {"messages",
       {{{"role", "developer"}, {"content", "be brief"}},
        {{"role", "user"},
         {"content", {{{"type", "text"}, {"text", "a"}}, {{"type", "text"}, {"text", "b"}}}}}}},
      {"max_completion_tokens", 9},
      {"seed", 7},
      {"stop", "END"},
      {"stream", true},
      {"stream_options", {{"include_usage", true}}},
      {"ignore_eos", true},
      {"molt", {{"priority", "background"}, {"policy", "heal"}}}};
  const CompletionRequest r = parse_completion_request(body, true);
  ASSERT_EQ(r.messages.size(), 2u);
  EXPECT_EQ(r.messages[0].role, "system");
  EXPECT_EQ(r.messages[1].content, "ab");
  EXPECT_EQ(r.max_tokens, 9);
  EXPECT_EQ(r.sampling.temperature, 1.0f);  // OpenAI's default
  EXPECT_EQ(r.sampling.seed, 7u);
  EXPECT_EQ(r.stop, std::vector<std::string>{"END"});
  EXPECT_TRUE(r.stream && r.include_usage);
  EXPECT_TRUE(r.ignore_eos);
  EXPECT_FALSE(parse_completion_request({{"prompt", "x"}}, false).ignore_eos);
  EXPECT_EQ(r.priority, sched::Priority::kBackground);
  EXPECT_EQ(r.policy, Policy::kHeal);
}

TEST(Request, NullMeansNotGiven) {
  const json body = {{"messages", {{{"role", "user"}, {"content", "x"}}}},
                     {"max_tokens", nullptr},
                     {"temperature", nullptr},
                     {"stop", nullptr}};
  const CompletionRequest r = parse_completion_request(body, true);
  EXPECT_FALSE(r.max_tokens);
  EXPECT_TRUE(r.stop.empty());
}

TEST(Request, WrongTypesNameTheField) {
  try {
    parse_completion_request({{"prompt", "x"}, {"echo", 3}}, false);
    FAIL();
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status, 400);
    EXPECT_EQ(e.param, "echo");
  }
  try {
    parse_completion_request({{"prompt", "x"}, {"ignore_eos", "yes"}}, false);
    FAIL();
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status, 400);
    EXPECT_EQ(e.param, "ignore_eos");
  }
}

std::string run(StopText& s, const std::vector<std::string>& pieces) {
  std::string out;
  for (const std::string& p : pieces) out += s.feed(p);
  return out + s.flush();
}

TEST(StopText, HoldsBackOnlyWhatCouldStartAMatch) {
  StopText s({"END"});
  EXPECT_EQ(s.feed("abc E"), "abc ");
  EXPECT_EQ(s.feed("N"), "");
  EXPECT_EQ(s.feed("X"), "ENX");
  EXPECT_FALSE(s.stopped());
}

TEST(StopText, CutsAtTheEarliestMatchAcrossPieces) {
  StopText s({"END", "ST"});
  EXPECT_EQ(run(s, {"hello E", "N", "D world", "ST"}), "hello ");
  EXPECT_TRUE(s.stopped());
  StopText t({"\n\n"});
  EXPECT_EQ(run(t, {"a\n", "\nb"}), "a");
  StopText none({});
  EXPECT_EQ(run(none, {"a", "b"}), "ab");
}

}  // namespace
}  // namespace molt::server
