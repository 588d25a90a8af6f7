// FLOPs of a re-prefill (for "FLOPs saved") and the seam KL.
#include <algorithm>
#include <cmath>

#include "molt/runtime/session.h"

namespace molt {

double prefill_flops(const ModelConfig& c, int64_t n) {
  const double d = static_cast<double>(c.hidden_size), q = static_cast<double>(c.q_dim()),
               kv = static_cast<double>(c.kv_dim()), ff = static_cast<double>(c.intermediate_size),
               L = static_cast<double>(c.num_hidden_layers), N = static_cast<double>(n);
  const double per_token = 2 * L * (d * q + 2 * d * kv + q * d + 3 * d * ff);
  // Attention: position i scores i + 1 keys and mixes as many values, 4·q_dim FLOPs each.
  const double attention = 2 * L * q * N * (N + 1);
  return per_token * N + attention + 2 * d * static_cast<double>(c.vocab_size);
}

double kl_from_logits(std::span<const float> p_logits, std::span<const float> q_logits,
                      int64_t vocab) {
  const size_t V = static_cast<size_t>(
      std::min<int64_t>(vocab, static_cast<int64_t>(std::min(p_logits.size(), q_logits.size()))));
  auto log_softmax = [V](std::span<const float> x) {
    std::vector<double> out(V);
    double mx = -INFINITY;
    for (size_t i = 0; i < V; ++i) mx = std::max(mx, static_cast<double>(x[i]));
    double sum = 0;
    for (size_t i = 0; i < V; ++i) sum += std::exp(x[i] - mx);
    const double lse = mx + std::log(sum);
    for (size_t i = 0; i < V; ++i) out[i] = x[i] - lse;
    return out;
  };
  const auto lp = log_softmax(p_logits), lq = log_softmax(q_logits);
  double kl = 0;
  for (size_t i = 0; i < V; ++i) kl += std::exp(lp[i]) * (lp[i] - lq[i]);
  return std::max(0.0, kl);
}

}  // namespace molt
