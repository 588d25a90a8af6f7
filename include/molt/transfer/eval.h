// How well a carried cache serves the receiver (DESIGN.md §6), on windows of real text.
//
// A window of T tokens is cut at `prefix` P. The receiver's cache of positions [0, P) is filled
// by a condition (the map, or a floor), then the receiver reads t_P .. t_{T−2} itself and is
// scored on t_{P+1} .. t_{T−1}. Native = the receiver re-read the prefix. The seam is the first
// scored position (the receiver's first distribution after the switch); the sender's
// distribution there comes from the sender reading t_0 .. t_P itself.
//   prefix NLL gap       mean NLL(condition) − mean NLL(native), nats per token
//   transfer divergence  KL(p_native ‖ p_condition) at the seam
//   seam divergence      KL(p_sender ‖ p_condition) at the seam (native gives the floor)
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "molt/model/kv_cache.h"
#include "molt/model/model.h"

namespace molt {

// Fills the receiver's cache (dst, empty on entry) with positions [0, src.size()) from the
// sender's cache of the same prefix; `tokens` are the prefix ids.
using CacheFiller =
    std::function<void(const KVCache& src, std::span<const int32_t> tokens, KVCache& dst)>;

struct Condition {
  std::string name;
  CacheFiller fill;
};

struct ConditionScore {
  std::string name;
  double nll = 0;
  double nll_gap = 0;
  double transfer_kl = 0;
  double seam_kl = 0;
  // Per window: mean NLL(condition) − mean NLL(native) over its scored tokens, so two conditions
  // (or a condition and a floor) can be compared pair by pair on the same windows.
  std::vector<double> window_gaps;
};

struct TransferEval {
  int64_t windows = 0, prefix = 0, scored_tokens = 0;
  double native_nll = 0;      // the receiver after re-reading the prefix
  double native_seam_kl = 0;  // KL(p_sender ‖ p_native) at the seam: the floor of seam divergence
  double sender_nll = 0;      // the sender on the same targets, for scale
  std::vector<ConditionScore> conditions;
};

// `sender_hidden`: the sender's caches keep hidden states (selective recompute needs them).
TransferEval evaluate_transfer(const Model& sender, const Model& receiver,
                               const std::vector<std::vector<int32_t>>& windows, int64_t prefix,
                               const std::vector<Condition>& conditions, bool sender_hidden);

// A cache of zeros: attention over it is uniform over zero values.
void fill_zero_cache(int64_t n, KVCache& dst);

// Mean negative log-likelihood of `targets` under row-major logits [targets.size() × vocab].
double mean_nll(std::span<const float> logits, std::span<const int32_t> targets, int64_t vocab);
// Mean NLL of window[1..] with the model reading the window itself from an empty cache of K/V
// rows of type kv. `logits` is the caller's buffer (window.size() × vocab floats), grown as
// needed and kept across calls.
double window_nll(const Model& m, std::span<const int32_t> window, KvDType kv,
                  std::vector<float>& logits);
// KL(p ‖ q) of the softmax distributions (taken in double) of two logit vectors over their
// first `vocab` entries (padded model rows are not tokens); vocab < 0: the whole spans, which
// must then be the same length. Throws when a span is shorter than vocab.
double kl_logits(std::span<const float> p, std::span<const float> q, int64_t vocab = -1);

}  // namespace molt
