// Healing a mapped cache layer by layer (see heal.h).
#include "runtime/heal.h"

#include <algorithm>
#include <chrono>
#include <cstring>

namespace molt::runtime {

HealJob::HealJob(const Model& receiver, std::span<const int32_t> tokens)
    : tokens_(tokens.begin(), tokens.end()) {
  const int64_t n = positions(), d = receiver.config().hidden_size;
  hidden_.resize(static_cast<size_t>(n * d));
  receiver.embed(tokens_, hidden_);
  shadow_ = std::make_unique<KVCache>(receiver.new_cache(std::max<int64_t>(n, 1)));
}

size_t HealJob::extra_bytes(const ModelConfig& c, int64_t n0) {
  return static_cast<size_t>(n0) * sizeof(float) *
         static_cast<size_t>(2 * c.num_hidden_layers * c.kv_dim() + c.hidden_size);
}

bool HealJob::step(const Model& m, KVCache& cache, std::span<const int32_t> window, int64_t chunk) {
  const auto t0 = std::chrono::steady_clock::now();
  const int64_t n0 = positions(), L = m.config().num_hidden_layers, d = m.config().hidden_size;
  bool done = false;
  if (layer_ < L) {
    const int64_t len = std::min(std::max<int64_t>(1, chunk), n0 - pos_);
    m.forward_layers(layer_, pos_, len,
                     std::span<float>(hidden_).subspan(static_cast<size_t>(pos_ * d),
                                                       static_cast<size_t>(len * d)),
                     *shadow_, layer_ + 1);
    pos_ += len;
    if (pos_ == n0) {  // this layer is native for every carried position: swap it in
      const size_t rows = static_cast<size_t>(n0 * m.config().kv_dim());
      std::copy_n(shadow_->k(layer_).data(), rows, cache.k(layer_).data());
      std::copy_n(shadow_->v(layer_).data(), rows, cache.v(layer_).data());
      ++layer_;
      pos_ = 0;
    }
  }
  if (layer_ == L) {
    // Positions decoded since the seam saw a partly mapped cache: re-run them on the healed one.
    const int64_t held = cache.size();
    if (held > n0) {
      cache.truncate(n0);
      m.forward(window.subspan(static_cast<size_t>(n0), static_cast<size_t>(held - n0)), cache, {});
    }
    hidden_ = {};
    shadow_.reset();
    done = true;
  }
  ++steps_;
  ms_ += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return done;
}

}  // namespace molt::runtime
