// The KV cache of one generation: per layer, K (after RoPE) and V, laid out
// [position][kv_head][head_dim] in f32, plus optionally the residual-stream hidden state
// entering each layer (and the final one). The transfer part reads and writes all of it.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace molt {

struct CacheGeometry {
  int64_t n_layers = 0;
  int64_t n_kv_heads = 0;
  int64_t head_dim = 0;
  int64_t hidden_size = 0;
  int64_t kv_dim() const { return n_kv_heads * head_dim; }
};

class KVCache {
 public:
  // `capacity` positions are reserved up front (the cache grows past it when needed).
  // keep_hidden records hidden states: n_layers + 1 vectors of hidden_size per position
  // (index l = input of layer l, index n_layers = output of the last layer, before the
  // final norm).
  KVCache(const CacheGeometry& g, int64_t capacity, bool keep_hidden = false);

  const CacheGeometry& geometry() const { return g_; }
  int64_t size() const { return size_; }  // positions filled
  bool keeps_hidden() const { return keep_hidden_; }

  // Views of one layer; rows 0 .. size()-1 are valid. [pos * kv_dim + head * head_dim + i]
  std::span<float> k(int64_t layer);
  std::span<float> v(int64_t layer);
  std::span<const float> k(int64_t layer) const;
  std::span<const float> v(int64_t layer) const;
  // Hidden state at `index` (0 ..= n_layers) for every position: [pos * hidden_size + i].
  std::span<float> hidden(int64_t index);
  std::span<const float> hidden(int64_t index) const;

  // Makes room for n more positions and returns the first new position; the model fills
  // them, then commit(n) makes them visible.
  int64_t reserve(int64_t n);
  void commit(int64_t n);
  // Drops positions >= n (undo, or re-prefill from a point).
  void truncate(int64_t n);
  // Sets the filled length directly after a caller wrote rows itself (transfer).
  void set_size(int64_t n);
  void clear() { size_ = 0; }

  size_t bytes() const;  // memory held, at capacity
  size_t bytes_per_token() const;
  int64_t capacity() const { return capacity_; }

 private:
  void grow(int64_t capacity);
  CacheGeometry g_;
  int64_t capacity_ = 0;
  int64_t size_ = 0;
  bool keep_hidden_ = false;
  std::vector<std::vector<float>> k_, v_, hidden_;
};

}  // namespace molt
