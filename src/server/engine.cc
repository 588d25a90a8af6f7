// The engine thread's loop: admit, cancel the departed, one round, publish, prune.
#include "server/engine.h"

#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "molt/common/error.h"
#include "molt/ladder/process_memory.h"
#include "server/api_error.h"

namespace molt::server {
namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

json finite_or_null(double x) {
  return std::isfinite(x) ? json(x) : json(nullptr);
}

}  // namespace

void RoundFeed::publish(std::string j) {
  {
    std::lock_guard lock(m_);
    latest_ = std::move(j);
    ++seq_;
  }
  cv_.notify_all();
}

bool RoundFeed::wait(uint64_t* seen, std::string* out, std::chrono::milliseconds wait) {
  std::unique_lock lock(m_);
  cv_.wait_for(lock, wait, [&] { return closed_ || seq_ > *seen; });
  if (closed_) return false;
  if (seq_ > *seen) {
    *seen = seq_;
    *out = latest_;
  } else {
    out->clear();
  }
  return true;
}

void RoundFeed::close() {
  {
    std::lock_guard lock(m_);
    closed_ = true;
  }
  cv_.notify_all();
}

Engine::Engine(Ladder& ladder, std::unique_ptr<BudgetSource> budget, EngineOptions o)
    : ladder_(ladder),
      budget_(std::move(budget)),
      o_(o),
      sched_(std::make_unique<sched::Scheduler>(ladder_, &budget_, o_.scheduler)),
      last_budget_mib_(std::numeric_limits<double>::infinity()),
      t0_(Clock::now()),
      last_publish_(t0_) {
  if (o_.max_tenants < 1) fail("server: max_tenants must be at least 1 (got {})", o_.max_tenants);
  for (int r = 0; r < ladder_.size(); ++r) {
    const Footprint& f = ladder_.rung(r).footprint();
    need_mib_.push_back(static_cast<double>(f.weight_bytes + f.heap_weight_bytes) / (1 << 20));
  }
  thread_ = std::thread([this] { run(); });
}

Engine::~Engine() {
  stop("server stopped");
}

std::shared_ptr<Job> Engine::submit(JobSpec spec) {
  auto job = std::make_shared<Job>(std::move(spec), &metrics_, &live_);
  {
    std::lock_guard lock(m_);
    if (stopping_)
      throw ApiError(503, "the server is shutting down", "", "unavailable", "server_error");
    if (live_.load() >= o_.max_tenants) {
      throw ApiError(
          429,
          fmt::format("{} requests are already being served (--max-tenants); retry later",
                      live_.load()),
          "", "rate_limit_exceeded", "rate_limit_error");
    }
    ++live_;
    pending_.push_back(job);
  }
  wake_.notify_one();
  return job;
}

int64_t Engine::live() const {
  return live_.load();
}

void Engine::stop(const std::string& why) {
  {
    std::lock_guard lock(m_);
    if (!stopping_) {
      stopping_ = true;
      stop_reason_ = why;
    }
  }
  wake_.notify_one();
  if (thread_.joinable()) thread_.join();
}

void Engine::run() {
  while (true) {
    {
      std::unique_lock lock(m_);
      if (!stopping_ && pending_.empty() && jobs_.empty()) {
        const auto wait = std::chrono::duration<double, std::milli>(o_.idle_publish_ms);
        wake_.wait_for(lock, wait, [this] { return stopping_ || !pending_.empty(); });
      }
      if (stopping_) break;
    }
    admit();
    cancel_gone();
    if (!jobs_.empty()) {
      one_round();
    } else if (ms_between(last_publish_, Clock::now()) >= o_.idle_publish_ms) {
      publish(nullptr);
    }
    prune();
  }
  fail_all(503, stop_reason_);
  feed_.close();
}

void Engine::admit() {
  std::vector<std::shared_ptr<Job>> jobs;
  {
    std::lock_guard lock(m_);
    jobs.swap(pending_);
  }
  for (auto& job : jobs) {
    sched::TenantSpec t;
    t.name = job->id();
    t.priority = job->spec().priority;
    t.prompt = job->spec().prompt;
    t.options = job->spec().options;
    t.arrival = sched_->rounds();
    t.sink = job.get();
    try {
      sched_->add(std::move(t));
    } catch (const Error& e) {  // the HTTP side checks first; this is the last word
      job->fail(400, e.what());
      continue;
    }
    jobs_.push_back(std::move(job));
  }
}

void Engine::cancel_gone() {
  for (size_t i = 0; i < jobs_.size(); ++i) {
    if (jobs_[i]->cancelled()) sched_->cancel(i);
  }
}

