// The HTTP surface: routes, authentication, limits and OpenAI-style errors on cpp-httplib.
#include <fmt/core.h>
#include <httplib.h>
#include <openssl/crypto.h>
#include <openssl/sha.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "molt/common/error.h"
#include "molt/scheduler/scheduler.h"
#include "molt/server/server.h"
#include "server/api_error.h"
#include "server/completion.h"
#include "server/engine.h"
#include "server/page.h"

namespace molt::server {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

// The paths served and the methods each takes (405 for the others, 404 for other paths).
const std::map<std::string, std::set<std::string>>& routes() {
  static const std::map<std::string, std::set<std::string>> r = {
      {"/", {"GET"}},
      {"/health", {"GET"}},
      {"/metrics", {"GET"}},
      {"/v1/models", {"GET"}},
      {"/v1/chat/completions", {"POST"}},
      {"/v1/completions", {"POST"}},
      {"/v1/molt/budget", {"GET", "POST"}},
      {"/v1/molt/events", {"GET"}},
  };
  return r;
}

const std::set<std::string>* methods_for(const std::string& path) {
  auto it = routes().find(path);
  if (it != routes().end()) return &it->second;
  static const std::set<std::string> model = {"GET"};
  if (path.rfind("/v1/models/", 0) == 0 && path.size() > 11) return &model;
  return nullptr;
}

std::string endpoint_label(const std::string& path) {
  if (methods_for(path) == nullptr) return "other";
  return path.rfind("/v1/models/", 0) == 0 ? "/v1/models/{id}" : path;
}

void send_error(httplib::Response& res, int status, const std::string& message,
                const std::string& type, const std::string& param, const std::string& code) {
  res.status = status;
  res.set_content(
      error_json(message, type, param, code).dump(-1, ' ', false, json::error_handler_t::replace),
      "application/json");
}

void send_error(httplib::Response& res, const ApiError& e) {
  send_error(res, e.status, e.what(), e.type, e.param, e.code);
}

void send_json(httplib::Response& res, const json& j, int status = 200) {
  res.status = status;
  res.set_content(j.dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
}

json parse_body(const httplib::Request& req) {
  return parse_request_body(req.body);
}

// Equal keys in time independent of where they differ: both are hashed, the digests compared
// with CRYPTO_memcmp.
bool same_key(const std::string& a, const std::string& b) {
  unsigned char da[SHA256_DIGEST_LENGTH], db[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(a.data()), a.size(), da);
  SHA256(reinterpret_cast<const unsigned char*>(b.data()), b.size(), db);
  return CRYPTO_memcmp(da, db, sizeof da) == 0;
}

// Per-thread request timing and a summary the handler leaves for the log line (cpp-httplib
// runs a request's handler, its streaming and its logger on one worker thread).
thread_local Clock::time_point t_request;
thread_local std::string t_summary;

}  // namespace

struct Server::Impl {
  Impl(Ladder& l, std::unique_ptr<BudgetSource> b, ServerOptions opts)
      : ladder(l), o(std::move(opts)), engine(l, std::move(b), engine_options(o)) {
    limits.context = INT64_MAX;
    for (int r = 0; r < ladder.size(); ++r)
      limits.context = std::min(limits.context, ladder.rung(r).config().max_position_embeddings);
    limits.max_prompt_tokens = o.max_prompt_tokens;
    limits.default_max_tokens = o.default_max_tokens;
    if (o.default_max_tokens < 1) fail("server: default_max_tokens must be at least 1");
    if (o.max_body_bytes < 64) fail("server: max_body_bytes must be at least 64");
    o.generation.validate();
    if (o.generation.policy == Policy::kHold || o.generation.policy == Policy::kSmall)
      fail(
          "server: the default policy must migrate (molt, heal, reprefill, release-reprefill, "
          "auto)");
    models = models_json();
    setup();
  }

  static EngineOptions engine_options(const ServerOptions& o) {
    EngineOptions e;
    e.max_tenants = o.max_tenants;
    e.min_round_ms = o.min_round_ms;
    return e;
  }

  json rung_json(int r) const {
    const Rung& rung = ladder.rung(r);
    const Footprint& f = rung.footprint();
    const double weights = static_cast<double>(f.weight_bytes + f.heap_weight_bytes) / (1 << 20);
    SessionOptions typical = o.generation;
    const int64_t capacity = 64 + std::min(o.default_max_tokens, limits.context - 64);
    return {{"name", rung.name()},
            {"rung_index", r},
            {"precision", rung.precision()},
            {"weights_mib", weights},
            {"footprint_mib", weights + sched::own_at(ladder, r, capacity, typical)},
            {"footprint_tokens", capacity},
            {"context", rung.config().max_position_embeddings}};
  }

