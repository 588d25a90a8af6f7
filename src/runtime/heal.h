// Heal: after a mapped resume, re-prefill the carried positions natively on the receiver, one
// layer at a time (layer l needs only the native states entering it), a chunk of positions per
// decode step, and swap each layer's K/V into the live cache as soon as it is complete. At the
// end the positions decoded meanwhile are re-run on the healed cache, so the whole cache is
// what a native prefill would have made. Private to runtime/.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "molt/model/model.h"

namespace molt::runtime {

class HealJob {
 public:
  // `tokens`: the ids of the carried positions [0, n0).
  HealJob(const Model& receiver, std::span<const int32_t> tokens);
  // One chunk of work. Returns true once every layer is swapped in and `cache` is fully native
  // for `window` (the ids of every position it holds).
  bool step(const Model& receiver, KVCache& cache, std::span<const int32_t> window, int64_t chunk);
  int64_t positions() const { return static_cast<int64_t>(tokens_.size()); }
  int64_t layers_done() const { return layer_; }
  int64_t steps() const { return steps_; }
  double ms() const { return ms_; }
  // Memory it holds beside the live cache (a shadow cache of n0 positions + hidden states).
  static size_t extra_bytes(const ModelConfig& c, int64_t n0);

 private:
  std::vector<int32_t> tokens_;
  std::vector<float> hidden_;  // [n0 × hidden]: states entering layer_
  std::unique_ptr<KVCache> shadow_;
  int64_t layer_ = 0, pos_ = 0, steps_ = 0;
  double ms_ = 0;
};

}  // namespace molt::runtime
