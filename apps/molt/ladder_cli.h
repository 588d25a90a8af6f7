// Shared by `molt generate --ladder` and `molt demo`: prompt encoding, session options from
// flags, and the text rendering of the event stream (JSON lines: molt::JsonLineSink).
#pragma once

#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>
#include <vector>

#include "molt/kernels/kv_rows.h"
#include "molt/ladder/ladder.h"
#include "molt/runtime/route_setup.h"
#include "molt/runtime/session.h"

namespace molt::cli {

// Ladder-mode flags of `molt generate` (the sampling/length flags are generate's own).
struct LadderFlags {
  std::string ladder, trace, policy = "molt";
  std::string kv_dtype{kv_dtype_name(SessionOptions{}.kv_dtype)};
  bool live = false, json = false, measure = false;
  int64_t grace = 2, up_after = 3, prefill_chunk = 64, heal_chunk = 64;
  double up_margin = 0.10;
  int anchors = 0, recompute_layers = 0;
};
void add_ladder_flags(CLI::App* cmd, LadderFlags& f);
SessionOptions session_options(const LadderFlags& f);

// What generate's own flags say about this run.
struct LadderRun {
  std::string prompt, ids;
  bool chat = false;
  int max_tokens = 64;
  SamplingParams sampling;
  bool ignore_eos = false;
  int threads = 0;
};
// `molt generate`: streams the answer (text, or JSON lines) under the budget. `single`: the
// ladder is one --model (plain text or ids out, a speed line on stderr); else the rung of each
// token and every switch are shown.
void run_generate(Ladder& ladder, const LadderFlags& f, const LadderRun& r, bool single);
// The budget source the flags name: --trace FILE, --live, or no limit.
std::unique_ptr<BudgetSource> budget_source(const LadderFlags& f, std::FILE* notes);

// Prompt ids: `ids` when given, else `text` through the ladder's tokenizer (ChatML when
// `chat`; *stop_ids then gets <|im_end|>). Errors say what is missing.
std::vector<int32_t> encode_prompt(const Ladder& ladder, const std::string& text, bool chat,
                                   const std::string& ids, std::vector<int32_t>* stop_ids);

// One line per rung: name, precision, geometry, footprint at `context` tokens.
void print_ladder(std::FILE* out, const Ladder& ladder, int64_t context);

// The stream as text: "[l] tokens…", budget cuts, parks and switches on their own lines,
// a closing summary.
class StreamPrinter : public EventSink {
 public:
  explicit StreamPrinter(std::FILE* out) : out_(out) {}
  void on_token(const TokenEvent& e) override;
  void on_migration(const MigrationEvent& e) override;
  void on_budget(const BudgetEvent& e) override;
  void on_park(const ParkEvent& e) override;
  void on_resume(const ResumeEvent& e) override;
  void on_heal(const HealEvent& e) override;
  void on_done(const DoneEvent& e) override;

 private:
  void line(const std::string& s);
  std::FILE* out_;
  bool mid_line_ = false;
  std::string rung_;
};

}  // namespace molt::cli
