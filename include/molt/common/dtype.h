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

// IEEE half from and to float in integer code, for compilers without _Float16 on the target
// (clang before 15 on x86, which clang-tidy uses). Rounds to nearest even; NaN stays NaN.
inline float f16_to_f32_portable(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
  if (exp == 0) {  // zero or subnormal: man · 2^-24, exact in float
    const float f = static_cast<float>(man) * 0x1p-24f;
    return sign != 0 ? -f : f;
  }
  const uint32_t u = exp == 0x1f ? sign | 0x7f800000u | (man << 13)  // inf, NaN
                                 : sign | ((exp + 112) << 23) | (man << 13);
  return std::bit_cast<float>(u);
}
inline uint16_t f32_to_f16_portable(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  const auto sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return sign | 0x7e00u | ((a >> 13) & 0x3ffu);  // NaN, quiet
  if (a >= 0x477ff000u) return sign | 0x7c00u;                        // 65520 and up round to inf
  if (a >= 0x38800000u) {  // a normal half: rebias, round the low 13 bits
    uint32_t r = a - 0x38000000u;
    r += 0xfffu + ((r >> 13) & 1u);
    return static_cast<uint16_t>(sign | (r >> 13));
  }
  // Subnormal or zero: |f| / 2^-24 (exact) rounded to an integer, half to even.
  const float v = std::bit_cast<float>(a) * 0x1p24f;
  auto q = static_cast<uint32_t>(v);
  const float rest = v - static_cast<float>(q);
  if (rest > 0.5f || (rest == 0.5f && (q & 1u) != 0)) ++q;
  return static_cast<uint16_t>(sign | q);  // q = 0x400 is the smallest normal, as it should be
}

#if defined(__aarch64__) && defined(__GNUC__)
// arm64: __fp16 converts with the FCVT instructions (GCC 12 has no _Float16 in C++ there).
inline float f16_to_f32(uint16_t h) {
  return static_cast<float>(std::bit_cast<__fp16>(h));
}
inline uint16_t f32_to_f16(float f) {
  return std::bit_cast<uint16_t>(static_cast<__fp16>(f));
}
#elif defined(__FLT16_MANT_DIG__)  // the compiler has _Float16 here: let it use the hardware
inline float f16_to_f32(uint16_t h) {
  return static_cast<float>(std::bit_cast<_Float16>(h));
}
inline uint16_t f32_to_f16(float f) {
  return std::bit_cast<uint16_t>(static_cast<_Float16>(f));
}
#else
inline float f16_to_f32(uint16_t h) {
  return f16_to_f32_portable(h);
}
inline uint16_t f32_to_f16(float f) {
  return f32_to_f16_portable(f);
}
#endif

}  // namespace molt