  json model_json(const std::string& id, json molt) const {
    return {{"id", id},
            {"object", "model"},
            {"created", 0},
            {"owned_by", "molt"},
            {"molt", std::move(molt)}};
  }

  json models_json() const {
    json rungs = json::array(), data = json::array();
    for (int r = 0; r < ladder.size(); ++r) rungs.push_back(rung_json(r));
    // One model, the ladder: which rung runs is the scheduler's call, token by token.
    data.push_back(model_json(ladder.name(), {{"rungs", rungs}, {"ladder", true}}));
    return {{"object", "list"}, {"data", data}};
  }

  std::string next_id(bool chat) {
    return fmt::format("{}-{:x}{:06x}", chat ? "chatcmpl" : "cmpl",
                       std::chrono::system_clock::now().time_since_epoch().count() & 0xffffff,
                       ids.fetch_add(1));
  }

  httplib::Server::HandlerResponse pre_route(const httplib::Request& req, httplib::Response& res) {
    t_request = Clock::now();
    t_summary.clear();
    const std::set<std::string>* m = methods_for(req.path);
    if (m == nullptr) {
      send_error(res, 404, fmt::format("no such endpoint: {}", req.path), "invalid_request_error",
                 "", "not_found");
      return httplib::Server::HandlerResponse::Handled;
    }
    const std::string method = req.method == "HEAD" ? "GET" : req.method;
    if (m->count(method) == 0) {
      std::string allow;
      for (const std::string& x : *m) allow += (allow.empty() ? "" : ", ") + x;
      res.set_header("Allow", allow);
      send_error(res, 405, fmt::format("{} takes {}, not {}", req.path, allow, req.method),
                 "invalid_request_error", "", "method_not_allowed");
      return httplib::Server::HandlerResponse::Handled;
    }
    if (!o.api_key.empty() && req.path != "/health" && !authorised(req)) {
      res.set_header("WWW-Authenticate", "Bearer");
      send_error(res, 401, "missing or incorrect API key (Authorization: Bearer KEY)",
                 "invalid_request_error", "", "invalid_api_key");
      return httplib::Server::HandlerResponse::Handled;
    }
    return httplib::Server::HandlerResponse::Unhandled;
  }

  // Bearer header; the page's GETs (which a browser cannot give headers) may pass ?api_key=.
  bool authorised(const httplib::Request& req) const {
    const std::string h = req.get_header_value("Authorization");
    if (h.rfind("Bearer ", 0) == 0) return same_key(h.substr(7), o.api_key);
    if (req.method == "GET" && req.has_param("api_key"))
      return same_key(req.get_param_value("api_key"), o.api_key);
    return false;
  }

  void completion(const httplib::Request& req, httplib::Response& res, bool chat) {
    auto p = std::make_shared<PreparedCompletion>(
        prepare_completion(ladder, parse_body(req), chat, o.generation, limits, next_id(chat)));
    std::shared_ptr<Job> job = engine.submit(p->job);
    if (!p->request.stream) {
      CompletionSummary s;
      const json r = complete(*p, *job, &s);
      send_json(res, r, s.status);
      t_summary = summary_text(*p, s);
      return;
    }
    res.set_header("Cache-Control", "no-cache");
    res.set_header("X-Accel-Buffering", "no");
    res.set_chunked_content_provider(
        "text/event-stream",
        [p, job](size_t, httplib::DataSink& sink) {
          CompletionSummary s;
          const bool ok = stream_completion(
              *p, *job, [&](std::string_view t) { return sink.write(t.data(), t.size()); }, &s);
          t_summary = summary_text(*p, s) + (ok ? "" : " client-gone");
          if (ok) sink.done();
          return ok;
        },
        [job](bool) { job->cancel(); });
  }

  static std::string summary_text(const PreparedCompletion& p, const CompletionSummary& s) {
    return fmt::format(" {} prompt={} tokens={} rungs={} migrations={} finish={}", p.job.id,
                       p.prompt_tokens, s.tokens, s.rungs.empty() ? "-" : s.rungs, s.migrations,
                       s.finish_reason.empty() ? "-" : s.finish_reason);
  }

  void events(httplib::Response& res) {
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider("text/event-stream", [this](size_t, httplib::DataSink& sink) {
      uint64_t seen = 0;
      std::string round;
      while (engine.feed().wait(&seen, &round, std::chrono::milliseconds(2000))) {
        const std::string text = round.empty() ? ": keepalive\n\n" : "data: " + round + "\n\n";
        if (!sink.write(text.data(), text.size())) return false;
      }
      sink.done();
      return true;
    });
  }

  template <class F>
  auto guarded(F f) {
    return [f](const httplib::Request& req, httplib::Response& res) {
      try {
        f(req, res);
      } catch (const ApiError& e) {
        send_error(res, e);
      } catch (const std::exception& e) {
        send_error(res, 500, fmt::format("internal error: {}", e.what()), "server_error", "",
                   "internal_error");
      }
    };
  }

