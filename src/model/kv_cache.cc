#include "molt/model/kv_cache.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "molt/common/error.h"

namespace molt {

KVCache::KVCache(const CacheGeometry& g, int64_t capacity, bool keep_hidden, KvDType kv)
    : g_(g), keep_hidden_(keep_hidden), kv_(kv) {
  if (g.n_layers <= 0 || g.n_kv_heads <= 0 || g.head_dim <= 0) {
    fail("KVCache: invalid geometry (layers {}, kv heads {}, head_dim {})", g.n_layers,
         g.n_kv_heads, g.head_dim);
  }
  if (keep_hidden && g.hidden_size <= 0) {
    fail("KVCache: hidden states kept but hidden_size is {}", g.hidden_size);
  }
  if (capacity < 0) fail("KVCache: negative capacity {}", capacity);
  capacity_ = std::max<int64_t>(capacity, 1);
  row_bytes_ = kv_row_bytes(kv, g.n_kv_heads, g.head_dim);
  data_.resize(bytes() / sizeof(float));
}

KVCache KVCache::copy() const {
  KVCache c;
  c.g_ = g_;
  c.capacity_ = capacity_;
  c.size_ = size_;
  c.keep_hidden_ = keep_hidden_;
  c.kv_ = kv_;
  c.row_bytes_ = row_bytes_;
  c.data_ = data_;
  return c;
}

size_t KVCache::block_row_bytes(int64_t index) const {
  return index < 2 * g_.n_layers ? row_bytes_ : sizeof(float) * static_cast<size_t>(g_.hidden_size);
}

std::byte* KVCache::block(int64_t index) {
  return const_cast<std::byte*>(std::as_const(*this).block(index));
}

const std::byte* KVCache::block(int64_t index) const {
  const auto cap = static_cast<size_t>(capacity_);
  const int64_t L2 = 2 * g_.n_layers;
  const size_t kv = cap * row_bytes_;
  const size_t offset = index < L2 ? static_cast<size_t>(index) * kv
                                   : static_cast<size_t>(L2) * kv +
                                         static_cast<size_t>(index - L2) * cap * sizeof(float) *
                                             static_cast<size_t>(g_.hidden_size);
  return reinterpret_cast<const std::byte*>(data_.data()) + offset;
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

std::span<float> KVCache::f32_block(int64_t index, const char* what) const {
  if (index < 2 * g_.n_layers && kv_ != KvDType::kF32) {
    const char* f = index % 2 == 0 ? "k" : "v";
    fail("KVCache: {} of layer {} is stored as {}, not f32 (read_{} / write_{} convert)", what,
         index / 2, kv_dtype_name(kv_), f, f);
  }
  const size_t floats = static_cast<size_t>(capacity_) * block_row_bytes(index) / sizeof(float);
  return {reinterpret_cast<float*>(const_cast<std::byte*>(block(index))), floats};
}

std::span<float> KVCache::k(int64_t layer) {
  return f32_block(2 * check_layer(layer), "K");
}
std::span<float> KVCache::v(int64_t layer) {
  return f32_block(2 * check_layer(layer) + 1, "V");
}
std::span<const float> KVCache::k(int64_t layer) const {
  return f32_block(2 * check_layer(layer), "K");
}
std::span<const float> KVCache::v(int64_t layer) const {
  return f32_block(2 * check_layer(layer) + 1, "V");
}

std::span<float> KVCache::hidden(int64_t index) {
  return f32_block(check_hidden(index), "hidden");
}
std::span<const float> KVCache::hidden(int64_t index) const {
  return f32_block(check_hidden(index), "hidden");
}

std::byte* KVCache::rows(int64_t index, int64_t first, int64_t n, const char* what) const {
  if (first < 0 || n < 0 || first + n > capacity_) {
    fail("KVCache: {} rows [{}, {}) outside the capacity of {} positions", what, first, first + n,
         capacity_);
  }
  return const_cast<std::byte*>(block(index)) + static_cast<size_t>(first) * row_bytes_;
}

void KVCache::read_k(int64_t layer, int64_t first, int64_t n, float* out) const {
  kv_decode_rows(kv_, g_.n_kv_heads, g_.head_dim, rows(2 * check_layer(layer), first, n, "K"), n,
                 out);
}
void KVCache::read_v(int64_t layer, int64_t first, int64_t n, float* out) const {
  kv_decode_rows(kv_, g_.n_kv_heads, g_.head_dim, rows(2 * check_layer(layer) + 1, first, n, "V"),
                 n, out);
}
void KVCache::write_k(int64_t layer, int64_t first, int64_t n, const float* in) {
  kv_encode_rows(kv_, g_.n_kv_heads, g_.head_dim, in, n,
                 rows(2 * check_layer(layer), first, n, "K"));
}
void KVCache::write_v(int64_t layer, int64_t first, int64_t n, const float* in) {
  kv_encode_rows(kv_, g_.n_kv_heads, g_.head_dim, in, n,
                 rows(2 * check_layer(layer) + 1, first, n, "V"));
}
const void* KVCache::k_rows(int64_t layer) const {
  return block(2 * check_layer(layer));
}
const void* KVCache::v_rows(int64_t layer) const {
  return block(2 * check_layer(layer) + 1);
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
  const int64_t first = n_sink + n_drop, kept = size_ - first, kv = g_.kv_dim(), hd = g_.head_dim,
                L = g_.n_layers;
  // Every block moves its kept rows down in one memmove (the ranges overlap).
  const int64_t blocks = 2 * L + (keep_hidden_ ? L + 1 : 0);
  for (int64_t b = 0; b < blocks; ++b) {
    const size_t w = block_row_bytes(b);
    std::byte* base = block(b);
    std::memmove(base + static_cast<size_t>(n_sink) * w, base + static_cast<size_t>(first) * w,
                 static_cast<size_t>(kept) * w);
  }
  // Keys: one rotation per row by angle(p − n_drop) − angle(p); the angles of a position are
  // computed once and serve every layer. A row not stored as f32 is widened, rotated and
  // stored again (rounded once more).
#pragma omp parallel if (kept * L * kv > 65536)
  {
    std::vector<float> cs(static_cast<size_t>(hd)), row(static_cast<size_t>(kv));
#pragma omp for schedule(static)
    for (int64_t i = 0; i < kept; ++i) {
      const int64_t to = n_sink + i;
      rope_cos_sin(rope, to, cs.data(), cs.data() + hd / 2, to + n_drop);
      for (int64_t l = 0; l < L; ++l) {
        if (kv_ == KvDType::kF32) {
          rope_rotate(hd, cs.data(), cs.data() + hd / 2, k(l).data() + to * kv, g_.n_kv_heads);
        } else {
          read_k(l, to, 1, row.data());
          rope_rotate(hd, cs.data(), cs.data() + hd / 2, row.data(), g_.n_kv_heads);
          write_k(l, to, 1, row.data());
        }
      }
    }
  }
  size_ -= n_drop;
}

std::span<float> KVCache::scratch(size_t floats) {
  if (scratch_.size() < floats) scratch_.resize(floats);
  return {scratch_.data(), floats};
}

size_t KVCache::kv_bytes_per_token() const {
  return 2 * static_cast<size_t>(g_.n_layers) * row_bytes_;
}

size_t KVCache::bytes_per_token() const {
  size_t per = kv_bytes_per_token();
  if (keep_hidden_) per += static_cast<size_t>((g_.n_layers + 1) * g_.hidden_size) * sizeof(float);
  return per;
}

size_t KVCache::bytes() const {
  return bytes_per_token() * static_cast<size_t>(capacity_);
}

}  // namespace molt
