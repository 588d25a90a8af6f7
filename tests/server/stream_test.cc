// molt serve end to end in process: streamed and whole answers, a budget cut mid-answer seen on
// the wire, eight concurrent streams under one cut, a client that leaves, a clean stop.
#include <gtest/gtest.h>

#include <atomic>

#include "server_fixture.h"

namespace molt::server::test {
namespace {

using nlohmann::json;

// Checks the stream's shape; returns the answer text.
std::string check_stream(const SseResult& r, int* migrations = nullptr) {
  EXPECT_EQ(r.status, 200);
  EXPECT_TRUE(r.done_marker);
  std::string text;
  int64_t next = 0;
  int moves = 0;
  bool finished = false;
  for (const json& c : r.chunks) {
    EXPECT_FALSE(c.contains("error")) << c.dump();
    if (c["choices"].empty()) continue;  // usage
    EXPECT_EQ(c["object"], "chat.completion.chunk");
    const json& delta = c["choices"][0]["delta"];
    const json& m = c["molt"];
    EXPECT_TRUE(m.contains("rung")) << c.dump();
    if (delta.contains("content")) {
      EXPECT_EQ(m["index"].get<int64_t>(), next) << c.dump();
      ++next;
      text += delta["content"].get<std::string>();
    }
    if (m.contains("migration")) {
      ++moves;
      EXPECT_EQ(m["rung"], m["migration"]["to"]);
    }
    if (!c["choices"][0]["finish_reason"].is_null()) {
      finished = true;
      EXPECT_FALSE(m["done"]["killed"].get<bool>());
      EXPECT_EQ(m["done"]["tokens"].get<int64_t>(), next);
    }
  }
  EXPECT_TRUE(finished);
  if (migrations) *migrations = moves;
  return text;
}

TEST(Server, StreamsAChatAnswerWithTheRungOnEveryChunk) {
  auto ladder = tiny_ladder();
  LiveServer s(*ladder);
  json body = chat_body(24);
  body["stream_options"] = {{"include_usage", true}};
  const SseResult r = post_stream(s, "/v1/chat/completions", body);
  int moves = -1;
  const std::string text = check_stream(r, &moves);
  EXPECT_EQ(moves, 0);
  EXPECT_FALSE(text.empty());
  EXPECT_EQ(r.chunks.front()["choices"][0]["delta"]["role"], "assistant");
  const json& usage = r.chunks.back()["usage"];
  EXPECT_EQ(usage["completion_tokens"].get<int64_t>() + usage["prompt_tokens"].get<int64_t>(),
            usage["total_tokens"].get<int64_t>());

  // The same request, not streamed and greedy, gives the same text.
  httplib::Client c = s.client();
  auto res = c.Post("/v1/chat/completions", chat_body(24, false).dump(), "application/json");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  const json whole = json::parse(res->body);
  EXPECT_EQ(whole["object"], "chat.completion");
  EXPECT_EQ(whole["choices"][0]["message"]["content"], text);
  EXPECT_EQ(whole["molt"]["rungs"].size(), whole["usage"]["completion_tokens"].get<size_t>());
  EXPECT_FALSE(whole["molt"]["done"]["killed"].get<bool>());
}

TEST(Server, ABudgetCutMidAnswerArrivesAsOneMigrationChunk) {
  auto ladder = tiny_ladder();
  LiveServer s(*ladder);
  const std::string below = ladder->rung(1).name();
  std::atomic<int> content{0};
  const SseResult r = post_stream(s, "/v1/chat/completions", chat_body(80), [&](const json& c) {
    if (c["choices"].empty() || !c["choices"][0]["delta"].contains("content")) return;
    if (++content == 3) {
      httplib::Client b = s.client();
      auto res = b.Post("/v1/molt/budget", json({{"rung", below}}).dump(), "application/json");
      ASSERT_TRUE(res);
      EXPECT_EQ(res->status, 200) << res->body;
    }
  });
  int moves = 0;
  check_stream(r, &moves);
  EXPECT_EQ(moves, 1);
  std::string from, to;
  for (const json& c : r.chunks) {
    if (c.contains("molt") && c["molt"].contains("migration")) {
      from = c["molt"]["migration"]["from"];
      to = c["molt"]["migration"]["to"];
    }
  }
  EXPECT_EQ(from, ladder->rung(0).name());
  EXPECT_EQ(to, below);
  EXPECT_EQ(r.chunks.back()["molt"]["rung"], below);
  for (const json& c : r.chunks) {
    if (!c["molt"].contains("migration")) continue;
    EXPECT_GT(c["molt"]["migration"]["pressure"].get<double>(), 0.0) << c.dump();
    EXPECT_TRUE(c["molt"]["migration"]["budget_mib"].is_number()) << c.dump();
  }
}

// A budget below every rung suspends the tenant (a park chunk; the stream waits), and lifting it
// lets the answer go on where it stopped.
TEST(Server, ABudgetBelowEveryRungParksTheStreamUntilItLifts) {
  auto ladder = tiny_ladder();
  LiveServer s(*ladder);
  std::atomic<int> content{0};
  std::atomic<bool> parked{false};
  const SseResult r = post_stream(s, "/v1/chat/completions", chat_body(40), [&](const json& c) {
    httplib::Client b = s.client();
    if (!c["choices"].empty() && c["choices"][0]["delta"].contains("content") && ++content == 3)
      b.Post("/v1/molt/budget", R"({"mib": 0.5})", "application/json");
    if (c["molt"].contains("park") && !parked.exchange(true)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));  // parked for a while
      b.Post("/v1/molt/budget", R"({"mib": null})", "application/json");
    }
  });
  check_stream(r);
  EXPECT_TRUE(parked.load()) << r.raw;
  bool resumed = false;
  for (const json& c : r.chunks) {
    if (c["molt"].contains("resume") || c["molt"].contains("migration")) resumed = true;
  }
  EXPECT_TRUE(resumed) << r.raw;
  EXPECT_EQ(r.chunks.back()["molt"]["done"]["tokens"], 40);
}

