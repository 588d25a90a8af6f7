#include "molt/runtime/events.h"

#include <fmt/format.h>

#include <cmath>
#include <nlohmann/json.hpp>

namespace molt {
namespace {

nlohmann::json num(double x) {
  return std::isfinite(x) ? nlohmann::json(x) : nlohmann::json();
}

// Round for the wire: 3 decimals carry every figure we print.
nlohmann::json r3(double x) {
  return std::isfinite(x) ? nlohmann::json(std::round(x * 1000) / 1000) : nlohmann::json();
}

}  // namespace

nlohmann::json to_json(const TokenEvent& e) {
  return {{"event", "token"},
          {"index", e.index},
          {"text", e.text},
          {"token_id", e.token_id},
          {"rung", e.rung}};
}

nlohmann::json to_json(const MigrationEvent& e) {
  nlohmann::json j = {{"event", "migration"},
                      {"from", e.from},
                      {"to", e.to},
                      {"policy", e.policy},
                      {"ms", r3(e.ms)},
                      {"flops_saved", r3(e.flops_saved)},
                      {"pressure", r3(e.pressure)},
                      {"requested", e.requested},
                      {"direction", e.direction},
                      {"context", e.context},
                      {"at_token", e.at_token},
                      {"budget_mib", r3(e.budget_mib)},
                      {"peak_mib", r3(e.peak_mib)},
                      {"rss_peak_mib", r3(e.rss_peak_mib)},
                      {"load_ms", r3(e.load_ms)},
                      {"carry_ms", r3(e.carry_ms)},
                      {"first_decode_ms", r3(e.first_decode_ms)},
                      {"seam_kl", num(e.seam_kl)}};
  if (std::isfinite(e.transfer_kl)) j["transfer_kl"] = num(e.transfer_kl);
  if (e.deferred_flops > 0) j["deferred_flops"] = e.deferred_flops;
  if (!e.note.empty()) j["note"] = e.note;
  return j;
}

nlohmann::json to_json(const BudgetEvent& e) {
  return {{"event", "budget"}, {"mib", r3(e.mib)}};
}

nlohmann::json to_json(const ParkEvent& e) {
  return {{"event", "park"},
          {"rung", e.rung},
          {"budget_mib", r3(e.budget_mib)},
          {"need_mib", r3(e.need_mib)},
          {"note", e.note}};
}

nlohmann::json to_json(const ResumeEvent& e) {
  return {{"event", "resume"},
          {"rung", e.rung},
          {"waited_steps", e.waited_steps},
          {"waited_ms", r3(e.waited_ms)}};
}

nlohmann::json to_json(const HealEvent& e) {
  return {{"event", "heal"},          {"rung", e.rung},   {"at_token", e.at_token},
          {"positions", e.positions}, {"steps", e.steps}, {"ms", r3(e.ms)}};
}

nlohmann::json to_json(const DoneEvent& e) {
  return {{"event", "done"},
          {"tokens", e.tokens},
          {"rungs_used", e.rungs_used},
          {"migrations", e.migrations},
          {"killed", e.killed},
          {"reason", e.reason},
          {"tail", e.tail},
          {"parks", e.parks},
          {"migration_ms", r3(e.migration_ms)},
          {"peak_mib", r3(e.peak_mib)},
          {"max_overshoot_mib", r3(e.max_overshoot_mib)},
          {"elapsed_ms", r3(e.elapsed_ms)}};
}

std::string describe(const MigrationEvent& e) {
  std::string s = fmt::format("⇆ {} → {}  ({}, {:.0f} ms", e.from, e.to, e.policy, e.ms);
  if (e.flops_saved > 0) s += fmt::format(", {:.0f}% FLOPs saved", 100 * e.flops_saved);
  if (e.deferred_flops > 0) s += fmt::format(", {:.2g} FLOPs deferred", e.deferred_flops);
  s += fmt::format(", pressure {:.2f})", e.pressure);
  return s;
}

}  // namespace molt
