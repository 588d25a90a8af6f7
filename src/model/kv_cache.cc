#include "molt/model/kv_cache.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "molt/common/error.h"

namespace molt {

KVCache::KVCache(const CacheGeometry& g, int64_t capacity, bool keep_hidden)
    : g_(g), keep_hidden_(keep_hidden) {
  if (g.n_layers <= 0 || g.n_kv_heads <= 0 || g.head_dim <= 0) {
    fail("KVCache: invalid geometry (layers {}, kv heads {}, head_dim {})", g.n_layers,
         g.n_kv_heads, g.head_dim);
  }
  if (keep_hidden && g.hidden_size <= 0) {
    fail("KVCache: hidden states kept but hidden_size is {}", g.hidden_size);
  }
  if (capacity < 0) fail("KVCache: negative capacity {}", capacity);
  capacity_ = std::max<int64_t>(capacity, 1);
  data_.resize(bytes() / sizeof(float));
}

KVCache KVCache::copy() const {
  KVCache c;
  c.g_ = g_;
  c.capacity_ = capacity_;
  c.size_ = size_;
  c.keep_hidden_ = keep_hidden_;
  c.data_ = data_;
  return c;
}

int64_t KVCache::block_floats(int64_t index) const {
  return capacity_ * (index < 2 * g_.n_layers ? g_.kv_dim() : g_.hidden_size);
}

float* KVCache::block(int64_t index) {
  return const_cast<float*>(std::as_const(*this).block(index));
}

const float* KVCache::block(int64_t index) const {
  const int64_t kv = capacity_ * g_.kv_dim(), L2 = 2 * g_.n_layers;
  const int64_t offset =
      index < L2 ? index * kv : L2 * kv + (index - L2) * capacity_ * g_.hidden_size;
  return data_.data() + offset;
}

int64_t KVCache::check_layer(int64_t layer) const {
  if (layer < 0 || layer >= g_.n_layers) {
    fail("KVCache: layer {} out of range [0, {})", layer, g_.n_layers);
  }
  return layer;
}

int64_t KVCache::check_hidden(int64_t index) const {
  if (!keep_hidden_) fail("KVCache: hidden states were not kept (construct with keep_hidden)");
  if (index < 0 || index > g_.n_layers) {
    fail("KVCache: hidden state {} out of range [0, {}]", index, g_.n_layers);
  }
  return 2 * g_.n_layers + index;
}

std::span<float> KVCache::k(int64_t layer) {
  const int64_t b = 2 * check_layer(layer);
  return {block(b), static_cast<size_t>(block_floats(b))};
}
std::span<float> KVCache::v(int64_t layer) {
  const int64_t b = 2 * check_layer(layer) + 1;
  return {block(b), static_cast<size_t>(block_floats(b))};
}
std::span<const float> KVCache::k(int64_t layer) const {
  const int64_t b = 2 * check_layer(layer);
  return {block(b), static_cast<size_t>(block_floats(b))};
}
std::span<const float> KVCache::v(int64_t layer) const {
  const int64_t b = 2 * check_layer(layer) + 1;
  return {block(b), static_cast<size_t>(block_floats(b))};
}

std::span<float> KVCache::hidden(int64_t index) {
  const int64_t b = check_hidden(index);
  return {block(b), static_cast<size_t>(block_floats(b))};
}
std::span<const float> KVCache::hidden(int64_t index) const {
  const int64_t b = check_hidden(index);
  return {block(b), static_cast<size_t>(block_floats(b))};
}

int64_t KVCache::reserve(int64_t n) {
  if (n < 0) fail("KVCache: reserve of {} positions", n);
  if (size_ + n > capacity_) {
    fail("KVCache: {} positions held + {} new = {} would pass the capacity of {} positions", size_,
         n, size_ + n, capacity_);
  }
  return size_;
}

void KVCache::commit(int64_t n) {
  if (n < 0 || size_ + n > capacity_) {
    fail("KVCache: commit of {} positions to {} held, capacity {}", n, size_, capacity_);
  }
  size_ += n;
}

void KVCache::truncate(int64_t n) {
  size_ = std::clamp<int64_t>(n, 0, size_);
}

void KVCache::set_size(int64_t n) {
  if (n < 0) fail("KVCache: negative size {}", n);
  if (n > capacity_) fail("KVCache: size of {} positions past the capacity of {}", n, capacity_);
  size_ = n;
}

void KVCache::shed(int64_t n_sink, int64_t n_drop, const RopeSpec& rope) {
  if (n_sink < 0 || n_drop < 0 || n_sink + n_drop > size_) {
    fail("KVCache: cannot shed {} positions after {} sink positions from {} held", n_drop, n_sink,
         size_);
  }
  if (rope.head_dim != g_.head_dim) {
    fail("KVCache: shed with RoPE head_dim {} on a cache of head_dim {}", rope.head_dim,
         g_.head_dim);
  }
  if (!(rope.theta > 0.0)) fail("KVCache: shed with RoPE theta {}", rope.theta);
  if (n_drop == 0) return;
  const int64_t first = n_sink + n_drop, kept = size_ - first, kv = g_.kv_dim(), d = g_.hidden_size,
                hd = g_.head_dim, L = g_.n_layers;
  // Every block moves its kept rows down in one memmove (the ranges overlap).
  const int64_t blocks = 2 * L + (keep_hidden_ ? L + 1 : 0);
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t w = b < 2 * L ? kv : d;
    float* base = block(b);
    std::memmove(base + n_sink * w, base + first * w,
                 sizeof(float) * static_cast<size_t>(kept * w));
  }
  // Keys: one rotation per row by angle(p − n_drop) − angle(p); the angles of a position are
  // computed once and serve every layer.
#pragma omp parallel if (kept * L * kv > 65536)
  {
    std::vector<float> cs(static_cast<size_t>(hd));
#pragma omp for schedule(static)
    for (int64_t i = 0; i < kept; ++i) {
      const int64_t to = n_sink + i;
      rope_cos_sin(rope, to, cs.data(), cs.data() + hd / 2, to + n_drop);
      for (int64_t l = 0; l < L; ++l) {
        rope_rotate(hd, cs.data(), cs.data() + hd / 2, block(2 * l) + to * kv, g_.n_kv_heads);
      }
    }
  }
  size_ -= n_drop;
}

std::span<float> KVCache::scratch(size_t floats) {
  if (scratch_.size() < floats) scratch_.resize(floats);
  return {scratch_.data(), floats};
}

size_t KVCache::bytes_per_token() const {
  size_t per = 2 * static_cast<size_t>(g_.n_layers * g_.kv_dim());
  if (keep_hidden_) per += static_cast<size_t>((g_.n_layers + 1) * g_.hidden_size);
  return per * sizeof(float);
}

size_t KVCache::bytes() const {
  return bytes_per_token() * static_cast<size_t>(capacity_);
}

}  // namespace molt
