#include "server/job.h"

#include "server/metrics.h"

namespace molt::server {
namespace {

JobEvent detail_event(JobEvent::Kind kind, nlohmann::json detail) {
  JobEvent j;
  j.kind = kind;
  j.detail = std::move(detail);
  return j;
}

}  // namespace

Job::Job(JobSpec spec, Metrics* metrics, std::atomic<int64_t>* live)
    : spec_(std::move(spec)),
      metrics_(metrics),
      live_(live),
      submitted_(std::chrono::steady_clock::now()) {}

std::optional<JobEvent> Job::next(std::chrono::milliseconds wait) {
  std::unique_lock lock(m_);
  if (!ready_.wait_for(lock, wait, [this] { return !queue_.empty(); })) return std::nullopt;
  JobEvent e = std::move(queue_.front());
  queue_.pop_front();
  return e;
}

bool Job::ended() const {
  std::lock_guard lock(m_);
  return ended_;
}

void Job::push(JobEvent e) {
  {
    std::lock_guard lock(m_);
    if (ended_) return;  // nothing follows a done or an error
    ended_ = e.kind == JobEvent::kDone || e.kind == JobEvent::kError;
    queue_.push_back(std::move(e));
    if (ended_) live_->fetch_sub(1, std::memory_order_acq_rel);
  }
  ready_.notify_one();
}

void Job::on_token(const TokenEvent& e) {
  if (!first_token_seen_) {
    first_token_seen_ = true;
    metrics_->first_token(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - submitted_).count());
  }
  metrics_->tokens(e.rung);
  JobEvent j;
  j.kind = JobEvent::kToken;
  j.token = e;
  push(std::move(j));
}

void Job::on_migration(const MigrationEvent& e) {
  metrics_->migration(e.from, e.to, e.policy, e.ms / 1000.0);
  push(detail_event(JobEvent::kMigration, to_json(e)));
}

void Job::on_park(const ParkEvent& e) {
  push(detail_event(JobEvent::kPark, to_json(e)));
}

void Job::on_resume(const ResumeEvent& e) {
  push(detail_event(JobEvent::kResume, to_json(e)));
}

void Job::on_heal(const HealEvent& e) {
  push(detail_event(JobEvent::kHeal, to_json(e)));
}

void Job::on_done(const DoneEvent& e) {
  metrics_->finished(e.killed);
  JobEvent j;
  j.kind = JobEvent::kDone;
  j.detail = to_json(e);
  j.done = e;
  push(std::move(j));
}

void Job::fail(int status, const std::string& message) {
  JobEvent j;
  j.kind = JobEvent::kError;
  j.status = status;
  j.error = message;
  push(std::move(j));
}

}  // namespace molt::server
