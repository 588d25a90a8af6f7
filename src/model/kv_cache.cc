#include "molt/model/kv_cache.h"

#include <algorithm>

#include "molt/common/error.h"

namespace molt {

KVCache::KVCache(const CacheGeometry& g, int64_t capacity, bool keep_hidden)
    : g_(g), keep_hidden_(keep_hidden) {
  if (g.n_layers <= 0 || g.n_kv_heads <= 0 || g.head_dim <= 0) {
    fail("KVCache: invalid geometry (layers {}, kv heads {}, head_dim {})", g.n_layers,
         g.n_kv_heads, g.head_dim);
  }
  k_.resize(g.n_layers);
  v_.resize(g.n_layers);
  if (keep_hidden_) hidden_.resize(g.n_layers + 1);
  grow(std::max<int64_t>(capacity, 1));
}

void KVCache::grow(int64_t capacity) {
  const size_t kv = static_cast<size_t>(capacity * g_.kv_dim());
  for (auto& k : k_) k.resize(kv);
  for (auto& v : v_) v.resize(kv);
  for (auto& h : hidden_) h.resize(static_cast<size_t>(capacity * g_.hidden_size));
  capacity_ = capacity;
}

std::span<float> KVCache::k(int64_t layer) {
  return k_.at(layer);
}
std::span<float> KVCache::v(int64_t layer) {
  return v_.at(layer);
}
std::span<const float> KVCache::k(int64_t layer) const {
  return k_.at(layer);
}
std::span<const float> KVCache::v(int64_t layer) const {
  return v_.at(layer);
}

std::span<float> KVCache::hidden(int64_t index) {
  if (!keep_hidden_) fail("KVCache: hidden states were not kept (construct with keep_hidden)");
  return hidden_.at(index);
}
std::span<const float> KVCache::hidden(int64_t index) const {
  if (!keep_hidden_) fail("KVCache: hidden states were not kept (construct with keep_hidden)");
  return hidden_.at(index);
}

int64_t KVCache::reserve(int64_t n) {
  if (size_ + n > capacity_) grow(std::max(size_ + n, capacity_ * 2));
  return size_;
}

void KVCache::commit(int64_t n) {
  if (size_ + n > capacity_) fail("KVCache: commit of {} past capacity {}", n, capacity_);
  size_ += n;
}

void KVCache::truncate(int64_t n) {
  size_ = std::clamp<int64_t>(n, 0, size_);
}

void KVCache::set_size(int64_t n) {
  if (n < 0) fail("KVCache: negative size {}", n);
  if (n > capacity_) grow(n);
  size_ = n;
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
