// The serve benchmark: an in-process server on a free loopback port, client threads, a clock.
#include "molt/server/bench_serve.h"

#include <fmt/core.h>
#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <mutex>
#include <thread>

#include "molt/common/error.h"
#include "molt/kernels/threads.h"
#include "molt/ladder/process_memory.h"
#include "molt/server/server.h"

namespace molt::server {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

struct Totals {
  std::mutex m;
  int64_t requests = 0, tokens = 0, errors = 0, migrations = 0;
  std::vector<double> ttft_ms;
  std::vector<std::string> messages;  // the first few errors
  void error(const std::string& why) {
    std::lock_guard lock(m);
    ++errors;
    if (messages.size() < 8) messages.push_back(why);
  }
};

// One streamed chat completion, checked as it arrives. Returns false when it failed.
bool one_stream(httplib::Client& c, const json& body, Totals& t) {
  const Clock::time_point t0 = Clock::now();
  std::string buf;
  int64_t next = 0, moves = 0;
  double ttft = -1;
  bool done = false, marker = false, bad = false;
  std::string why;
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/chat/completions";
  req.set_header("Content-Type", "application/json");
  req.body = body.dump();
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    buf.append(data, n);
    for (size_t end; (end = buf.find("\n\n")) != std::string::npos;) {
      const std::string ev = buf.substr(0, end);
      buf.erase(0, end + 2);
      if (ev.rfind("data: ", 0) != 0) continue;
      if (ev == "data: [DONE]") {
        marker = true;
        continue;
      }
      const json j = json::parse(ev.substr(6), nullptr, false);
      if (j.is_discarded() || j.contains("error")) {
        bad = true;
        why = j.is_discarded() ? "a chunk is not JSON" : j["error"].value("message", "error");
        return false;
      }
      if (j["choices"].empty()) continue;
      const json& m = j["molt"];
      if (j["choices"][0]["delta"].contains("content")) {
        if (ttft < 0) ttft = seconds_since(t0) * 1000;
        if (m.value("index", int64_t{-1}) != next) {
          bad = true;
          why = fmt::format("token index {} after {}", m.value("index", int64_t{-1}), next);
          return false;
        }
        ++next;
      }
      if (m.contains("migration")) ++moves;
      if (m.contains("done")) {
        done = true;
        if (m["done"].value("killed", true)) {
          bad = true;
          why = "killed";
        }
      }
    }
    return true;
  };
  auto res = c.send(req);
  if (!res || res->status != 200) {
    t.error(res ? fmt::format("HTTP {}", res->status)
                : "no response: " + httplib::to_string(res.error()));
    return false;
  }
  if (bad || !done || !marker) {
    t.error(bad ? why
                : fmt::format("the stream ended without {} (after {} tokens)",
                              done ? "[DONE]" : "a done chunk", next));
    return false;
  }
  std::lock_guard lock(t.m);
  ++t.requests;
  t.tokens += next;
  t.migrations += moves;
  t.ttft_ms.push_back(ttft);
  return true;
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())));
  return v[i];
}

// The value of an unlabelled sample `name` in Prometheus text.
double metric(const std::string& text, const std::string& name) {
  const size_t at = text.find("\n" + name + " ");
  if (at == std::string::npos) return NAN;
  return std::stod(text.substr(at + name.size() + 2));
}

}  // namespace

