// The KV cache of one generation: per layer, K (after RoPE) and V, laid out
// [position][kv_head][head_dim] in f32, f16 or int8 (kernels/kv_rows.h), plus optionally the
// residual-stream hidden state entering each layer (and the final one), always f32. The
// transfer part reads and writes all of it.
//
// Plain data with its costs in sight: one allocation, made at construction for `capacity`
// positions and never grown; no implicit copies (copy() says what it costs).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "molt/kernels/kv_rows.h"
#include "molt/kernels/ops.h"

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
  // Allocates (and zeroes) `capacity` positions (at least 1) in one buffer; reserve() or
  // set_size() past them throws. keep_hidden records hidden states: n_layers + 1 vectors of
  // hidden_size per position (index l = input of layer l, index n_layers = output of the last
  // layer, before the final norm).
  // kv: the element type of K and V rows.
  KVCache(const CacheGeometry& g, int64_t capacity, bool keep_hidden = false,
          KvDType kv = KvDType::kF32);

  KVCache(const KVCache&) = delete;
  KVCache& operator=(const KVCache&) = delete;
  KVCache(KVCache&&) noexcept = default;
  KVCache& operator=(KVCache&&) noexcept = default;
  // A full copy (bytes() of memory, and as many copied); the scratch stays behind.
  KVCache copy() const;

  const CacheGeometry& geometry() const { return g_; }
  int64_t size() const { return size_; }  // positions filled
  bool keeps_hidden() const { return keep_hidden_; }
  KvDType kv_dtype() const { return kv_; }

  // f32 views of one layer over all capacity() rows; rows 0 .. size()-1 are valid.
  // [pos * kv_dim + head * head_dim + i]. Only for an f32 cache (else they throw): code that
  // serves every type reads and writes through read_k / write_k and the raw rows below.
  std::span<float> k(int64_t layer);
  std::span<float> v(int64_t layer);
  std::span<const float> k(int64_t layer) const;
  std::span<const float> v(int64_t layer) const;
  // Rows [first, first + n) of one layer converted to f32 (out: n × kv_dim), and written from
  // f32 (rounded to the cache's type). Any type; from f32 to f32 they copy.
  void read_k(int64_t layer, int64_t first, int64_t n, float* out) const;
  void read_v(int64_t layer, int64_t first, int64_t n, float* out) const;
  void write_k(int64_t layer, int64_t first, int64_t n, const float* in);
  void write_v(int64_t layer, int64_t first, int64_t n, const float* in);
  // The stored rows of one layer, row p at p · row_bytes(), for the attention kernels.
  const void* k_rows(int64_t layer) const;
  const void* v_rows(int64_t layer) const;
  size_t row_bytes() const { return row_bytes_; }

  // Hidden state at `index` (0 ..= n_layers) for every position: [pos * hidden_size + i].
  std::span<float> hidden(int64_t index);
  std::span<const float> hidden(int64_t index) const;

  // Checks that n more positions fit and returns the first new one; the model fills them, then
  // commit(n) makes them visible. Throws when they would pass the capacity.
  int64_t reserve(int64_t n);
  void commit(int64_t n);
  // Drops positions >= n (undo, or re-prefill from a point).
  void truncate(int64_t n);
  // Sets the filled length directly after a caller wrote rows itself (transfer); at most
  // capacity().
  void set_size(int64_t n);
  void clear() { size_ = 0; }

  // Sheds context (DESIGN.md §2): drops positions [n_sink, n_sink + n_drop), moves the later
  // ones down by n_drop and re-rotates their keys from position p to p − n_drop (rope: the
  // model's RoPE, Model::rope()). Values and hidden states just move. Costs one pass over the
  // kept rows of every layer. n_drop = 0 does nothing.
  void shed(int64_t n_sink, int64_t n_drop, const RopeSpec& rope);

  size_t bytes() const;  // memory held for K, V (and hidden states), at capacity
  size_t bytes_per_token() const;
  size_t kv_bytes_per_token() const;  // K and V of every layer, without hidden states
  int64_t capacity() const { return capacity_; }

  // Working memory of the model's forward pass over this cache (not part of its contents:
  // copy() leaves it behind). Kept at the largest size asked for, so once a prefill or the
  // first decode step has sized it, decode steps allocate nothing; owned per cache, so
  // generations interleaved on one Model never share it.
  std::span<float> scratch(size_t floats);
  size_t scratch_bytes() const { return scratch_.size() * sizeof(float); }

 private:
  KVCache() = default;
  // K of layer l = 2l, V = 2l + 1, hidden i = 2·n_layers + i.
  std::byte* block(int64_t index);
  const std::byte* block(int64_t index) const;
  size_t block_row_bytes(int64_t index) const;
  std::span<float> f32_block(int64_t index, const char* what) const;
  std::byte* rows(int64_t index, int64_t first, int64_t n, const char* what) const;
  int64_t check_layer(int64_t layer) const;
  int64_t check_hidden(int64_t index) const;

  CacheGeometry g_;
  int64_t capacity_ = 0;
  int64_t size_ = 0;
  bool keep_hidden_ = false;
  KvDType kv_ = KvDType::kF32;
  size_t row_bytes_ = 0;     // of a K or V row
  std::vector<float> data_;  // every block, one after another, each capacity_ rows (f32: aligned)
  std::vector<float> scratch_;
};

}  // namespace molt
