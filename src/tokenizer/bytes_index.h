// Open-addressing map from byte strings to ids, for the 150k-token vocabularies: one flat
// array, a stored 64-bit hash that rejects most mismatches without touching the key bytes.
// Keys are views: the strings they point into must outlive the index and never move.
#pragma once

#include <cstdint>
#include <cstring>
#include <string_view>
#include <vector>

namespace molt::tok {

uint64_t hash_bytes(std::string_view s);

class BytesIndex {
 public:
  BytesIndex() { rehash(16); }
  void reserve(size_t n) {
    if (n * 2 > slots_.size()) rehash(n * 2);
  }
  // Returns the id already stored for `key` if there is one (and stores nothing), else -1.
  int32_t insert(std::string_view key, int32_t id);
  int32_t find(std::string_view key) const {
    const uint64_t h = hash_bytes(key);
    for (size_t i = h & mask_;; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.data == nullptr) return -1;
      if (s.hash == h && s.size == key.size() && std::memcmp(s.data, key.data(), key.size()) == 0) {
        return s.id;
      }
    }
  }
  size_t size() const { return size_; }

 private:
  struct Slot {
    uint64_t hash;
    const char* data;  // nullptr: empty slot
    uint32_t size;
    int32_t id;
  };
  void rehash(size_t capacity);
  std::vector<Slot> slots_;
  size_t mask_ = 0, size_ = 0;
};

}  // namespace molt::tok
