// The server's one engine thread: owns the scheduler (and so the ladder's residency), admits
// submitted jobs as tenants, runs rounds while any tenant is unfinished, cancels the tenants of
// clients that went away, and publishes each round for /v1/molt/events and /metrics. HTTP
// threads talk to it only through submit(), Job and the snapshots below.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "molt/ladder/ladder.h"
#include "molt/scheduler/scheduler.h"
#include "server/job.h"
#include "server/metrics.h"
#include "server/server_budget.h"

namespace molt::server {

struct EngineOptions {
  int64_t max_tenants = 64;  // jobs admitted or waiting; more are refused (429)
  double min_round_ms = 0;   // pacing: a round lasts at least this long (demos, tests)
  double publish_ms = 100;   // the least time between two published rounds
  double idle_publish_ms = 500;
  double parked_poll_ms = 20;  // a round in which nobody ran waits this long (or for a change)
  sched::SchedulerConfig scheduler;
};

// The latest published round, for any number of readers.
class RoundFeed {
 public:
  void publish(std::string json);
  // Waits up to `wait` for a round newer than `*seen`; false when closed. On true, *out holds
  // the newest round (rounds between are skipped: a slow reader sees the latest state).
  bool wait(uint64_t* seen, std::string* out, std::chrono::milliseconds wait);
  void close();

 private:
  std::mutex m_;
  std::condition_variable cv_;
  std::string latest_;
  uint64_t seq_ = 0;
  bool closed_ = false;
};

class Engine {
 public:
  Engine(Ladder& ladder, std::unique_ptr<BudgetSource> budget, EngineOptions o);
  ~Engine();  // stop("server stopped")
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Throws ApiError: 429 when max_tenants jobs are live, 503 once stopping.
  std::shared_ptr<Job> submit(JobSpec spec);
  // Ends every live stream with an error event (503, `why`) and joins the thread. Idempotent.
  void stop(const std::string& why);

  // POST /v1/molt/budget: {"mib": N | null} or {"rung": NAME} or {"trace": {...}}. Throws
  // ApiError (400). Returns {"budget_mib", "source"}.
  nlohmann::json set_budget(const nlohmann::json& body);
  nlohmann::json budget_state() const;

  RoundFeed& feed() { return feed_; }
  Metrics& metrics() { return metrics_; }
  int64_t live() const;

 private:
  void run();
  void admit();
  void cancel_gone();
  void one_round();
  void publish(const sched::RoundRecord* rec);
  void prune();
  void fail_all(int status, const std::string& why);

  Ladder& ladder_;
  ServerBudget budget_;
  EngineOptions o_;
  Metrics metrics_;
  RoundFeed feed_;
  std::unique_ptr<sched::Scheduler> sched_;
  std::vector<std::shared_ptr<Job>> jobs_;  // parallel to the scheduler's tenants

  mutable std::mutex m_;  // guards the fields below
  std::condition_variable wake_;
  std::vector<std::shared_ptr<Job>> pending_;
  std::atomic<int64_t> live_{0};  // jobs whose stream has not ended (Job decrements)
  bool stopping_ = false;
  bool budget_changed_ = false;  // a client set the budget since the last round
  std::string stop_reason_;
  std::vector<double> need_mib_;  // per rung: weights + every admitted tenant's own (last round)
  double last_budget_mib_;
  double last_accounted_mib_ = 0;

  double last_rss_mib_ = 0;  // engine thread: RSS at the last publish (≤ ~10 reads a second)
  std::chrono::steady_clock::time_point t0_, last_publish_;
  std::thread thread_;
};

}  // namespace molt::server