void Engine::one_round() {
  const Clock::time_point t = Clock::now();
  sched::RoundRecord rec;
  try {
    rec = sched_->round();
  } catch (const std::exception& e) {
    // The scheduler's state cannot be trusted after a failed round: every stream ends with the
    // error, and a fresh scheduler serves what comes next.
    fail_all(500, fmt::format("internal error in a scheduler round: {}", e.what()));
    sched_ = std::make_unique<sched::Scheduler>(ladder_, &budget_, o_.scheduler);
    ladder_.release_unused();
    return;
  }
  const sched::PlanInput view = sched_->view(rec.budget_mib);
  std::vector<double> need;
  for (size_t r = 0; r < view.rungs.size(); ++r) {
    double n = view.rungs[r].loaded_mib;
    for (const sched::TenantView& v : view.tenants) n += v.own_mib[r];
    need.push_back(n);
  }
  std::map<std::string, int64_t> states;
  for (const sched::TenantRound& tr : rec.tenants) ++states[sched::state_name(tr.state)];
  {
    std::lock_guard lock(m_);
    need_mib_ = std::move(need);
    last_budget_mib_ = rec.budget_mib;
    last_accounted_mib_ = rec.accounted_mib;
  }
  if (ms_between(last_publish_, Clock::now()) >= o_.publish_ms || sched_->done()) publish(&rec);
  metrics_.round(rec.budget_mib, rec.accounted_mib, last_rss_mib_, states);
  // Nobody ran (every tenant suspended or waiting for room): wait for a budget change, a new
  // request or the poll interval instead of spinning.
  const bool ran = std::any_of(
      rec.tenants.begin(), rec.tenants.end(),
      [](const sched::TenantRound& r) { return r.state == sched::TenantState::kRunning; });
  double left = o_.min_round_ms - ms_between(t, Clock::now());
  if (!ran) left = std::max(left, o_.parked_poll_ms);
  if (left <= 0) return;
  std::unique_lock lock(m_);
  wake_.wait_for(lock, std::chrono::duration<double, std::milli>(left),
                 [&] { return stopping_ || (!ran && (!pending_.empty() || budget_changed_)); });
  budget_changed_ = false;
}

void Engine::publish(const sched::RoundRecord* rec) {
  last_publish_ = Clock::now();
  json j;
  j["round"] = sched_->rounds();
  j["t_ms"] = ms_between(t0_, last_publish_);
  {
    std::lock_guard lock(m_);
    j["budget_mib"] = finite_or_null(rec ? rec->budget_mib : last_budget_mib_);
    j["accounted_mib"] = rec ? rec->accounted_mib : last_accounted_mib_;
  }
  last_rss_mib_ = to_mib(read_process_memory().rss_bytes);  // read here, not every round
  j["rss_mib"] = last_rss_mib_;
  j["lever"] = sched::lever_name(rec ? rec->lever : sched::Lever::kNone);
  j["source"] = budget_.describe();
  json tenants = json::array();
  for (size_t i = 0; i < jobs_.size() && i < sched_->size(); ++i) {
    const sched::TenantStatus& s = sched_->tenant(i);
    tenants.push_back({{"id", jobs_[i]->id()},
                       {"state", sched::state_name(s.state)},
                       {"rung", s.rung >= 0 ? json(ladder_.rung(s.rung).name()) : json(nullptr)},
                       {"tokens", s.tokens()},
                       {"priority", sched::priority_name(s.priority)}});
  }
  j["tenants"] = std::move(tenants);
  feed_.publish(j.dump());
}

void Engine::prune() {
  size_t gone = 0;
  for (size_t i = 0; i < jobs_.size(); ++i) {
    if (sched_->tenant(i).state == sched::TenantState::kFinished) {
      jobs_[i].reset();
      ++gone;
    }
  }
  if (gone == 0) return;
  sched_->prune();
  std::erase(jobs_, nullptr);
}

void Engine::fail_all(int status, const std::string& why) {
  std::vector<std::shared_ptr<Job>> pending;
  {
    std::lock_guard lock(m_);
    pending.swap(pending_);
  }
  for (auto& j : pending) j->fail(status, why);
  for (auto& j : jobs_) j->fail(status, why);
  jobs_.clear();
}

json Engine::budget_state() const {
  std::lock_guard lock(m_);
  return {{"budget_mib", finite_or_null(last_budget_mib_)}, {"source", budget_.describe()}};
}

json Engine::set_budget(const json& body) {
  if (!body.is_object() || body.size() != 1 ||
      !(body.contains("mib") || body.contains("rung") || body.contains("trace"))) {
    throw ApiError(
        400, "the body must be one of {\"mib\": N | null}, {\"rung\": NAME}, {\"trace\": {...}}");
  }
  if (body.contains("mib")) {
    const json& v = body["mib"];
    if (v.is_null()) {
      budget_.reset();
      const double now = budget_.peek();
      std::lock_guard lock(m_);
      last_budget_mib_ = now;
    } else if (!v.is_number() || !(v.get<double>() >= 0) || !std::isfinite(v.get<double>())) {
      throw ApiError(400, "'mib' must be a finite number >= 0 or null", "mib");
    } else {
      budget_.set_fixed(v.get<double>());
      std::lock_guard lock(m_);
      last_budget_mib_ = v.get<double>();
    }
  } else if (body.contains("rung")) {
    const json& v = body["rung"];
    if (!v.is_string()) throw ApiError(400, "'rung' must be a rung's name", "rung", "invalid_type");
    int r = -1;
    for (int i = 0; i < ladder_.size(); ++i) {
      if (ladder_.rung(i).name() == v.get<std::string>()) r = i;
    }
    if (r < 0) throw ApiError(400, fmt::format("no rung named '{}'", v.get<std::string>()), "rung");
    std::lock_guard lock(m_);
    // What every tenant needs on r, with half the way to the next larger need above it as room.
    const double need = need_mib_[static_cast<size_t>(r)];
    double above = std::numeric_limits<double>::infinity();
    for (int i = 0; i < r; ++i) {
      if (need_mib_[static_cast<size_t>(i)] > need)
        above = std::min(above, need_mib_[static_cast<size_t>(i)]);
    }
    const double mib = need + std::min(0.5, std::isfinite(above) ? (above - need) / 2 : 0.5);
    budget_.set_fixed(mib);
    last_budget_mib_ = mib;
  } else {
    try {
      budget_.set_trace(PressureTrace::parse(body["trace"], "request field 'trace'"));
    } catch (const Error& e) {
      throw ApiError(400, e.what(), "trace");
    }
  }
  {
    std::lock_guard lock(m_);
    budget_changed_ = true;
  }
  wake_.notify_one();
  return budget_state();
}

}  // namespace molt::server
