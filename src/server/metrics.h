// The server's counters, gauges and histograms, rendered in Prometheus' text format
// (https://prometheus.io/docs/instrumenting/exposition_formats/). Updated from the HTTP threads
// and the engine thread; one mutex, held only to add a number or to render.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace molt::server {

// Cumulative buckets with fixed upper bounds (seconds), as Prometheus histograms are.
struct Histogram {
  explicit Histogram(std::vector<double> bounds);
  void observe(double x);
  std::vector<double> bounds;
  std::vector<uint64_t> counts;  // per bound, not cumulative; +Inf is count − their sum
  uint64_t count = 0;
  double sum = 0;
};

class Metrics {
 public:
  Metrics();
  void request(const std::string& endpoint, int status);
  void tokens(const std::string& rung, int64_t n = 1);
  void migration(const std::string& from, const std::string& to, const std::string& policy,
                 double seam_seconds);
  void first_token(double seconds);
  void round(double budget_mib, double accounted_mib, double rss_mib,
             const std::map<std::string, int64_t>& tenants_by_state);
  void finished(bool killed);
  std::string render() const;

 private:
  mutable std::mutex m_;
  std::map<std::pair<std::string, int>, uint64_t> requests_;
  std::map<std::string, uint64_t> tokens_;
  std::map<std::tuple<std::string, std::string, std::string>, uint64_t> migrations_;
  std::map<std::string, int64_t> tenants_;
  Histogram ttft_, seam_;
  double budget_mib_, accounted_mib_ = 0, rss_mib_ = 0, max_overshoot_mib_;
  uint64_t rounds_ = 0, finished_ = 0, killed_ = 0;
};

}  // namespace molt::server
