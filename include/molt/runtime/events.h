// The stream a generation emits (DESIGN.md §5). As JSON each object carries an "event" field
// naming it: token, migration, budget, park, resume, heal, done. The four of the design are
// token {index, text, token_id, rung}, migration {from, to, policy, ms, flops_saved, pressure},
// budget {mib}, done {tokens, rungs_used, migrations, killed}; the others and the extra fields
// below add detail without changing those.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

namespace molt {

struct TokenEvent {
  int64_t index = 0;  // 0-based position in the answer; contiguous across seams
  std::string text;   // what this token adds to the stream (whole UTF-8 characters only)
  int32_t token_id = 0;
  std::string rung;
};

struct MigrationEvent {
  std::string from, to;
  std::string policy;  // what ran: reprefill, release-reprefill, molt, heal
  double ms = 0;       // wall ms from the budget check to the receiver's first logits
  double flops_saved =
      0;                // fraction of the receiver's re-prefill FLOPs not spent before it resumes
  double pressure = 0;  // 1 − budget / top rung's footprint, in [0, 1]
  // heal: the re-prefill FLOPs it defers to the decode steps after the seam (flops_saved is 0:
  // healing re-runs every layer over every carried position).
  double deferred_flops = 0;
  // Detail.
  std::string requested;  // the session's policy (auto, or one that fell back)
  std::string direction;  // "down" or "up"
  int64_t context = 0;    // positions carried across
  int64_t at_token = 0;   // index of the first token the receiver produces
  double budget_mib = 0;
  double peak_mib = 0;  // accounted peak during the migration
  // Measured RSS high-water mark, less the process's own overhead (RSS beyond the accounted
  // weights and cache after the first prefill), from the moment the sender is released or
  // parked (reprefill: from the start, the sender stays) to the receiver ready.
  double rss_peak_mib = NAN;
  double load_ms = 0, carry_ms = 0, first_decode_ms = 0;
  double seam_kl = NAN;  // KL(p_sender ‖ p_receiver) at the seam, when measured
  // KL(p_receiver,native ‖ p_receiver) at the seam, when measured: what the carried cache
  // changed against the receiver re-reading the context (0 for a re-read).
  double transfer_kl = NAN;
  std::string note;  // why a fallback was taken, or what auto chose and why
};

struct BudgetEvent {
  double mib = 0;
};

// The budget fell below the smallest rung: the weights are released, the cache kept.
struct ParkEvent {
  std::string rung;  // empty when nothing was loaded yet
  double budget_mib = 0;
  double need_mib = 0;  // the smallest rung's footprint
  std::string note;     // why, when it is not only the budget (a rung that failed to load)
};

struct ResumeEvent {
  std::string rung;
  int64_t waited_steps = 0;
  double waited_ms = 0;
};

// Healing finished: the receiver's cache is native again.
struct HealEvent {
  std::string rung;
  int64_t at_token = 0;   // index of the first token decoded on the healed cache
  int64_t positions = 0;  // re-prefilled natively
  int64_t steps = 0;      // decode steps it was spread over
  double ms = 0;          // total time spent healing
};

struct DoneEvent {
  int64_t tokens = 0;
  std::vector<std::string> rungs_used;
  int64_t migrations = 0;
  bool killed = false;
  std::string reason;  // "max_tokens", "eos", "killed"
  std::string tail;    // text held back by the stream decoder (a character never completed)
  int64_t parks = 0;
  double migration_ms = 0;       // sum over migrations
  double peak_mib = 0;           // accounted peak over the session
  double max_overshoot_mib = 0;  // max(accounted − budget) over checks after enforcement
  double elapsed_ms = 0;
};

class EventSink {
 public:
  virtual ~EventSink() = default;
  virtual void on_token(const TokenEvent&) {}
  virtual void on_migration(const MigrationEvent&) {}
  virtual void on_budget(const BudgetEvent&) {}
  virtual void on_park(const ParkEvent&) {}
  virtual void on_resume(const ResumeEvent&) {}
  virtual void on_heal(const HealEvent&) {}
  virtual void on_done(const DoneEvent&) {}
};

// Keeps every event (tests, the demo's condition lines).
class EventLog : public EventSink {
 public:
  void on_token(const TokenEvent& e) override { tokens.push_back(e); }
  void on_migration(const MigrationEvent& e) override { migrations.push_back(e); }
  void on_budget(const BudgetEvent& e) override { budgets.push_back(e); }
  void on_park(const ParkEvent& e) override { parks.push_back(e); }
  void on_resume(const ResumeEvent& e) override { resumes.push_back(e); }
  void on_heal(const HealEvent& e) override { heals.push_back(e); }
  void on_done(const DoneEvent& e) override { done = e; }
  std::vector<TokenEvent> tokens;
  std::vector<MigrationEvent> migrations;
  std::vector<BudgetEvent> budgets;
  std::vector<ParkEvent> parks;
  std::vector<ResumeEvent> resumes;
  std::vector<HealEvent> heals;
  DoneEvent done;
};

// One JSON object per line (the CLI's --json, a server's log), flushed per event so a reader
// sees each as it happens; invalid UTF-8 in token text is replaced, never thrown.
class JsonLineSink : public EventSink {
 public:
  explicit JsonLineSink(std::FILE* out) : out_(out) {}
  void on_token(const TokenEvent& e) override;
  void on_migration(const MigrationEvent& e) override;
  void on_budget(const BudgetEvent& e) override;
  void on_park(const ParkEvent& e) override;
  void on_resume(const ResumeEvent& e) override;
  void on_heal(const HealEvent& e) override;
  void on_done(const DoneEvent& e) override;

 private:
  void write(const nlohmann::json& j);
  std::FILE* out_;
};

// One JSON object per event, with "event" naming it; NaN fields are null.
nlohmann::json to_json(const TokenEvent& e);
nlohmann::json to_json(const MigrationEvent& e);
nlohmann::json to_json(const BudgetEvent& e);
nlohmann::json to_json(const ParkEvent& e);
nlohmann::json to_json(const ResumeEvent& e);
nlohmann::json to_json(const HealEvent& e);
nlohmann::json to_json(const DoneEvent& e);

// The one-line human form of a migration: "⇆ l → m  (molt, 12 ms, 79% FLOPs saved, pressure 0.81)".
std::string describe(const MigrationEvent& e);

}  // namespace molt
