// Remembers the ids of pieces already encoded (prose repeats its words). Flat storage: piece
// bytes and ids live in two arenas and a probe table holds offsets into them; when the table is
// full everything is dropped at once. Not thread-safe: Bpe guards it with a mutex.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace molt::tok {

class PieceCache {
 public:
  static constexpr size_t kMaxPiece = 255;  // longer pieces are rare; they are not cached

  // 16k pieces: the table (512 KiB) stays in L2; Hugging Face keeps 10k.
  explicit PieceCache(size_t max_entries = size_t{1} << 14);
  // Appends the ids cached for `piece` (whose hash_bytes() is `hash`) and returns true.
  bool lookup(std::string_view piece, uint64_t hash, std::vector<int32_t>& out) const;
  void insert(std::string_view piece, uint64_t hash, std::span<const int32_t> ids);
  void clear();
  size_t size() const { return size_; }

 private:
  struct Slot {
    uint32_t hash;  // low half of hash_bytes(); the probe position uses the same bits
    uint32_t key_offset;
    uint32_t ids_offset;
    uint16_t key_size;  // 0: empty slot
    uint16_t ids_size;
  };
  std::vector<Slot> slots_;
  std::string keys_;
  std::vector<int32_t> ids_;
  size_t max_entries_, size_ = 0;
};

}  // namespace molt::tok
