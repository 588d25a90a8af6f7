// The one options struct of a generation, shared by every front end (CLI, server, C API).
// Defaults are what `molt generate --ladder` does with no flags; validate() names the field of
// any value out of range; JSON round-trips every field (unknown keys are an error naming them).
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <vector>

#include "molt/kernels/kv_rows.h"
#include "molt/model/sampler.h"
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
  int64_t max_parked_steps = 1000000;  // a parked generation gives up after this many checks
  // Positions the cache is allocated for (0: prompt + max_tokens). A generation whose cache is
  // full sheds its oldest context when shed_sink >= 0 (keeping the first shed_sink positions,
  // dropping shed_drop after them; 0: a quarter of the capacity), else it fails naming this.
  int64_t capacity = 0;
  // Element type of the cache's K and V rows: f16 (the default: half of f32's bytes, NLL within
  // 0.01% of f32's on the tiny ladder, the same needles), f32 or int8 (about a quarter); every
  // rung's cache of this generation, and its footprint, use it.
  KvDType kv_dtype = KvDType::kF16;
  int64_t shed_sink = -1;
  int64_t shed_drop = 0;

  TransferOptions transfer;
  // auto, per migration: re-read (exact) when the receiver's re-read of the context, estimated
  // at the speed of this generation's own prefills, takes at most auto_max_stall_ms (or the
  // context is shorter than auto_reprefill_below tokens); else molt when the route's evidence
  // (ladder.json) shows the map keeps at least auto_min_retention of the receiver's needle
  // accuracy at about this context; else heal. The migration's note says which and why.
  double auto_max_stall_ms = 50;
  double auto_min_retention = 0.9;
  int64_t auto_reprefill_below = 0;

  // Evidence (costs time outside the timed seam): the sender decodes the pending token before
  // it is released, for KL(p_sender ‖ p_receiver); RSS high-water mark per migration.
  bool measure_seams = false;
  bool measure_rss = false;

  // Throws naming the field when a value is out of range.
  void validate() const;
};

nlohmann::json to_json(const SessionOptions& o);
// Starts from `base` and overrides the fields `j` names; throws naming an unknown or wrongly
// typed field (`what` prefixes the message, e.g. a file name or "request").
SessionOptions options_from_json(const nlohmann::json& j, const SessionOptions& base = {},
                                 const char* what = "options");

}  // namespace molt
