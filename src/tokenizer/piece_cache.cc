#include "tokenizer/piece_cache.h"

#include <cstring>

namespace molt::tok {

PieceCache::PieceCache(size_t max_entries) : max_entries_(max_entries) {
  size_t cap = 16;
  while (cap < max_entries * 2) cap <<= 1;
  slots_.assign(cap, Slot{0, 0, 0, 0, 0});
}

bool PieceCache::lookup(std::string_view piece, uint64_t hash, std::vector<int32_t>& out) const {
  const size_t mask = slots_.size() - 1;
  for (size_t i = hash & mask;; i = (i + 1) & mask) {
    const Slot& s = slots_[i];
    if (s.key_size == 0) return false;
    if (s.hash == static_cast<uint32_t>(hash) && s.key_size == piece.size() &&
        std::memcmp(keys_.data() + s.key_offset, piece.data(), piece.size()) == 0) {
      out.insert(out.end(), ids_.begin() + s.ids_offset, ids_.begin() + s.ids_offset + s.ids_size);
      return true;
    }
  }
}

void PieceCache::insert(std::string_view piece, uint64_t hash, std::span<const int32_t> ids) {
  if (piece.empty() || piece.size() > kMaxPiece || ids.size() > 0xFFFF) return;
  if (size_ >= max_entries_) clear();
  const size_t mask = slots_.size() - 1;
  size_t i = hash & mask;
  for (; slots_[i].key_size != 0; i = (i + 1) & mask) {
    const Slot& s = slots_[i];
    if (s.hash == static_cast<uint32_t>(hash) && s.key_size == piece.size() &&
        std::memcmp(keys_.data() + s.key_offset, piece.data(), piece.size()) == 0) {
      return;  // another thread got here first
    }
  }
  slots_[i] = {static_cast<uint32_t>(hash), static_cast<uint32_t>(keys_.size()),
               static_cast<uint32_t>(ids_.size()), static_cast<uint16_t>(piece.size()),
               static_cast<uint16_t>(ids.size())};
  keys_.append(piece);
  ids_.insert(ids_.end(), ids.begin(), ids.end());
  ++size_;
}

void PieceCache::clear() {
  std::fill(slots_.begin(), slots_.end(), Slot{0, 0, 0, 0, 0});
  keys_.clear();
  ids_.clear();
  size_ = 0;
}

}  // namespace molt::tok
