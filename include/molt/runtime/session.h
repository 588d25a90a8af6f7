// One generation on a ladder: a decode loop that checks the budget between every two tokens
// and changes rung when the footprint would not fit (DESIGN.md §4 "runtime").
//
//   auto ladder = molt::Ladder::open("models/tiny-ladder/ladder.json");
//   molt::TraceBudget budget(molt::PressureTrace::load("traces/spike_mid_answer.json"));
//   molt::SessionOptions o;  o.policy = molt::Policy::kMolt;
//   MyPrinter out;  // a molt::EventSink
//   molt::SessionResult r = molt::Session(*ladder, budget, out, o).run(prompt_ids);
//
// Footprint of a rung for a session = weights + KV cache at capacity (prompt + max_tokens;
// the cache is allocated once, at capacity) + scratch. Down: when the current rung's footprint
// exceeds the budget, move to the largest rung that fits; if none fits, park (release the
// weights, keep the cache) and wait, then resume. Up: when a larger rung fits with
// (1 + up_margin) × its footprint for up_after checks in a row. No token is lost or repeated
// at a seam: the receiver resumes from the cache of every token but the last sampled one and
// decodes that one next.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "molt/ladder/ladder.h"
#include "molt/model/sampler.h"
#include "molt/pressure/budget.h"
#include "molt/runtime/events.h"
#include "molt/runtime/policy.h"
#include "molt/transfer/transfer.h"

namespace molt {

struct SessionOptions {
  Policy policy = Policy::kMolt;
  int64_t max_tokens = 64;
  SamplingParams sampling;
  bool stop_at_eos = true;
  std::vector<int32_t> stop_ids;  // in addition to the rungs' eos ids (e.g. <|im_end|>)

  int64_t grace_steps = 2;  // hold: budget checks over budget before it is killed
  double up_margin = 0.10;  // hysteresis for moving up ...
  int64_t up_after = 3;     // ... sustained for this many checks
  int64_t prefill_chunk = 64;
  int64_t heal_chunk = 64;             // heal: positions of one layer re-prefilled per decode step
  double poll_ms = 20;                 // parked: wait between checks (wall-clock budget sources)
  int64_t max_parked_steps = 1000000;  // a parked session gives up after this many checks

  TransferOptions transfer;
  // auto: re-prefill contexts up to this length (cheap and exact); beyond, molt when the map's
  // held-out residual (metadata "residuals") is at most auto_max_residual, else heal.
  int64_t auto_reprefill_below = 96;
  double auto_max_residual = 0.5;

  // Evidence (costs time outside the timed seam): the sender decodes the pending token before
  // it is released, for KL(p_sender ‖ p_receiver); RSS high-water mark per migration.
  bool measure_seams = false;
  bool measure_rss = false;
};

struct SessionResult {
  std::vector<int32_t> tokens;     // the answer
  std::vector<std::string> rungs;  // which rung produced each token
  std::vector<MigrationEvent> migrations;
  DoneEvent done;
};

class Session {
 public:
  Session(Ladder& ladder, BudgetSource& budget, EventSink& sink, SessionOptions options);
  ~Session();
  SessionResult run(std::span<const int32_t> prompt);

 private:
  Ladder& ladder_;
  BudgetSource& budget_;
  EventSink& sink_;
  SessionOptions o_;
};

// FLOPs of a full re-prefill of n tokens on a model with this config (matmuls, attention, the
// last position's logits).
double prefill_flops(const ModelConfig& c, int64_t n);
// KL(p ‖ q) of the softmax distributions of two logit vectors over their first `vocab` entries.
double kl_from_logits(std::span<const float> p_logits, std::span<const float> q_logits,
                      int64_t vocab);

}  // namespace molt
