#include "server/metrics.h"

#include <fmt/core.h>

#include <cmath>
#include <limits>
#include <tuple>

namespace molt::server {
namespace {

// Prometheus' number syntax: +Inf, -Inf and NaN spelled out.
std::string num(double x) {
  if (std::isnan(x)) return "NaN";
  if (std::isinf(x)) return x > 0 ? "+Inf" : "-Inf";
  return fmt::format("{}", x);
}

std::string escape(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

void header(std::string& out, const char* name, const char* type, const char* help) {
  out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
}

void histogram(std::string& out, const char* name, const char* help, const Histogram& h) {
  header(out, name, "histogram", help);
  uint64_t cum = 0;
  for (size_t i = 0; i < h.bounds.size(); ++i) {
    cum += h.counts[i];
    out += fmt::format("{}_bucket{{le=\"{}\"}} {}\n", name, num(h.bounds[i]), cum);
  }
  out += fmt::format("{}_bucket{{le=\"+Inf\"}} {}\n{}_sum {}\n{}_count {}\n", name, h.count, name,
                     num(h.sum), name, h.count);
}

}  // namespace

Histogram::Histogram(std::vector<double> b) : bounds(std::move(b)), counts(bounds.size(), 0) {}

void Histogram::observe(double x) {
  for (size_t i = 0; i < bounds.size(); ++i) {
    if (x <= bounds[i]) {
      ++counts[i];
      break;
    }
  }
  ++count;
  sum += x;
}

Metrics::Metrics()
    : ttft_({0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}),
      seam_({0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5}),
      budget_mib_(std::numeric_limits<double>::infinity()),
      max_overshoot_mib_(-std::numeric_limits<double>::infinity()) {}

void Metrics::request(const std::string& endpoint, int status) {
  std::lock_guard lock(m_);
  ++requests_[{endpoint, status}];
}

void Metrics::tokens(const std::string& rung, int64_t n) {
  std::lock_guard lock(m_);
  tokens_[rung] += static_cast<uint64_t>(n);
}

void Metrics::migration(const std::string& from, const std::string& to, const std::string& policy,
                        double seam_seconds) {
  std::lock_guard lock(m_);
  ++migrations_[{from, to, policy}];
  seam_.observe(seam_seconds);
}

void Metrics::first_token(double seconds) {
  std::lock_guard lock(m_);
  ttft_.observe(seconds);
}

void Metrics::round(double budget_mib, double accounted_mib, double rss_mib,
                    const std::map<std::string, int64_t>& tenants_by_state) {
  std::lock_guard lock(m_);
  ++rounds_;
  budget_mib_ = budget_mib;
  accounted_mib_ = accounted_mib;
  rss_mib_ = rss_mib;
  tenants_ = tenants_by_state;
  if (std::isfinite(budget_mib))
    max_overshoot_mib_ = std::max(max_overshoot_mib_, accounted_mib - budget_mib);
}

void Metrics::finished(bool killed) {
  std::lock_guard lock(m_);
  ++finished_;
  if (killed) ++killed_;
}

std::string Metrics::render() const {
  std::lock_guard lock(m_);
  std::string out;
  header(out, "molt_requests_total", "counter", "HTTP requests by endpoint and status.");
  for (const auto& [k, n] : requests_) {
    out += fmt::format("molt_requests_total{{endpoint=\"{}\",status=\"{}\"}} {}\n", escape(k.first),
                       k.second, n);
  }
  header(out, "molt_tokens_total", "counter",
         "Answer tokens produced, by the rung that produced them.");
  for (const auto& [rung, n] : tokens_)
    out += fmt::format("molt_tokens_total{{rung=\"{}\"}} {}\n", escape(rung), n);
  header(out, "molt_migrations_total", "counter",
         "Rung changes, by route and the policy that ran.");
  for (const auto& [k, n] : migrations_) {
    out += fmt::format("molt_migrations_total{{from=\"{}\",to=\"{}\",policy=\"{}\"}} {}\n",
                       escape(std::get<0>(k)), escape(std::get<1>(k)), escape(std::get<2>(k)), n);
  }
  header(out, "molt_generations_finished_total", "counter", "Generations finished.");
  out += fmt::format("molt_generations_finished_total {}\n", finished_);
  header(out, "molt_generations_killed_total", "counter", "Generations killed (molt kills none).");
  out += fmt::format("molt_generations_killed_total {}\n", killed_);
  header(out, "molt_rounds_total", "counter", "Scheduler rounds.");
  out += fmt::format("molt_rounds_total {}\n", rounds_);
  header(out, "molt_budget_mib", "gauge", "The memory budget at the last round (+Inf: no limit).");
  out += fmt::format("molt_budget_mib {}\n", num(budget_mib_));
  header(out, "molt_accounted_mib", "gauge",
         "Resident rungs' weights plus every admitted tenant's cache.");
  out += fmt::format("molt_accounted_mib {}\n", num(accounted_mib_));
  header(out, "molt_rss_mib", "gauge", "The process's resident set size.");
  out += fmt::format("molt_rss_mib {}\n", num(rss_mib_));
  header(out, "molt_max_overshoot_mib", "gauge",
         "The largest accounted − budget over rounds with a finite budget (≤ 0: never over).");
  out += fmt::format("molt_max_overshoot_mib {}\n", num(max_overshoot_mib_));
  header(out, "molt_tenants", "gauge", "Tenants by state.");
  for (const char* s : {"waiting", "running", "suspended"}) {
    auto it = tenants_.find(s);
    out +=
        fmt::format("molt_tenants{{state=\"{}\"}} {}\n", s, it == tenants_.end() ? 0 : it->second);
  }
  histogram(out, "molt_time_to_first_token_seconds", "From request admission to its first token.",
            ttft_);
  histogram(out, "molt_seam_stall_seconds", "Wall time of each migration's seam.", seam_);
  return out;
}

}  // namespace molt::server