TEST(Server, EightStreamsUnderOneCutAllFinishWithinTheBudget) {
  auto ladder = tiny_ladder();
  LiveServer s(*ladder);
  constexpr int kStreams = 8;
  std::vector<SseResult> results(kStreams);
  std::atomic<int> tokens{0};
  std::vector<std::thread> clients;
  for (int i = 0; i < kStreams; ++i) {
    clients.emplace_back([&, i] {
      json body = chat_body(60);
      body["molt"] = {{"priority", i % 2 ? "background" : "foreground"}};
      results[i] = post_stream(s, "/v1/chat/completions", body, [&](const json& c) {
        if (!c["choices"].empty() && c["choices"][0]["delta"].contains("content") &&
            ++tokens == 3 * kStreams) {
          httplib::Client b = s.client();
          b.Post("/v1/molt/budget", json({{"rung", ladder->rung(2).name()}}).dump(),
                 "application/json");
        }
      });
    });
  }
  for (auto& t : clients) t.join();
  for (const SseResult& r : results) check_stream(r);
  httplib::Client c = s.client();
  auto m = c.Get("/metrics");
  ASSERT_TRUE(m);
  const size_t at = m->body.find("\nmolt_max_overshoot_mib ");
  ASSERT_NE(at, std::string::npos) << m->body;
  EXPECT_LE(std::stod(m->body.substr(at + 24)), 0.0) << m->body;
  EXPECT_NE(m->body.find("molt_generations_killed_total 0"), std::string::npos);
  EXPECT_NE(m->body.find("molt_migrations_total{"), std::string::npos) << m->body;
}

TEST(Server, AClientThatLeavesMidStreamIsCancelled) {
  auto ladder = tiny_ladder();
  LiveServer s(*ladder);
  {
    httplib::Client c = s.client();
    int seen = 0;
    httplib::Request req;
    req.method = "POST";
    req.path = "/v1/chat/completions";
    req.set_header("Content-Type", "application/json");
    req.body = chat_body(1000).dump();
    req.content_receiver = [&](const char*, size_t, uint64_t, uint64_t) { return ++seen < 3; };
    c.send(req);  // the receiver's false closes the connection
  }
  httplib::Client c = s.client();
  int64_t live = -1;
  for (int i = 0; i < 200 && live != 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    live = json::parse(c.Get("/health")->body)["requests"].get<int64_t>();
  }
  EXPECT_EQ(live, 0);
}

