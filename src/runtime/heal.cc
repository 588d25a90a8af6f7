// Healing a mapped cache layer by layer, in place (see heal.h).
#include "runtime/heal.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "molt/common/error.h"

namespace molt::runtime {

HealJob::HealJob(std::span<const int32_t> tokens, int64_t first_layer, std::vector<float> hidden)
    : tokens_(tokens.begin(), tokens.end()),
      hidden_(std::move(hidden)),
      first_layer_(first_layer),
      layer_(first_layer) {
  if (first_layer < 0) fail("heal: first layer {} is negative", first_layer);
  if (first_layer == 0 && !hidden_.empty()) fail("heal: hidden states given for layer 0");
}

size_t HealJob::extra_bytes(const ModelConfig& c, int64_t n0) {
  return static_cast<size_t>(n0) * sizeof(float) * static_cast<size_t>(c.hidden_size);
}

bool HealJob::step(const Model& m, KVCache& cache, std::span<const int32_t> window, int64_t chunk) {
  const auto t0 = std::chrono::steady_clock::now();
  const int64_t n0 = positions(), L = m.config().num_hidden_layers, d = m.config().hidden_size;
  bool done = false;
  if (first_layer_ >= L) fail("heal: first layer {} of a {}-layer receiver", first_layer_, L);
  if (layer_ < L && n0 > 0) {
    if (steps_ == 0 && first_layer_ > 0 && std::ssize(hidden_) != n0 * d) {
      fail("heal: {} hidden values entering layer {}, expected {} positions × {}", hidden_.size(),
           first_layer_, n0, d);
    }
    if (hidden_.empty()) {
      hidden_.resize(static_cast<size_t>(n0 * d));
      m.embed(tokens_, hidden_);
    }
    // Chunk [pos_, pos_ + len) of layer_ attends to [0, pos_) of layer_, already native, and
    // overwrites its own mapped rows: the live cache is the only copy.
    const int64_t len = std::min(std::max<int64_t>(1, chunk), n0 - pos_);
    m.forward_layers(layer_, pos_, len,
                     std::span<float>(hidden_).subspan(static_cast<size_t>(pos_ * d),
                                                       static_cast<size_t>(len * d)),
                     cache, layer_ + 1);
    pos_ += len;
    if (pos_ == n0) {
      ++layer_;
      pos_ = 0;
    }
  } else if (n0 == 0) {
    layer_ = L;
  }
  if (layer_ == L) {
    // Positions decoded since the seam saw a partly mapped cache: re-run them on the healed one.
    const int64_t held = cache.size();
    if (held > n0) {
      cache.truncate(n0);
      m.forward(window.subspan(static_cast<size_t>(n0), static_cast<size_t>(held - n0)), cache, {});
    }
    hidden_ = {};
    done = true;
  }
  ++steps_;
  ms_ += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return done;
}

}  // namespace molt::runtime
