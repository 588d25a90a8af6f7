// A std::vector whose storage starts at a cache-line boundary.
#pragma once

#include <cstddef>
#include <new>
#include <vector>

namespace molt {

// The AVX-512 decode kernels load 64 bytes at a time; glibc puts a large allocation 16 bytes into
// its pages, so with a plain vector every one of those loads would span two cache lines.
template <class T>
struct CacheLineAllocator {
  using value_type = T;
  static constexpr std::align_val_t kAlign{64};

  CacheLineAllocator() = default;
  template <class U>
  explicit CacheLineAllocator(const CacheLineAllocator<U>& /*other*/) {}

  T* allocate(std::size_t n) { return static_cast<T*>(::operator new(n * sizeof(T), kAlign)); }
  void deallocate(T* p, std::size_t /*n*/) { ::operator delete(p, kAlign); }

  template <class U>
  bool operator==(const CacheLineAllocator<U>& /*other*/) const {
    return true;
  }
};

template <class T>
using AlignedVector = std::vector<T, CacheLineAllocator<T>>;

}  // namespace molt
