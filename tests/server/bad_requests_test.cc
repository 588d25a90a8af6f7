// Hostile and malformed requests: each gets the right status and an OpenAI-style error object,
// and the server keeps serving afterwards.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "server_fixture.h"

namespace molt::server::test {
namespace {

using nlohmann::json;

struct Case {
  std::string name, method, path, body;
  int status;
  std::string param = "", code = "";
};

json chat(json extra) {
  json b = {{"model", "tiny-ladder"},
            {"messages", {{{"role", "user"}, {"content", "hi there"}}}},
            {"max_tokens", 4}};
  for (auto& [k, v] : extra.items()) b[k] = v;
  return b;
}

std::vector<Case> cases() {
  const std::string c = "/v1/chat/completions", p = "/v1/completions", b = "/v1/molt/budget";
  return {
      {"broken json", "POST", c, "{\"model\":", 400, "", "invalid_json"},
      {"empty body", "POST", c, "", 400, "", "invalid_json"},
      {"array body", "POST", c, "[]", 400},
      {"string body", "POST", c, "\"hello\"", 400},
      {"invalid utf-8", "POST", c, "{\"messages\": \"\xff\xfe\"}", 400, "", "invalid_json"},
      {"no messages", "POST", c, json({{"model", "tiny-ladder"}}).dump(), 400, "messages",
       "missing_required_parameter"},
      {"messages a string", "POST", c, chat({{"messages", "hi"}}).dump(), 400, "messages",
       "invalid_type"},
      {"messages empty", "POST", c, chat({{"messages", json::array()}}).dump(), 400, "messages"},
      {"message a number", "POST", c, chat({{"messages", {5}}}).dump(), 400, "messages[0]"},
      {"no role", "POST", c, chat({{"messages", {{{"content", "x"}}}}}).dump(), 400,
       "messages[0].role"},
      {"unknown role", "POST", c,
       chat({{"messages", {{{"role", "wizard"}, {"content", "x"}}}}}).dump(), 400,
       "messages[0].role"},
      {"content a number", "POST", c,
       chat({{"messages", {{{"role", "user"}, {"content", 5}}}}}).dump(), 400,
       "messages[0].content", "invalid_type"},
      {"image part", "POST", c,
       chat({{"messages", {{{"role", "user"}, {"content", {{{"type", "image_url"}}}}}}}}).dump(),
       400, "messages[0].content[0].type"},
      {"max_tokens 0", "POST", c, chat({{"max_tokens", 0}}).dump(), 400, "max_tokens"},
      {"max_tokens negative", "POST", c, chat({{"max_tokens", -5}}).dump(), 400, "max_tokens"},
      {"max_tokens a string", "POST", c, chat({{"max_tokens", "10"}}).dump(), 400, "max_tokens",
       "invalid_type"},
      {"max_tokens a fraction", "POST", c, chat({{"max_tokens", 3.5}}).dump(), 400, "max_tokens"},
      {"max_tokens beyond the context", "POST", c, chat({{"max_tokens", 1000000}}).dump(), 400,
       "max_tokens", "context_length_exceeded"},
      {"temperature a string", "POST", c, chat({{"temperature", "hot"}}).dump(), 400,
       "temperature"},
      {"temperature 5", "POST", c, chat({{"temperature", 5}}).dump(), 400, "temperature"},
      {"top_p 0", "POST", c, chat({{"top_p", 0}}).dump(), 400, "top_p"},
      {"top_p 2", "POST", c, chat({{"top_p", 2}}).dump(), 400, "top_p"},
      {"stream a string", "POST", c, chat({{"stream", "yes"}}).dump(), 400, "stream"},
      {"stop a number", "POST", c, chat({{"stop", 5}}).dump(), 400, "stop"},
      {"five stops", "POST", c, chat({{"stop", {"a", "b", "c", "d", "e"}}}).dump(), 400, "stop"},
      {"empty stop", "POST", c, chat({{"stop", {""}}}).dump(), 400, "stop"},
      {"n 2", "POST", c, chat({{"n", 2}}).dump(), 400, "n"},
      {"seed a string", "POST", c, chat({{"seed", "abc"}}).dump(), 400, "seed"},
      {"unknown model", "POST", c, chat({{"model", "gpt-9"}}).dump(), 400, "model",
       "model_not_found"},
      {"model a number", "POST", c, chat({{"model", 5}}).dump(), 400, "model"},
      {"molt a string", "POST", c, chat({{"molt", "x"}}).dump(), 400, "molt"},
      {"unknown priority", "POST", c, chat({{"molt", {{"priority", "urgent"}}}}).dump(), 400,
       "molt.priority"},
      {"policy hold", "POST", c, chat({{"molt", {{"policy", "hold"}}}}).dump(), 400, "molt.policy"},
      {"unknown policy", "POST", c, chat({{"molt", {{"policy", "bogus"}}}}).dump(), 400,
       "molt.policy"},
      {"stream_options a string", "POST", c, chat({{"stream_options", "x"}}).dump(), 400,
       "stream_options"},
      {"no prompt", "POST", p, json({{"model", "tiny-ladder"}}).dump(), 400, "prompt"},
      {"prompt a number", "POST", p, json({{"prompt", 5}}).dump(), 400, "prompt"},
      {"negative token id", "POST", p, json({{"prompt", {1, -1}}}).dump(), 400, "prompt[1]"},
      {"token id outside the vocabulary", "POST", p, json({{"prompt", {1, 99999999}}}).dump(), 400,
       "prompt"},
      {"unknown path", "GET", "/v1/nothing", "", 404, "", "not_found"},
      {"GET a POST endpoint", "GET", c, "", 405, "", "method_not_allowed"},
      {"DELETE models", "DELETE", "/v1/models", "", 405, "", "method_not_allowed"},
      {"negative budget", "POST", b, json({{"mib", -1}}).dump(), 400, "mib"},
      {"budget a string", "POST", b, json({{"mib", "x"}}).dump(), 400, "mib"},
      {"unknown rung", "POST", b, json({{"rung", "zz"}}).dump(), 400, "rung"},
      {"empty budget", "POST", b, "{}", 400},
      {"bad trace", "POST", b, json({{"trace", {{"points", "x"}}}}).dump(), 400, "trace"},
      {"a rung as the model", "POST", c, chat({{"model", "s"}}).dump(), 400, "model",
       "model_not_found"},
      {"unknown model to retrieve", "GET", "/v1/models/gpt-9", "", 404, "model", "model_not_found"},
  };
}

httplib::Result send(const LiveServer& s, const Case& k, const httplib::Headers& h = {}) {
  httplib::Client c = s.client();
  if (k.method == "GET") return c.Get(k.path, h);
  if (k.method == "DELETE") return c.Delete(k.path, h);
  return c.Post(k.path, h, k.body, "application/json");
}

void expect_error(const httplib::Result& res, const Case& k) {
  ASSERT_TRUE(res) << k.name;
  EXPECT_EQ(res->status, k.status) << k.name << ": " << res->body;
  const json j = json::parse(res->body, nullptr, false);
  ASSERT_TRUE(j.is_object() && j.contains("error")) << k.name << ": " << res->body;
  for (const char* f : {"message", "type", "param", "code"}) {
    EXPECT_TRUE(j["error"].contains(f)) << k.name << " lacks " << f;
  }
  EXPECT_FALSE(j["error"]["message"].get<std::string>().empty()) << k.name;
  if (!k.param.empty()) {
    EXPECT_EQ(j["error"]["param"], k.param) << k.name << ": " << res->body;
  }
  if (!k.code.empty()) {
    EXPECT_EQ(j["error"]["code"], k.code) << k.name << ": " << res->body;
  }
}

void expect_serving(const LiveServer& s) {
  httplib::Client c = s.client();
  auto res = c.Post("/v1/chat/completions", chat({}).dump(), "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200) << res->body;
}

// A raw TCP connection, for what no well-behaved client sends.
class Raw {
 public:
  explicit Raw(int port) : fd_(socket(AF_INET, SOCK_STREAM, 0)) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
    timeval tv{10, 0};
    setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  }
  ~Raw() { close(fd_); }
  bool send_text(const std::string& s) {
    return ::send(fd_, s.data(), s.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(s.size());
  }
  // Everything until the server closes the connection (or 10 s pass).
  std::string read_all() {
    std::string out;
    char buf[4096];
    ssize_t n;
    while ((n = recv(fd_, buf, sizeof buf, 0)) > 0) out.append(buf, static_cast<size_t>(n));
    return out;
  }
  bool connected() const { return connected_; }

 private:
  int fd_;
  bool connected_ = false;
};

TEST(BadRequests, EachGetsItsStatusAndTheServerKeepsServing) {
  auto ladder = tiny_ladder();
  LiveServer s(*ladder);
  const std::vector<Case> all = cases();
  ASSERT_GE(all.size(), 30u);
  for (const Case& k : all) expect_error(send(s, k), k);
  expect_serving(s);
}

TEST(BadRequests, UnknownFieldsAreIgnored) {
  auto ladder = tiny_ladder();
  LiveServer s(*ladder);
  httplib::Client c = s.client();
  auto res = c.Post(
      "/v1/chat/completions",
      chat({{"frobnicate", {{"x", 1}}}, {"user", "u"}, {"logit_bias", json::object()}}).dump(),
      "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200) << res->body;
}

TEST(BadRequests, LimitsOnBodyAndPromptSize) {
  auto ladder = tiny_ladder();
  ServerOptions o = LiveServer::defaults();
  o.max_body_bytes = 4096;
  o.max_prompt_tokens = 80;  // the chat template's system turn is ~40
  LiveServer s(*ladder, o);
  expect_error(
      send(s, {"huge body", "POST", "/v1/chat/completions",
               chat({{"pad", std::string(8192, 'x')}}).dump(), 413, "", "request_too_large"}),
      {"huge body", "", "", "", 413, "", "request_too_large"});
  std::string words;
  for (int i = 0; i < 100; ++i) words += "driver " + std::to_string(i) + " ";
  json long_prompt = chat({{"messages", {{{"role", "user"}, {"content", words}}}}});
  expect_error(send(s, {"long prompt", "POST", "/v1/chat/completions", long_prompt.dump(), 400}),
               {"long prompt", "", "", "", 400, "messages", "context_length_exceeded"});
  expect_serving(s);
}

TEST(BadRequests, ApiKeyGuardsEveryEndpointButHealth) {
  auto ladder = tiny_ladder();
  ServerOptions o = LiveServer::defaults();
  o.api_key = "sk-molt-test";
  LiveServer s(*ladder, o);
  const Case models{"models", "GET", "/v1/models", "", 401, "", "invalid_api_key"};
  expect_error(send(s, models), models);
  expect_error(send(s, models, {{"Authorization", "Bearer sk-molt-wrong"}}), models);
  expect_error(send(s, models, {{"Authorization", "sk-molt-test"}}), models);  // not Bearer
  const Case post{"chat", "POST", "/v1/chat/completions", chat({}).dump(),
                  401,    "",     "invalid_api_key"};
  expect_error(send(s, post), post);
  const Case metrics{"metrics", "GET", "/metrics", "", 401, "", "invalid_api_key"};
  expect_error(send(s, metrics), metrics);
  httplib::Client c = s.client();
  EXPECT_EQ(c.Get("/health")->status, 200);
  EXPECT_EQ(c.Get("/v1/models", {{"Authorization", "Bearer sk-molt-test"}})->status, 200);
  EXPECT_EQ(c.Get("/v1/molt/budget?api_key=sk-molt-test")->status, 200);
  EXPECT_EQ(c.Post("/v1/chat/completions", {{"Authorization", "Bearer sk-molt-test"}},
                   chat({}).dump(), "application/json")
                ->status,
            200);
}

TEST(BadRequests, TooManyTenantsGet429) {
  auto ladder = tiny_ladder();
  ServerOptions o = LiveServer::defaults();
  o.max_tenants = 1;
  o.min_round_ms = 20;
  LiveServer s(*ladder, o);
  // The second request goes out once the first one's stream has begun, so its tenant holds the
  // only place (polling beside it raced: under emulation a probe could be served first).
  int status = 0;
  post_stream(s, "/v1/chat/completions", chat_body(40), [&](const nlohmann::json&) {
    if (status != 0) return;
    httplib::Client c = s.client();
    auto res = c.Post("/v1/chat/completions", chat({}).dump(), "application/json");
    status = res ? res->status : -1;
  });
  EXPECT_EQ(status, 429);
  expect_serving(s);
}

TEST(BadRequests, SlowBodiesAndGarbageDoNotStopTheServer) {
  auto ladder = tiny_ladder();
  LiveServer s(*ladder);  // read timeout 2 s
  // A body that never finishes arriving: the server gives up on it, others are served meanwhile.
  Raw slow(s.port());
  ASSERT_TRUE(slow.connected());
  ASSERT_TRUE(
      slow.send_text("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                     "Content-Type: application/json\r\nContent-Length: 500\r\n\r\n{\"mod"));
  // Headers that trickle in one byte at a time, then stop.
  Raw trickle(s.port());
  ASSERT_TRUE(trickle.send_text("G"));
  ASSERT_TRUE(trickle.send_text("E"));
  expect_serving(s);
  slow.read_all();  // returns once the server closes the connection
  trickle.read_all();
  // Not HTTP at all, a bad Content-Length, a connection dropped after its headers.
  {
    Raw garbage(s.port());
    garbage.send_text("GARBAGE\r\n\r\n");
    const std::string reply = garbage.read_all();
    EXPECT_TRUE(reply.empty() || reply.rfind("HTTP/1.1 400", 0) == 0) << reply;
  }
  {
    Raw bad_length(s.port());
    bad_length.send_text(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: -7\r\n\r\n");
    const std::string reply = bad_length.read_all();
    EXPECT_TRUE(reply.empty() || reply.rfind("HTTP/1.1 4", 0) == 0) << reply;
  }
  {
    Raw dropped(s.port());
    dropped.send_text(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 900\r\n\r\n");
  }
  expect_serving(s);
}

}  // namespace
}  // namespace molt::server::test