json run_serve_bench(const ServeBenchOptions& o) {
  if (o.streams < 1 || o.seconds <= 0 || o.max_tokens < 1)
    fail("bench serve: --streams, --seconds and --max-tokens must be positive");
  set_num_threads(o.threads);
  auto ladder = Ladder::open(o.ladder);
  const std::string cut =
      o.cut_rung.empty() ? ladder->rung(std::min(1, ladder->size() - 1)).name() : o.cut_rung;
  ServerOptions so;
  so.port = 0;
  so.log = nullptr;
  so.max_tenants = o.streams;
  so.min_round_ms = o.min_round_ms;
  Server server(*ladder, nullptr, so);
  const int port = server.bind();
  std::thread serving([&] { server.run(); });

  Totals t;
  std::atomic<bool> stop{false};
  const Clock::time_point t0 = Clock::now();
  std::vector<std::thread> clients;
  clients.reserve(static_cast<size_t>(o.streams));
  for (int i = 0; i < o.streams; ++i) {
    clients.emplace_back([&, i] {
      httplib::Client c("127.0.0.1", port);
      c.set_read_timeout(60, 0);
      json body = {
          {"model", ladder->name()},
          {"messages",
           {{{"role", "user"}, {"content", "The driver will be able to use the driver to do it"}}}},
          {"max_tokens", o.max_tokens},
          {"temperature", 0.7},
          {"stream", true},
          // Every answer runs to max_tokens, as vLLM's serving benchmark does: the tiny ladder
          // ends a chat turn after a few tokens, and the load is meant to be open streams.
          {"ignore_eos", true},
          {"molt", {{"priority", i % 4 == 0 ? "foreground" : "background"}}}};
      for (int64_t k = 0; !stop.load(); ++k) {
        body["seed"] = i * 100000 + k;
        one_stream(c, body, t);
      }
    });
  }
  httplib::Client control("127.0.0.1", port);
  json rss = json::array();
  const double rss0 = to_mib(read_process_memory().rss_bytes);
  bool cut_done = false, restored = false;
  double minute_1 = NAN;
  // Scheduler rounds while the cut held: none means the run measured no squeeze at all (a slow
  // machine still prefilling, e.g. under emulation), which the result then says.
  const auto rounds_now = [&] {
    const auto m = control.Get("/metrics");
    return m ? metric(m->body, "molt_rounds_total") : NAN;
  };
  double rounds_at_cut = NAN, rounds_at_restore = NAN;
  while (seconds_since(t0) < o.seconds) {
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
    const double s = seconds_since(t0);
    if (!cut_done && s >= o.cut_at * o.seconds) {
      cut_done = true;
      rounds_at_cut = rounds_now();
      auto r = control.Post("/v1/molt/budget", json({{"rung", cut}}).dump(), "application/json");
      if (!r || r->status != 200) t.error("the budget cut was refused");
    }
    if (!restored && o.restore_at < 1 && s >= o.restore_at * o.seconds) {
      restored = true;
      rounds_at_restore = rounds_now();
      control.Post("/v1/molt/budget", R"({"mib": null})", "application/json");
    }
    if (static_cast<int64_t>(s * 4) % 4 == 0) {  // one RSS sample a second
      const double now = to_mib(read_process_memory().rss_bytes);
      rss.push_back({{"t_s", s}, {"rss_mib", now}});
      if (std::isnan(minute_1) && s >= 60) minute_1 = now;
      if (o.progress) {
        std::lock_guard lock(t.m);
        fmt::print(stderr, "\r  {:6.1f} s  {} requests  {} tokens  {} errors  RSS {:.1f} MiB   ", s,
                   t.requests, t.tokens, t.errors, now);
      }
    }
  }
  stop = true;
  for (auto& c : clients) c.join();
  if (o.progress) fmt::print(stderr, "\n");
  const double elapsed = seconds_since(t0);
  const std::string metrics = control.Get("/metrics")->body;
  if (!restored) rounds_at_restore = metric(metrics, "molt_rounds_total");
  // The last sample under load ends the drift; once the clients stop, the caches are gone and
  // RSS falls (reported apart).
  const double end_rss = rss.empty() ? rss0 : rss.back()["rss_mib"].get<double>();
  const double after_stop = to_mib(read_process_memory().rss_bytes);
  server.stop();
  serving.join();

  const double base =
      std::isnan(minute_1) ? (rss.empty() ? rss0 : rss[0]["rss_mib"].get<double>()) : minute_1;
  json r;
  r["streams"] = o.streams;
  r["seconds"] = elapsed;
  r["max_tokens"] = o.max_tokens;
  r["cut_to"] = cut;
  r["requests"] = t.requests;
  r["tokens"] = t.tokens;
  r["req_s"] = static_cast<double>(t.requests) / elapsed;
  r["tok_s"] = static_cast<double>(t.tokens) / elapsed;
  r["ttft_ms"] = {{"p50", percentile(t.ttft_ms, 0.5)},
                  {"p99", percentile(t.ttft_ms, 0.99)},
                  {"max", percentile(t.ttft_ms, 1.0)}};
  r["errors"] = t.errors;
  r["error_messages"] = t.messages;
  r["migrations"] = t.migrations;
  r["rounds"] = metric(metrics, "molt_rounds_total");
  r["cut_rounds"] = rounds_at_restore - rounds_at_cut;
  // −Inf (no round under a finite budget) has no JSON number: null.
  const double overshoot = metric(metrics, "molt_max_overshoot_mib");
  r["max_overshoot_mib"] = std::isfinite(overshoot) ? json(overshoot) : json(nullptr);
  r["killed"] = metric(metrics, "molt_generations_killed_total");
  r["rss_mib"] = {{"start", rss0},
                  {"minute_1", std::isnan(minute_1) ? json(nullptr) : json(minute_1)},
                  {"end", end_rss},
                  {"after_stop", after_stop},
                  {"samples", rss}};
  r["rss_drift"] = (end_rss - base) / base;
  r["rss_drift_from"] = std::isnan(minute_1) ? "first sample" : "minute 1";
  return r;
}

