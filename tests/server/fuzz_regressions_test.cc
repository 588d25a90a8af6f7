// Inputs the server_request fuzzer found (tests/fuzz/regressions/server_request/), replayed the
// way the harness reads them: the bytes as a POST body (parse_request_body), then prepared as a
// chat and as a plain completion request against the tiny ladder, under small limits and the
// server's own. Each must be refused with a 400 ApiError; nothing else may escape (gtest fails
// a test on any other exception, and a 500 "internal error" is what the server would answer).
#include "fuzz_regressions.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "molt/ladder/ladder.h"
#include "molt/runtime/options.h"
#include "server/api_error.h"
#include "server/completion.h"
#include "server/request.h"
#include "test_util.h"

namespace molt::server {
namespace {

using nlohmann::json;

const Ladder& ladder() {
  static const std::unique_ptr<Ladder> l =
      Ladder::open(MOLT_SOURCE_DIR "/models/tiny-ladder/ladder.json");
  return *l;
}

// As tests/fuzz/server_request_fuzz.cc: small limits, then the server's.
std::vector<CompletionLimits> limits() {
  CompletionLimits server;
  server.context = std::numeric_limits<int64_t>::max();
  for (int r = 0; r < ladder().size(); ++r)
    server.context = std::min(server.context, ladder().rung(r).config().max_position_embeddings);
  return {CompletionLimits{64, 48, 16}, server};
}

// The ApiError the server answers `bytes` with on the given endpoint, or nullopt when accepted.
std::optional<ApiError> answer(const std::string& bytes, bool chat, const CompletionLimits& lim) {
  try {
    const json body = parse_request_body(bytes);
    prepare_completion(ladder(), body, chat, SessionOptions{}, lim, "fuzz");
  } catch (const ApiError& e) {
    return e;
  }
  return std::nullopt;
}

TEST(FuzzRegressions, ServerRequestBodiesAreRefusedWith400) {
  const auto inputs = test::fuzz_regressions("server_request");
  ASSERT_FALSE(inputs.empty()) << "no inputs under tests/fuzz/regressions/server_request";
  for (const auto& input : inputs) {
    const std::string bytes = test::read_file(input);
    for (bool chat : {true, false}) {
      for (const CompletionLimits& lim : limits()) {
        SCOPED_TRACE(input.filename().string() + (chat ? " chat" : " completion") + " context " +
                     std::to_string(lim.context));
        const auto e = answer(bytes, chat, lim);
        ASSERT_TRUE(e.has_value()) << "accepted";
        EXPECT_EQ(e->status, 400) << e->what();
      }
    }
  }
}

// nlohmann reports a number no double holds as out_of_range (406), not parse_error: the body
// reader let it escape, and the server answered 500 "internal error".
TEST(FuzzRegressions, NumberOverflowInTheBodyIsInvalidJson) {
  for (const char* body : {R"({"temperature": 1e400})", R"({"prompt": [-1e999]})"}) {
    try {
      parse_request_body(body);
      ADD_FAILURE() << "accepted " << body;
    } catch (const ApiError& e) {
      EXPECT_EQ(e.status, 400);
      EXPECT_EQ(e.code, "invalid_json");
      EXPECT_NE(std::string(e.what()).find("number overflow"), std::string::npos) << e.what();
    }
  }
}

// max_tokens near INT64_MAX: `prompt + max_tokens > context` overflowed (UBSan) before it
// refused; now the length check cannot overflow, and names max_tokens.
TEST(FuzzRegressions, HugeMaxTokensIsRefusedWithoutOverflow) {
  for (const CompletionLimits& lim : limits()) {
    for (const json& max : {json(std::numeric_limits<int64_t>::max()),
                            json(std::numeric_limits<int64_t>::max() - 1)}) {
      const json body = {{"prompt", {1, 2, 3}}, {"max_tokens", max}};
      try {
        prepare_completion(ladder(), body, false, SessionOptions{}, lim, "fuzz");
        ADD_FAILURE() << "accepted " << body.dump();
      } catch (const ApiError& e) {
        EXPECT_EQ(e.param, "max_tokens") << e.what();
        EXPECT_EQ(e.code, "context_length_exceeded") << e.what();
      }
    }
  }
}

}  // namespace
}  // namespace molt::server
