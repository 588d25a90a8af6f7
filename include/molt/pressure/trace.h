// Pressure traces (DESIGN.md §5): the memory budget as a step function of time.
//
//   {"name": "spike_mid_answer", "unit": "tokens",
//    "points": [{"at": 0, "budget_frac": 1.25}, {"at": 10, "budget_mib": 64}, ...]}
//
// unit "tokens": `at` counts session steps (one per generated token, and one per budget check
// while parked, so a trace can hold a budget below the smallest rung for a while); unit "ms":
// wall milliseconds since the session started. Each point sets the budget from `at` on; the
// first point must be at 0. A point gives either budget_mib (absolute) or budget_frac: a
// fraction of the reference footprint (the runtime passes the top rung's footprint for the
// session), so one trace fits ladders of any size.
#pragma once

#include <filesystem>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

namespace molt {

enum class TraceUnit { kTokens, kMs };

struct TracePoint {
  double at = 0;
  double value = 0;       // MiB, or a fraction when `relative`
  bool relative = false;  // budget_frac
};

struct PressureTrace {
  std::string name;
  TraceUnit unit = TraceUnit::kTokens;
  std::vector<TracePoint> points;

  // Errors name the file and the field ("trace.json: points[2].at: ...").
  static PressureTrace load(const std::filesystem::path& file);
  static PressureTrace parse(const nlohmann::json& j, const std::string& source);

  // Budget in MiB at time `at` (in the trace's unit); `reference_mib` scales relative points.
  double budget_mib(double at, double reference_mib) const;
};

}  // namespace molt
