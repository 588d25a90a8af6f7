// Element types of stored tensors and the scalar conversions between them.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

namespace molt {

enum class DType : uint8_t { F32, F16, BF16, I8, U8, I32, U32, I64 };

constexpr size_t dtype_size(DType t) {
  switch (t) {
    case DType::F32:
    case DType::I32:
    case DType::U32:
      return 4;
    case DType::F16:
    case DType::BF16:
      return 2;
    case DType::I8:
    case DType::U8:
      return 1;
    case DType::I64:
      return 8;
  }
  return 0;
}

// The names safetensors uses in its header ("F32", "BF16", ...).
constexpr std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::F32:
      return "F32";
    case DType::F16:
      return "F16";
    case DType::BF16:
      return "BF16";
    case DType::I8:
      return "I8";
    case DType::U8:
      return "U8";
    case DType::I32:
      return "I32";
    case DType::U32:
      return "U32";
    case DType::I64:
      return "I64";
  }
  return "?";
}

// Returns false when the name is not one molt knows.
inline bool parse_dtype(std::string_view name, DType* out) {
  for (DType t : {DType::F32, DType::F16, DType::BF16, DType::I8, DType::U8, DType::I32, DType::U32,
                  DType::I64}) {
    if (dtype_name(t) == name) {
      *out = t;
      return true;
    }
  }
  return false;
}

inline float bf16_to_f32(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Round to nearest even, as PyTorch does; NaN stays NaN.
inline uint16_t f32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

inline float f16_to_f32(uint16_t h) {
  return static_cast<float>(std::bit_cast<_Float16>(h));
}
inline uint16_t f32_to_f16(float f) {
  return std::bit_cast<uint16_t>(static_cast<_Float16>(f));
}

}  // namespace molt