std::string serve_bench_table(const json& r) {
  const json& over = r["max_overshoot_mib"];
  const std::string overshoot = over.is_number()
                                    ? fmt::format("{:.2f} MiB", over.get<double>())
                                    : "none: no scheduler round ran under a finite budget";
  const double cut_rounds = r.contains("cut_rounds") && r["cut_rounds"].is_number()
                                ? r["cut_rounds"].get<double>()
                                : 0.0;  // NaN (no /metrics answer) is written as null
  const std::string cut_note =
      cut_rounds > 0 ? fmt::format("{:.0f} scheduler rounds under the cut", cut_rounds)
                     : "no scheduler round ran under the cut: the squeeze went unmeasured, run "
                       "longer (--seconds)";
  return fmt::format(
      "molt bench serve: {} streams for {:.0f} s, squeezed to {} mid-run ({})\n"
      "  requests      {} ({:.1f}/s)\n"
      "  tokens        {} ({:.0f}/s)\n"
      "  TTFT          p50 {:.1f} ms, p99 {:.1f} ms, max {:.1f} ms\n"
      "  errors        {}\n"
      "  migrations    {} (over {} scheduler rounds; killed {})\n"
      "  max overshoot {}\n"
      "  RSS           {:.1f} MiB at start, {:.1f} at the end under load: drift {:+.2f}% (from "
      "{})\n",
      r["streams"].get<int>(), r["seconds"].get<double>(), r["cut_to"].get<std::string>(), cut_note,
      r["requests"].get<int64_t>(), r["req_s"].get<double>(), r["tokens"].get<int64_t>(),
      r["tok_s"].get<double>(), r["ttft_ms"]["p50"].get<double>(),
      r["ttft_ms"]["p99"].get<double>(), r["ttft_ms"]["max"].get<double>(),
      r["errors"].get<int64_t>(), r["migrations"].get<int64_t>(), r["rounds"].get<double>(),
      r["killed"].get<double>(), overshoot, r["rss_mib"]["start"].get<double>(),
      r["rss_mib"]["end"].get<double>(), 100 * r["rss_drift"].get<double>(),
      r["rss_drift_from"].get<std::string>());
}

}  // namespace molt::server
