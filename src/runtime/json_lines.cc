// JsonLineSink: the event stream as JSON lines.
#include <nlohmann/json.hpp>

#include "molt/runtime/events.h"

namespace molt {

void JsonLineSink::write(const nlohmann::json& j) {
  const std::string line = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  std::fwrite(line.data(), 1, line.size(), out_);
  std::fputc('\n', out_);
  std::fflush(out_);
}

void JsonLineSink::on_token(const TokenEvent& e) {
  write(to_json(e));
}
void JsonLineSink::on_migration(const MigrationEvent& e) {
  write(to_json(e));
}
void JsonLineSink::on_budget(const BudgetEvent& e) {
  write(to_json(e));
}
void JsonLineSink::on_park(const ParkEvent& e) {
  write(to_json(e));
}
void JsonLineSink::on_resume(const ResumeEvent& e) {
  write(to_json(e));
}
void JsonLineSink::on_heal(const HealEvent& e) {
  write(to_json(e));
}
void JsonLineSink::on_done(const DoneEvent& e) {
  write(to_json(e));
}

}  // namespace molt
