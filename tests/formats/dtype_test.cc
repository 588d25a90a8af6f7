// The scalar conversions of molt/common/dtype.h: the integer-code half conversions against
// known values, and against the compiler's half type on every half and on float ties.
#include "molt/common/dtype.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

namespace molt {
namespace {

TEST(DType, PortableHalfConversionsGiveKnownValues) {
  const struct {
    float f;
    uint16_t h;
  } cases[] = {{1.0f, 0x3c00},          {-2.0f, 0xc000},      {65504.0f, 0x7bff},
               {65519.0f, 0x7bff},      {65520.0f, 0x7c00},   {1e9f, 0x7c00},
               {0x1p-14f, 0x0400},      {0x1p-24f, 0x0001},   {0x1p-25f, 0x0000},
               {0x1.8p-24f, 0x0002},    {0x1.4p-24f, 0x0001}, {-0.0f, 0x8000},
               {0x1.ffcp-15f, 0x0400},  {0.1f, 0x2e66},       {1.0009765625f, 0x3c01},
               {1.00048828125f, 0x3c00}};  // a tie rounds to the even 0x3c00
  for (const auto& c : cases) {
    EXPECT_EQ(f32_to_f16_portable(c.f), c.h) << c.f;
  }
  EXPECT_EQ(f32_to_f16_portable(std::numeric_limits<float>::infinity()), 0x7c00);
  EXPECT_TRUE(std::isnan(f16_to_f32_portable(f32_to_f16_portable(std::nanf("")))));
  EXPECT_EQ(f16_to_f32_portable(0x0001), 0x1p-24f);
  EXPECT_EQ(f16_to_f32_portable(0x7bff), 65504.0f);
  EXPECT_EQ(f16_to_f32_portable(0xfc00), -std::numeric_limits<float>::infinity());
  EXPECT_EQ(std::signbit(f16_to_f32_portable(0x8000)), true);
}

// The hardware conversions (dtype.h: _Float16 on x86, __fp16 on arm64) against the portable ones.
#if defined(__FLT16_MANT_DIG__) || (defined(__aarch64__) && defined(__GNUC__))
uint16_t compiler_f16(float f) {
  return f32_to_f16(f);
}

TEST(DType, PortableHalfConversionsMatchTheCompiler) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float want = f16_to_f32(static_cast<uint16_t>(h));
    const float got = f16_to_f32_portable(static_cast<uint16_t>(h));
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(got)) << h;
      continue;
    }
    ASSERT_EQ(std::bit_cast<uint32_t>(got), std::bit_cast<uint32_t>(want)) << h;
    // Round trips, the ties halfway to the next half, and their float neighbours.
    const float next = f16_to_f32(static_cast<uint16_t>(h + 1));
    for (float f : {want, 0.5f * (want + next), std::nextafter(0.5f * (want + next), 0.0f),
                    std::nextafter(0.5f * (want + next), next)}) {
      if (std::isnan(f)) continue;
      ASSERT_EQ(f32_to_f16_portable(f), compiler_f16(f)) << f << " from half " << h;
    }
  }
  std::mt19937 rng(7);
  for (int i = 0; i < 1000000; ++i) {
    const float f = std::bit_cast<float>(static_cast<uint32_t>(rng()));
    const uint16_t want = compiler_f16(f), got = f32_to_f16_portable(f);
    if (std::isnan(f)) {
      ASSERT_TRUE(std::isnan(f16_to_f32_portable(got))) << f;
    } else {
      ASSERT_EQ(got, want) << f;
    }
  }
}
#endif

}  // namespace
}  // namespace molt
