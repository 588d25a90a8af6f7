#include "tokenizer/bytes_index.h"

namespace molt::tok {

uint64_t hash_bytes(std::string_view s) {
  uint64_t h = 0x9E3779B97F4A7C15ull ^ (s.size() * 0xC2B2AE3D27D4EB4Full);
  size_t i = 0;
  for (; i + 8 <= s.size(); i += 8) {
    uint64_t w;
    std::memcpy(&w, s.data() + i, 8);
    h = (h ^ w) * 0xFF51AFD7ED558CCDull;
    h ^= h >> 32;
  }
  uint64_t w = 0;
  std::memcpy(&w, s.data() + i, s.size() - i);
  h = (h ^ w) * 0xC4CEB9FE1A85EC53ull;
  h ^= h >> 29;
  h *= 0x9E3779B97F4A7C15ull;
  return h ^ (h >> 32);
}

int32_t BytesIndex::insert(std::string_view key, int32_t id) {
  if ((size_ + 1) * 2 > slots_.size()) rehash(slots_.size() * 2);
  const uint64_t h = hash_bytes(key);
  for (size_t i = h & mask_;; i = (i + 1) & mask_) {
    Slot& s = slots_[i];
    if (s.data == nullptr) {
      // An empty key still needs a non-null pointer to mark the slot used.
      s = {h, key.data() != nullptr ? key.data() : "", static_cast<uint32_t>(key.size()), id};
      ++size_;
      return -1;
    }
    if (s.hash == h && s.size == key.size() && std::memcmp(s.data, key.data(), key.size()) == 0) {
      return s.id;
    }
  }
}

void BytesIndex::rehash(size_t capacity) {
  size_t cap = 16;
  while (cap < capacity) cap <<= 1;
  std::vector<Slot> old = std::move(slots_);
  slots_.assign(cap, Slot{0, nullptr, 0, 0});
  mask_ = cap - 1;
  for (const Slot& s : old) {
    if (s.data == nullptr) continue;
    size_t i = s.hash & mask_;
    while (slots_[i].data != nullptr) i = (i + 1) & mask_;
    slots_[i] = s;
  }
}

}  // namespace molt::tok
