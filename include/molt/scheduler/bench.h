// `molt bench tenants`: tenants on one ladder under a pressure trace, round by round, with
// the scheduler's accounting checked against measured RSS every round.
//
// Tenants are given as a comma-separated list of `fg|bg[:TOKENS][@ROUND]` (priority, answer
// length, the round it arrives). The standard scenario, kStandardTenants on the tiny ladder
// under traces/two_step_squeeze.json, is one foreground chat and two background batch jobs, the
// second arriving later.
#pragma once

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "molt/ladder/ladder.h"
#include "molt/runtime/options.h"
#include "molt/scheduler/scheduler.h"

namespace molt::sched {

inline constexpr const char* kStandardTenants = "fg:96,bg:128,bg:128@50";

struct TenantsBenchOptions {
  std::filesystem::path ladder, trace;
  std::string tenants = kStandardTenants;
  std::string policy = "molt";  // every tenant's migration policy
  int threads = 1;
  int64_t max_rounds = 5000;
};

// The tenants of a spec with their prompts (foreground: a chat turn; background: a document
// to summarise), greedy and without stopping at eos so that runs repeat exactly.
std::vector<TenantSpec> parse_tenants(const std::string& spec, const Ladder& ladder,
                                      const SessionOptions& base);

// Runs the scenario to the end (or max_rounds). The JSON holds "rounds" (the timeline: budget,
// predicted, accounted, RSS, lever and every tenant's rung and state per round) and "summary"
// (max overshoot, lever counts, per tenant tokens, tok/s, time deferred and suspended, killed,
// accounted − RSS). A tenant's tok_s is over the wall time of the rounds since its admission
// (everyone's steps share them); tok_s_stepping over its own steps alone.
nlohmann::json run_tenants_bench(const TenantsBenchOptions& o);

// The timeline as SVG: budget and usage over rounds above, each tenant's rung as a coloured
// band below (suspended hatched, waiting pale).
std::string timeline_svg(const nlohmann::json& result);

// The summary as a text table.
std::string summary_table(const nlohmann::json& result);

}  // namespace molt::sched