  void setup() {
    svr.new_task_queue = [n = o.max_tenants] {
      return new httplib::ThreadPool(static_cast<size_t>(n) + 16);
    };
    svr.set_payload_max_length(o.max_body_bytes);
    svr.set_read_timeout(o.read_timeout_s, 0);
    svr.set_keep_alive_timeout(2);
    svr.set_tcp_nodelay(true);
    svr.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
      return pre_route(req, res);
    });
    svr.set_error_handler([](const httplib::Request&, httplib::Response& res) {
      if (!res.body.empty()) return;
      const int s = res.status;
      send_error(res, s,
                 s == 413 ? "the request body is larger than this server accepts (--max-body-bytes)"
                 : s == 408 ? "the request took too long to arrive"
                            : fmt::format("HTTP {}", s),
                 "invalid_request_error", "", s == 413 ? "request_too_large" : "");
    });
    svr.set_exception_handler(
        [](const httplib::Request&, httplib::Response& res, std::exception_ptr) {
          send_error(res, 500, "internal error", "server_error", "", "internal_error");
        });
    svr.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
      metrics_request(req, res);
    });
    svr.Get("/", [](const httplib::Request&, httplib::Response& res) {
      res.set_content(std::string(index_html()), "text/html; charset=utf-8");
    });
    svr.Get("/health", guarded([this](const httplib::Request&, httplib::Response& res) {
              json j = engine.budget_state();
              send_json(res, {{"status", "ok"},
                              {"ladder", ladder.name()},
                              {"requests", engine.live()},
                              {"budget_mib", j["budget_mib"]}});
            }));
    svr.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
      res.set_content(engine.metrics().render(), "text/plain; version=0.0.4; charset=utf-8");
    });
    svr.Get("/v1/models",
            [this](const httplib::Request&, httplib::Response& res) { send_json(res, models); });
    svr.Get("/v1/models/(.+)", guarded([this](const httplib::Request& req, httplib::Response& res) {
              for (const json& m : models["data"]) {
                if (m["id"] == req.matches[1].str()) return send_json(res, m);
              }
              throw ApiError(404,
                             fmt::format("the model '{}' does not exist", req.matches[1].str()),
                             "model", "model_not_found");
            }));
    svr.Post("/v1/chat/completions",
             guarded([this](const httplib::Request& req, httplib::Response& res) {
               completion(req, res, true);
             }));
    svr.Post("/v1/completions",
             guarded([this](const httplib::Request& req, httplib::Response& res) {
               completion(req, res, false);
             }));
    svr.Get("/v1/molt/budget", [this](const httplib::Request&, httplib::Response& res) {
      send_json(res, engine.budget_state());
    });
    svr.Post("/v1/molt/budget",
             guarded([this](const httplib::Request& req, httplib::Response& res) {
               send_json(res, engine.set_budget(parse_body(req)));
             }));
    svr.Get("/v1/molt/events",
            [this](const httplib::Request&, httplib::Response& res) { events(res); });
  }

  void metrics_request(const httplib::Request& req, const httplib::Response& res) {
    engine.metrics().request(endpoint_label(req.path), res.status);
    if (o.log == nullptr) return;
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t_request).count();
    fmt::print(o.log, "{} {} {} {:.1f} ms{}\n", req.method, req.path, res.status, ms, t_summary);
    std::fflush(o.log);
  }

  Ladder& ladder;
  ServerOptions o;
  CompletionLimits limits;
  Engine engine;
  json models;
  httplib::Server svr;
  std::atomic<uint64_t> ids{0};
  int port = -1;
};

Server::Server(Ladder& ladder, std::unique_ptr<BudgetSource> budget, ServerOptions o)
    : impl_(std::make_unique<Impl>(ladder, std::move(budget), std::move(o))) {}

Server::~Server() {
  stop("server stopped");
}

int Server::bind() {
  Impl& s = *impl_;
  const int port = s.o.port == 0 ? s.svr.bind_to_any_port(s.o.host)
                                 : (s.svr.bind_to_port(s.o.host, s.o.port) ? s.o.port : -1);
  if (port < 0)
    fail("molt serve: cannot listen on {}:{} (in use, or not an address here)", s.o.host, s.o.port);
  s.port = port;
  return port;
}

void Server::run() {
  if (impl_->port < 0) fail("molt serve: bind() before run()");
  impl_->svr.listen_after_bind();
}

void Server::stop(const std::string& why) {
  impl_->engine.stop(why);  // every stream ends with an error event first
  impl_->svr.stop();
}

int Server::port() const {
  return impl_->port;
}

}  // namespace molt::server
