// Figures the runtime reports about migrations: re-prefill FLOPs (for "FLOPs saved") and the
// summary of one condition's run (the demo's table, the evaluation's rows).
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "molt/formats/hf_config.h"
#include "molt/runtime/events.h"

namespace molt {

class CacheMap;

// FLOPs of a prefill of n tokens as Model::forward runs it (2 per multiply-add): the layers'
// linears for every token, causal attention (position i scores and mixes i + 1 keys), and the
// lm_head for the last position only (a prefill computes no other logits). The one count
// behind "FLOPs saved" and every prefill GFLOP/s figure.
struct FlopCount {
  double linear = 0, attention = 0, lm_head = 0;
  double total() const { return linear + attention + lm_head; }
};
FlopCount prefill_flop_count(const ModelConfig& c, int64_t n);
double prefill_flops(const ModelConfig& c, int64_t n);  // prefill_flop_count(c, n).total()
// FLOPs of the receiver layers `map` runs natively over n positions (MapFeatures::native_layers):
// their share of a prefill without the lm_head.
double native_layer_flops(const CacheMap& map, const ModelConfig& receiver, int64_t n);
// FLOPs of carrying n positions with `map` into `receiver`: its GEMMs plus native_layer_flops.
double transfer_flops(const CacheMap& map, const ModelConfig& receiver, int64_t n);

// One run under one policy, reduced to what a condition row shows.
struct ConditionSummary {
  bool killed = false;
  int64_t tokens = 0;
  std::vector<std::string> rungs_used;
  struct Seam {
    std::string from, to;
    double ms = 0;
  };
  std::vector<Seam> seams;             // every migration, in order
  double max_stall_ms = NAN;           // the longest seam; NaN without one
  std::vector<double> seam_kl;         // the measured ones, in order
  double mean_seam_kl = NAN;           // NaN when none was measured
  double worst_overshoot_mib = NAN;    // max(accounted peak − budget) over seams; NaN without one
  std::vector<std::string> fallbacks;  // policies that ran other than `policy`, first use order
};
ConditionSummary summarize_condition(const std::vector<MigrationEvent>& migrations,
                                     const DoneEvent& done, std::string_view policy);

}  // namespace molt
