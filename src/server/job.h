// One request inside the server: the scheduler's tenant on the engine thread, a queue of events
// read by the HTTP thread that answers it. The engine thread writes (as the tenant's EventSink);
// exactly one HTTP thread reads.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "molt/runtime/events.h"
#include "molt/runtime/options.h"
#include "molt/scheduler/planner.h"

namespace molt::server {

class Metrics;

struct JobSpec {
  std::string id;  // "chatcmpl-…" / "cmpl-…"
  sched::Priority priority = sched::Priority::kForeground;
  std::vector<int32_t> prompt;
  SessionOptions options;
};

// What the HTTP side reads, in order. kDone and kError end the stream.
struct JobEvent {
  enum Kind { kToken, kMigration, kHeal, kPark, kResume, kDone, kError } kind = kToken;
  TokenEvent token;
  nlohmann::json detail;  // to_json of the event (kMigration … kDone)
  DoneEvent done;
  int status = 500;  // kError: the HTTP status it stands for
  std::string error;
};

class Job : public EventSink {
 public:
  // `live` counts streams not yet ended; the job takes itself off it when it ends.
  Job(JobSpec spec, Metrics* metrics, std::atomic<int64_t>* live);
  const JobSpec& spec() const { return spec_; }
  const std::string& id() const { return spec_.id; }

  // HTTP thread: the next event, or nothing after `wait`.
  std::optional<JobEvent> next(std::chrono::milliseconds wait);
  // HTTP thread: the client went away or has all it wants (a stop sequence); the engine cancels
  // the tenant at its next round.
  void cancel() { cancelled_.store(true, std::memory_order_release); }
  bool cancelled() const { return cancelled_.load(std::memory_order_acquire); }

  // Engine thread.
  void on_token(const TokenEvent& e) override;
  void on_migration(const MigrationEvent& e) override;
  void on_park(const ParkEvent& e) override;
  void on_resume(const ResumeEvent& e) override;
  void on_heal(const HealEvent& e) override;
  void on_done(const DoneEvent& e) override;
  void fail(int status, const std::string& message);
  bool ended() const;

 private:
  void push(JobEvent e);
  JobSpec spec_;
  Metrics* metrics_;
  std::atomic<int64_t>* live_;
  std::chrono::steady_clock::time_point submitted_;
  bool first_token_seen_ = false;  // engine thread only
  std::atomic<bool> cancelled_{false};
  mutable std::mutex m_;
  std::condition_variable ready_;
  std::deque<JobEvent> queue_;
  bool ended_ = false;
};

}  // namespace molt::server