TEST(Server, StopEndsOpenStreamsWithAnErrorEvent) {
  auto ladder = tiny_ladder();
  LiveServer s(*ladder);
  std::thread stopper;
  const SseResult r = post_stream(s, "/v1/chat/completions", chat_body(1000), [&](const json&) {
    if (!stopper.joinable()) stopper = std::thread([&] { s.server().stop(); });
  });
  stopper.join();
  ASSERT_FALSE(r.chunks.empty());
  EXPECT_TRUE(r.chunks.back().contains("error")) << r.raw;
  EXPECT_EQ(r.chunks.back()["error"]["code"], "unavailable");
  EXPECT_TRUE(r.done_marker);
  // Stopped: no new answer is admitted.
  httplib::Client c = s.client();
  auto res = c.Post("/v1/chat/completions", chat_body(4, false).dump(), "application/json");
  EXPECT_TRUE(!res || res->status == 503) << (res ? res->body : "");
}

TEST(Server, AnAnswerEndsAtEndOfTurnUnlessIgnoreEosIsSet) {
  auto ladder = tiny_ladder();
  LiveServer s(*ladder);
  httplib::Client c = s.client();
  auto ended =
      c.Post("/v1/chat/completions", chat_body(200, false, false).dump(), "application/json");
  ASSERT_TRUE(ended);
  const json e = json::parse(ended->body);
  EXPECT_EQ(e["choices"][0]["finish_reason"], "stop") << ended->body;
  const int64_t n = e["usage"]["completion_tokens"].get<int64_t>();
  ASSERT_LT(n, 200);
  // Only a little past the end: the whole answer comes in one response, which the client waits
  // for without a byte.
  const int64_t more = n + 16;
  auto full = c.Post("/v1/chat/completions", chat_body(static_cast<int>(more), false, true).dump(),
                     "application/json");
  ASSERT_TRUE(full);
  const json f = json::parse(full->body);
  EXPECT_EQ(f["choices"][0]["finish_reason"], "length") << full->body;
  EXPECT_EQ(f["usage"]["completion_tokens"], more);
  // The same greedy answer, continued past the end of the turn.
  const std::string head = e["choices"][0]["message"]["content"];
  EXPECT_EQ(f["choices"][0]["message"]["content"].get<std::string>().substr(0, head.size()), head);
}

TEST(Server, StopSequencesEndTheAnswerBeforeTheMatch) {
  auto ladder = tiny_ladder();
  LiveServer s(*ladder);
  httplib::Client c = s.client();
  auto first = c.Post("/v1/chat/completions", chat_body(30, false).dump(), "application/json");
  ASSERT_TRUE(first);
  const std::string text = json::parse(first->body)["choices"][0]["message"]["content"];
  ASSERT_GE(text.size(), 8u);
  const std::string stop = text.substr(4, 3);
  json body = chat_body(30, false);
  body["stop"] = stop;
  auto res = c.Post("/v1/chat/completions", body.dump(), "application/json");
  ASSERT_TRUE(res);
  const json j = json::parse(res->body);
  EXPECT_EQ(j["choices"][0]["message"]["content"], text.substr(0, text.find(stop)));
  EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
}

TEST(Server, PlainCompletionsAndModels) {
  auto ladder = tiny_ladder();
  LiveServer s(*ladder);
  httplib::Client c = s.client();
  auto res = c.Post("/v1/completions",
                    json({{"model", ladder->name()},
                          {"prompt", "Once upon a time"},
                          {"max_tokens", 12},
                          {"temperature", 0}})
                        .dump(),
                    "application/json");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  const json j = json::parse(res->body);
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(j["usage"]["completion_tokens"], 12);

  auto models = c.Get("/v1/models");
  ASSERT_TRUE(models);
  const json m = json::parse(models->body);
  ASSERT_EQ(m["data"].size(), 1u);
  EXPECT_EQ(m["data"][0]["id"], ladder->name());
  EXPECT_EQ(m["data"][0]["molt"]["rungs"].size(), static_cast<size_t>(ladder->size()));
  for (const json& r : m["data"][0]["molt"]["rungs"]) {
    EXPECT_GT(r["footprint_mib"].get<double>(), r["weights_mib"].get<double>());
  }
  auto one = c.Get("/v1/models/" + ladder->name());
  ASSERT_TRUE(one);
  EXPECT_EQ(one->status, 200);
}

}  // namespace
}  // namespace molt::server::test
