// molt serve: an OpenAI-compatible HTTP server on the scheduler (docs/SERVER.md). Every request
// is a tenant; every streamed chunk names the rung that produced it, and a switch arrives as its
// own chunk.
//
//   auto ladder = molt::Ladder::open("models/tiny-ladder/ladder.json");
//   molt::server::Server s(*ladder, molt::open_budget_source("live"), {});
//   int port = s.bind();       // ServerOptions::port, or any free one when 0
//   s.run();                   // until stop(), from any thread (a signal handler's thread)
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>

#include "molt/ladder/ladder.h"
#include "molt/pressure/budget.h"
#include "molt/runtime/options.h"

namespace molt::server {

struct ServerOptions {
  std::string host = "127.0.0.1";  // loopback unless told otherwise
  int port = 8080;                 // 0: any free port (bind() says which)
  std::string api_key;             // non-empty: every endpoint but /health needs it
  int64_t max_tenants = 64;        // requests served at once; more get 429
  int64_t max_prompt_tokens = 0;   // 0: the ladder's context length
  size_t max_body_bytes = size_t{1} << 20;
  int64_t default_max_tokens = 256;  // when a request names none (clipped to the context)
  double min_round_ms = 0;           // pacing of scheduler rounds (demos on tiny models)
  int read_timeout_s = 10;           // a client that sends nothing for this long is dropped
  SessionOptions generation;         // each request's defaults (policy, chunks, transfer)
  std::FILE* log = stderr;           // one line per request; null: quiet
};

class Server {
 public:
  // The ladder must outlive the server; `budget` may be null (no limit).
  Server(Ladder& ladder, std::unique_ptr<BudgetSource> budget, ServerOptions o);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds host:port; returns the port. Throws molt::Error naming the address when it cannot.
  int bind();
  // Serves until stop(). bind() first.
  void run();
  // Ends every stream with an error event naming `why`, then stops listening. Any thread.
  void stop(const std::string& why = "the server is shutting down");
  int port() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace molt::server
