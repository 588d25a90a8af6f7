// An in-process `molt serve` on the tiny ladder, and a small SSE client, for the server tests.
#pragma once

#include <gtest/gtest.h>
#include <httplib.h>

#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "molt/ladder/ladder.h"
#include "molt/server/server.h"

namespace molt::server::test {

inline std::unique_ptr<Ladder> tiny_ladder() {
  return Ladder::open(MOLT_SOURCE_DIR "/models/tiny-ladder/ladder.json");
}

class LiveServer {
 public:
  explicit LiveServer(Ladder& ladder, ServerOptions o = defaults(),
                      std::unique_ptr<BudgetSource> budget = nullptr)
      : server_(std::make_unique<Server>(ladder, std::move(budget), o)) {
    port_ = server_->bind();
    thread_ = std::thread([this] { server_->run(); });
    httplib::Client c = client();
    for (int i = 0; i < 200 && !c.Get("/health"); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ~LiveServer() { stop(); }
  void stop() {
    if (!thread_.joinable()) return;
    server_->stop();
    thread_.join();
  }
  static ServerOptions defaults() {
    ServerOptions o;
    o.port = 0;
    o.log = nullptr;
    o.min_round_ms = 4;  // the tiny models are fast: a budget cut lands mid-answer
    o.read_timeout_s = 2;
    return o;
  }
  int port() const { return port_; }
  httplib::Client client() const {
    httplib::Client c("127.0.0.1", port_);
    // A guard against a hung server, not a speed check: CI's ASan run once saw two server tests
    // stall ~30 s together (the machine, not the server), and one timed out at 30 s.
    c.set_read_timeout(120, 0);
    return c;
  }
  Server& server() { return *server_; }

 private:
  std::unique_ptr<Server> server_;
  int port_ = -1;
  std::thread thread_;
};

// A streamed response, split into its `data:` payloads.
struct SseResult {
  int status = 0;
  std::vector<nlohmann::json> chunks;  // parsed payloads, [DONE] excluded
  bool done_marker = false;
  std::string raw;
};

// POSTs `body` and reads the event stream; `on_chunk` (optional) sees each chunk as it arrives.
inline SseResult post_stream(const LiveServer& s, const std::string& path,
                             const nlohmann::json& body,
                             const std::function<void(const nlohmann::json&)>& on_chunk = {},
                             const httplib::Headers& headers = {}) {
  SseResult r;
  std::string buf;
  httplib::Request req;
  req.method = "POST";
  req.path = path;
  req.headers = headers;
  req.set_header("Content-Type", "application/json");
  req.body = body.dump();
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    buf.append(data, n);
    r.raw.append(data, n);
    for (size_t end; (end = buf.find("\n\n")) != std::string::npos;) {
      const std::string event = buf.substr(0, end);
      buf.erase(0, end + 2);
      if (event.rfind("data: ", 0) != 0) continue;  // comments (keepalives)
      const std::string payload = event.substr(6);
      if (payload == "[DONE]") {
        r.done_marker = true;
        continue;
      }
      r.chunks.push_back(nlohmann::json::parse(payload));
      if (on_chunk) on_chunk(r.chunks.back());
    }
    return true;
  };
  httplib::Client c = s.client();
  auto res = c.send(req);
  if (res) r.status = res->status;
  return r;
}

// ignore_eos: the tiny ladder's chat answers end after a few tokens (it was trained on short
// answers to questions), and these tests need a stream long enough to cut mid-answer.
inline nlohmann::json chat_body(int max_tokens, bool stream = true, bool ignore_eos = true) {
  return {{"model", "tiny-ladder"},
          {"messages",
           {{{"role", "user"}, {"content", "The driver will be able to use the driver to do it"}}}},
          {"max_tokens", max_tokens},
          {"temperature", 0},
          {"stream", stream},
          {"ignore_eos", ignore_eos}};
}

}  // namespace molt::server::test
