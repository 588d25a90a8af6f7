// Pressure trace parsing, validation and lookup.
#include "molt/pressure/trace.h"

#include <cmath>
#include <nlohmann/json.hpp>

#include "molt/common/error.h"
#include "molt/formats/hf_config.h"

namespace molt {
namespace {

double number(const nlohmann::json& o, const char* key, const std::string& where) {
  const nlohmann::json& v = o[key];
  if (!v.is_number()) fail("{}.{}: is a {}, expected a number", where, key, v.type_name());
  const double x = v.get<double>();
  if (!std::isfinite(x)) fail("{}.{}: is not finite", where, key);
  return x;
}

}  // namespace

PressureTrace PressureTrace::load(const std::filesystem::path& file) {
  if (!std::filesystem::exists(file)) fail("{}: pressure trace not found", file.string());
  return parse(read_json_file(file), file.string());
}

PressureTrace PressureTrace::parse(const nlohmann::json& j, const std::string& src) {
  if (!j.is_object()) fail("{}: is a JSON {}, expected an object", src, j.type_name());
  PressureTrace t;
  if (!j.contains("name") || !j["name"].is_string()) fail("{}: field 'name' must be a string", src);
  t.name = j["name"].get<std::string>();
  if (!j.contains("unit") || !j["unit"].is_string()) {
    fail("{}: field 'unit' must be \"tokens\" or \"ms\"", src);
  }
  const std::string unit = j["unit"].get<std::string>();
  if (unit == "tokens") {
    t.unit = TraceUnit::kTokens;
  } else if (unit == "ms") {
    t.unit = TraceUnit::kMs;
  } else {
    fail("{}: unit '{}' is not \"tokens\" or \"ms\"", src, unit);
  }
  if (!j.contains("points") || !j["points"].is_array()) {
    fail("{}: field 'points' must be an array of {{at, budget_mib | budget_frac}}", src);
  }
  const nlohmann::json& pts = j["points"];
  if (pts.empty()) fail("{}: field 'points' lists no points", src);
  for (size_t i = 0; i < pts.size(); ++i) {
    const std::string where = fmt::format("{}: points[{}]", src, i);
    const nlohmann::json& p = pts[i];
    if (!p.is_object()) fail("{}: is a {}, expected an object", where, p.type_name());
    if (!p.contains("at")) fail("{}: missing field 'at'", where);
    TracePoint tp;
    tp.at = number(p, "at", where);
    const bool mib = p.contains("budget_mib"), frac = p.contains("budget_frac");
    if (mib == frac) fail("{}: give exactly one of 'budget_mib' or 'budget_frac'", where);
    tp.relative = frac;
    tp.value = number(p, frac ? "budget_frac" : "budget_mib", where);
    if (tp.value < 0) {
      fail("{}.{}: {} is negative", where, frac ? "budget_frac" : "budget_mib", tp.value);
    }
    if (i == 0 && tp.at != 0)
      fail("{}.at: the first point must be at 0 (the starting budget), not {}", where, tp.at);
    if (i > 0 && tp.at <= t.points.back().at) {
      fail("{}.at: {} is not after points[{}].at {}", where, tp.at, i - 1, t.points.back().at);
    }
    t.points.push_back(tp);
  }
  return t;
}

double PressureTrace::budget_mib(double at, double reference_mib) const {
  const TracePoint* cur = &points.front();
  for (const TracePoint& p : points) {
    if (p.at > at) break;
    cur = &p;
  }
  return cur->relative ? cur->value * reference_mib : cur->value;
}

}  // namespace molt
