// Next-token choice from logits: greedy, temperature, top-k, top-p, repetition penalty.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <vector>

namespace molt {

struct SamplingParams {
  float temperature = 0.0f;         // 0 = greedy
  int top_k = 0;                    // 0 = off
  float top_p = 1.0f;               // 1 = off
  float repetition_penalty = 1.0f;  // 1 = off; CTRL-style, as Hugging Face applies it
  uint64_t seed = 0;
};

class Sampler {
 public:
  explicit Sampler(const SamplingParams& p);
  // `history`: tokens seen so far (prompt + generated), for the repetition penalty.
  // `logits` is modified in place.
  int32_t sample(std::span<float> logits, std::span<const int32_t> history);
  const SamplingParams& params() const { return p_; }

 private:
  SamplingParams p_;
  std::mt19937_64 rng_;
  std::vector<std::pair<float, int32_t>> scratch_;
};

}  // namespace molt
