// Sampling, in the order Hugging Face's generate() applies its processors: repetition
// penalty, temperature, top-k, top-p, then a draw from the renormalised distribution.
#include "molt/model/sampler.h"

#include <algorithm>
#include <cmath>
#include <unordered_set>

#include "molt/common/error.h"

namespace molt {

Sampler::Sampler(const SamplingParams& p) : p_(p), rng_(p.seed) {
  if (!(p.temperature >= 0.0f)) fail("sampling: temperature must be >= 0 (got {})", p.temperature);
  if (p.top_k < 0) fail("sampling: top-k must be >= 0 (got {})", p.top_k);
  if (!(p.top_p > 0.0f && p.top_p <= 1.0f))
    fail("sampling: top-p must be in (0, 1] (got {})", p.top_p);
  if (!(p.repetition_penalty > 0.0f)) {
    fail("sampling: repetition penalty must be > 0 (got {})", p.repetition_penalty);
  }
}

int32_t Sampler::sample(std::span<float> logits, std::span<const int32_t> history) {
  const int64_t V = static_cast<int64_t>(logits.size());
  if (V == 0) fail("sampling: empty logits");
  if (p_.repetition_penalty != 1.0f) {
    std::unordered_set<int32_t> seen(history.begin(), history.end());
    for (int32_t t : seen) {
      if (t < 0 || t >= V) continue;
      float& l = logits[t];
      l = l > 0 ? l / p_.repetition_penalty : l * p_.repetition_penalty;
    }
  }
  if (p_.temperature == 0.0f) {
    return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  }

  // Candidates sorted by logit, cut by top-k, softmax at the temperature, cut by top-p.
  scratch_.clear();
  scratch_.reserve(static_cast<size_t>(V));
  for (int64_t i = 0; i < V; ++i) scratch_.emplace_back(logits[i], static_cast<int32_t>(i));
  const size_t k = p_.top_k > 0 ? std::min<size_t>(p_.top_k, scratch_.size()) : scratch_.size();
  auto by_logit = [](const auto& a, const auto& b) { return a.first > b.first; };
  std::partial_sort(scratch_.begin(), scratch_.begin() + static_cast<std::ptrdiff_t>(k),
                    scratch_.end(), by_logit);
  scratch_.resize(k);

  const float max_l = scratch_.front().first;
  double total = 0;
  for (auto& [l, id] : scratch_) {
    l = std::exp((l - max_l) / p_.temperature);
    total += l;
  }
  size_t keep = scratch_.size();
  if (p_.top_p < 1.0f) {
    // Keep the smallest prefix whose mass reaches top_p (at least one token).
    double mass = 0;
    for (size_t i = 0; i < scratch_.size(); ++i) {
      mass += scratch_[i].first / total;
      if (mass >= p_.top_p) {
        keep = i + 1;
        break;
      }
    }
  }
  double kept_total = 0;
  for (size_t i = 0; i < keep; ++i) kept_total += scratch_[i].first;
  std::uniform_real_distribution<double> u(0.0, kept_total);
  double r = u(rng_);
  for (size_t i = 0; i < keep; ++i) {
    r -= scratch_[i].first;
    if (r <= 0) return scratch_[i].second;
  }
  return scratch_[keep - 1].second;
}

}  // namespace molt
