// Byte-level BPE: a piece starts as one token per byte, then the adjacent pair with the lowest
// merge rank is merged (leftmost first on ties) until no pair has a merge. This is Hugging
// Face's BPE model without dropout; results per piece are cached.
#pragma once

#include <array>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tokenizer/bytes_index.h"
#include "tokenizer/piece_cache.h"

namespace molt::tok {

// Open-addressing map from a token pair to its merge (rank and resulting id).
class PairMap {
 public:
  struct Merge {
    int32_t rank;
    int32_t result;
  };
  explicit PairMap(size_t n = 0);
  // A pair listed twice keeps its last rank, as Hugging Face's merge map does.
  void insert(int32_t left, int32_t right, Merge m);
  const Merge* find(int32_t left, int32_t right) const {
    const uint64_t key = pack(left, right);
    for (size_t i = slot(key);; i = (i + 1) & mask_) {
      if (slots_[i].key == key) return &slots_[i].merge;
      if (slots_[i].key == kEmpty) return nullptr;
    }
  }
  size_t size() const { return size_; }

 private:
  static constexpr uint64_t kEmpty = ~0ull;
  static uint64_t pack(int32_t l, int32_t r) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(l)) << 32) | static_cast<uint32_t>(r);
  }
  size_t slot(uint64_t key) const { return (key * 0x9E3779B97F4A7C15ull) >> shift_; }
  // Key and value side by side: a lookup touches one cache line.
  struct Slot {
    uint64_t key;
    Merge merge;
  };
  std::vector<Slot> slots_;
  size_t mask_ = 0, size_ = 0;
  int shift_ = 64;
};

class Bpe {
 public:
  // vocab: id -> token bytes (empty = no token with that id); merges: (left, right) ids in
  // priority order. `source` names the file in error messages. ignore_merges: a piece that is a
  // whole token maps to it directly (tokenizer.json "ignore_merges").
  Bpe(std::vector<std::string> vocab, const std::vector<std::pair<int32_t, int32_t>>& merges,
      bool ignore_merges, const std::string& source);
  Bpe(const Bpe&) = delete;
  Bpe& operator=(const Bpe&) = delete;

  // Appends the ids of one pre-tokenizer piece (non-empty bytes).
  void encode(std::string_view piece, std::vector<int32_t>& out) const;
  // The same without the cache (benchmarks and tests compare the two).
  void encode_uncached(std::string_view piece, std::vector<int32_t>& out) const;

  // -1 when absent.
  int32_t token_id(std::string_view bytes) const { return token_to_id_.find(bytes); }
  const std::vector<std::string>& vocab() const { return vocab_; }
  const PairMap& merges() const { return merges_; }
  void clear_cache() const;

 private:
  int32_t byte_token(uint8_t b) const;
  void merge_small(std::string_view piece, std::vector<int32_t>& out) const;
  void merge_large(std::string_view piece, std::vector<int32_t>& out) const;

  std::vector<std::string> vocab_;
  BytesIndex token_to_id_;  // views into vocab_, which never changes after construction
  std::array<int32_t, 256> byte_token_{};
  PairMap merges_;
  bool ignore_merges_ = false;

  mutable std::mutex cache_mu_;
  mutable PieceCache cache_;
};

}  // namespace molt::tok
