// `molt bench serve`: N concurrent streaming clients against `molt serve` on loopback for T
// seconds, with the budget squeezed to a lower rung in the middle and restored later. Every
// stream is checked as it arrives (contiguous indices, a done chunk, killed=false, [DONE]); a
// stream that breaks any of that counts as an error.
#pragma once

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

namespace molt::server {

struct ServeBenchOptions {
  std::filesystem::path ladder;
  int streams = 8;
  double seconds = 10;
  int max_tokens = 64;
  double cut_at = 0.4;      // fraction of the run at which the budget is squeezed
  double restore_at = 0.7;  // ... and given back (≥ 1: never)
  std::string cut_rung;     // the rung squeezed to (empty: the second)
  double min_round_ms = 0;
  int threads = 0;
  bool progress = false;  // a line per second on stderr
};

// JSON: requests, tokens, req_s, tok_s, ttft_ms {p50, p99, max}, errors (+ the first few
// messages), migrations, rss_mib {start, minute_1, end (the last sample under load), after_stop,
// samples}, rss_drift (end vs minute 1, or vs the first sample when shorter), rounds,
// cut_rounds (scheduler rounds while the cut held: 0 means the squeeze went unmeasured),
// max_overshoot_mib (null when no round ran under a finite budget).
nlohmann::json run_serve_bench(const ServeBenchOptions& o);
std::string serve_bench_table(const nlohmann::json& result);

}  // namespace molt::server
