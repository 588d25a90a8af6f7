// molt serve: the OpenAI-compatible server (src/server/, docs/SERVER.md).
#include <fmt/core.h>
#include <pthread.h>

#include <atomic>
#include <csignal>
#include <memory>
#include <thread>

#include "command.h"
#include "molt/common/error.h"
#include "molt/kernels/threads.h"
#include "molt/pressure/budget_spec.h"
#include "molt/server/server.h"

namespace molt::cli {
namespace {

struct ServeArgs {
  std::string ladder, model, trace, policy = "molt";
  bool live = false;
  double budget_mib = -1;
  int threads = 0;
  server::ServerOptions o;
};

std::string budget_spec(const ServeArgs& a) {
  const int given = (a.trace.empty() ? 0 : 1) + (a.live ? 1 : 0) + (a.budget_mib >= 0 ? 1 : 0);
  if (given > 1) fail("give one of --trace FILE, --live, --budget-mib N");
  if (!a.trace.empty()) return "trace:" + a.trace;
  if (a.live) return "live";
  if (a.budget_mib >= 0) return fmt::format("fixed:{}", a.budget_mib);
  return "none";
}

void run(ServeArgs& a) {
  if (a.model.empty() == a.ladder.empty())
    fail("give --ladder FILE (an elastic ladder) or --model DIR (one model), not both");
  set_num_threads(a.threads);
  std::vector<std::string> notes;
  std::unique_ptr<BudgetSource> budget = open_budget_source(budget_spec(a), &notes);
  for (const std::string& n : notes) fmt::print(stderr, "live: {}\n", n);
  auto ladder = a.ladder.empty() ? Ladder::single(a.model, {}) : Ladder::open(a.ladder);
  a.o.generation.policy = parse_policy(a.policy);

  // SIGINT/SIGTERM go to one waiting thread (every other thread inherits the blocked mask), which
  // stops the server: streams end with an error event, run() returns, the process exits 0.
  std::signal(SIGPIPE, SIG_IGN);
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  server::Server s(*ladder, std::move(budget), a.o);
  const int port = s.bind();
  fmt::print("molt serve: listening on http://{}:{}\n", a.o.host, port);
  std::fflush(stdout);
  fmt::print(stderr, "molt serve: ladder {} ({} rungs), budget {}, policy {}\n", ladder->name(),
             ladder->size(), budget_spec(a), a.policy);
  // Joined, not detached: run() returns once the listener stops, while stop() may still be
  // inside the server; destroying the server under it crashed at shutdown (found by TSan).
  std::atomic<bool> signalled{false};
  std::thread stopper([&s, &signalled, stop_signals] {
    int sig = 0;
    sigwait(&stop_signals, &sig);
    if (signalled.exchange(true)) return;  // our own wake-up after run() returned
    fmt::print(stderr, "molt serve: {} received, stopping\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
    s.stop(sig == SIGINT ? "the server was interrupted (SIGINT)"
                         : "the server is shutting down (SIGTERM)");
  });
  s.run();
  // SIGTERM is blocked in the stopper and only ever taken by its sigwait: this wakes it, it
  // does not kill it.
  if (!signalled.exchange(true))
    pthread_kill(stopper.native_handle(), SIGTERM);  // NOLINT(bugprone-bad-signal-to-kill-thread)
  stopper.join();
  fmt::print(stderr, "molt serve: stopped\n");
}

const bool registered = register_command([](CLI::App& root) {
  auto a = std::make_shared<ServeArgs>();
  CLI::App* s = root.add_subcommand("serve", "OpenAI-compatible HTTP server (docs/SERVER.md)");
  s->add_option("--ladder", a->ladder, "ladder manifest");
  s->add_option("--model", a->model, "one checkpoint directory (a one-rung ladder)");
  s->add_option("--host", a->o.host, "address to listen on")->capture_default_str();
  s->add_option("--port", a->o.port, "port (0: any free port; the first stdout line says which)")
      ->check(CLI::Range(0, 65535))
      ->capture_default_str();
  s->add_option("--trace", a->trace, "pressure trace (unit tokens counts scheduler rounds)");
  s->add_flag("--live", a->live, "this machine's memory signals (cgroup, PSI, MemAvailable)");
  s->add_option("--budget-mib", a->budget_mib, "a fixed budget in MiB")
      ->check(CLI::NonNegativeNumber);
  s->add_option("--api-key", a->o.api_key, "require Authorization: Bearer KEY (not on /health)");
  s->add_option("--max-tenants", a->o.max_tenants, "requests served at once (more get 429)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  s->add_option("--max-prompt-tokens", a->o.max_prompt_tokens, "longest prompt (0: the context)")
      ->check(CLI::NonNegativeNumber);
  s->add_option("--max-body-bytes", a->o.max_body_bytes, "largest request body (413 beyond)")
      ->check(CLI::Range(size_t{64}, size_t{1} << 30))
      ->capture_default_str();
  s->add_option("--default-max-tokens", a->o.default_max_tokens,
                "answer length when a request names none")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  s->add_option("--policy", a->policy, "default migration policy (a request's molt.policy wins)")
      ->capture_default_str();
  s->add_option("--min-round-ms", a->o.min_round_ms,
                "pace scheduler rounds to at least this many ms (demos on tiny models)")
      ->check(CLI::NonNegativeNumber);
  s->add_option("--read-timeout", a->o.read_timeout_s, "seconds a client may send nothing")
      ->check(CLI::Range(1, 3600))
      ->capture_default_str();
  s->add_option("--threads", a->threads, "threads (0 = all cores)")->check(CLI::NonNegativeNumber);
  s->callback([a] { run(*a); });
});

}  // namespace
}  // namespace molt::cli
