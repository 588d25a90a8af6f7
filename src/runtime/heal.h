// Heal: after a mapped resume, re-prefill the carried positions natively on the receiver, one
// layer at a time (layer l needs only the native states entering it), a chunk of positions per
// decode step, writing the native K/V straight into the live cache (a layer is native up to
// the chunk healed so far, mapped beyond it). At the end the positions decoded meanwhile are
// re-run on the healed cache, so the whole cache is what a native prefill would have made.
// Nothing runs at the seam itself: the first step() embeds the carried tokens. A map with
// native layers has already run the receiver's first b layers at the seam: heal starts at
// layer b from the hidden states the map left (CacheMap::apply's native_hidden). Private to
// runtime/ and the evaluations (bench/heal_needles.h).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "molt/model/model.h"

namespace molt::runtime {

class HealJob {
 public:
  // `tokens`: the ids of the carried positions [0, n0). With first_layer = b > 0, layers
  // [0, b) of the cache are native already and `hidden` holds the states entering layer b,
  // [n0 × hidden_size] (checked at the first step).
  explicit HealJob(std::span<const int32_t> tokens, int64_t first_layer = 0,
                   std::vector<float> hidden = {});
  // One chunk of work. Returns true once every layer is native and `cache` is fully native for
  // `window` (the ids of every position it holds).
  bool step(const Model& receiver, KVCache& cache, std::span<const int32_t> window, int64_t chunk);
  int64_t positions() const { return static_cast<int64_t>(tokens_.size()); }
  int64_t first_layer() const { return first_layer_; }
  int64_t layers_done() const { return layer_; }
  int64_t positions_done() const { return pos_; }  // of layer layers_done()
  int64_t steps() const { return steps_; }
  double ms() const { return ms_; }
  // Memory it holds beside the live cache: the hidden states of the n0 carried positions
  // entering the layer being healed.
  static size_t extra_bytes(const ModelConfig& c, int64_t n0);

 private:
  std::vector<int32_t> tokens_;
  std::vector<float> hidden_;  // [n0 × hidden]: states entering layer_, from the first step
  int64_t first_layer_ = 0, layer_ = 0, pos_ = 0, steps_ = 0;
  double ms_ = 0;
};

}  // namespace molt::runtime
