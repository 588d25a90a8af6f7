// FLOPs of a re-prefill (for "FLOPs saved").
#include "molt/runtime/metrics.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "molt/transfer/map_file.h"
#include "molt/transfer/transfer.h"

namespace molt {

FlopCount prefill_flop_count(const ModelConfig& c, int64_t n) {
  const double d = static_cast<double>(c.hidden_size), q = static_cast<double>(c.q_dim()),
               kv = static_cast<double>(c.kv_dim()), ff = static_cast<double>(c.intermediate_size),
               L = static_cast<double>(c.num_hidden_layers), N = static_cast<double>(n);
  FlopCount f;
  f.linear = 2 * L * (d * q + 2 * d * kv + q * d + 3 * d * ff) * N;
  // Attention: position i scores i + 1 keys and mixes as many values, 4·q_dim FLOPs each.
  f.attention = 2 * L * q * N * (N + 1);
  f.lm_head = 2 * d * static_cast<double>(c.vocab_size);
  return f;
}

double prefill_flops(const ModelConfig& c, int64_t n) {
  return prefill_flop_count(c, n).total();
}

double native_layer_flops(const CacheMap& map, const ModelConfig& receiver, int64_t n) {
  const FlopCount f = prefill_flop_count(receiver, n);
  const double share = static_cast<double>(map.data().features.native_layers) /
                       static_cast<double>(receiver.num_hidden_layers);
  return share * (f.linear + f.attention);
}

double transfer_flops(const CacheMap& map, const ModelConfig& receiver, int64_t n) {
  return map.flops_per_position() * static_cast<double>(n) + native_layer_flops(map, receiver, n);
}

ConditionSummary summarize_condition(const std::vector<MigrationEvent>& migrations,
                                     const DoneEvent& done, std::string_view policy) {
  ConditionSummary c;
  c.killed = done.killed;
  c.tokens = done.tokens;
  c.rungs_used = done.rungs_used;
  for (const MigrationEvent& m : migrations) {
    c.seams.push_back({m.from, m.to, m.ms});
    c.max_stall_ms = std::isnan(c.max_stall_ms) ? m.ms : std::max(c.max_stall_ms, m.ms);
    const double over = m.peak_mib - m.budget_mib;
    c.worst_overshoot_mib =
        std::isnan(c.worst_overshoot_mib) ? over : std::max(c.worst_overshoot_mib, over);
    if (std::isfinite(m.seam_kl)) c.seam_kl.push_back(m.seam_kl);
    if (m.policy != policy &&
        std::find(c.fallbacks.begin(), c.fallbacks.end(), m.policy) == c.fallbacks.end()) {
      c.fallbacks.push_back(m.policy);
    }
  }
  if (!c.seam_kl.empty()) {
    c.mean_seam_kl = std::accumulate(c.seam_kl.begin(), c.seam_kl.end(), 0.0) /
                     static_cast<double>(c.seam_kl.size());
  }
  return c;
}

}  // namespace molt
