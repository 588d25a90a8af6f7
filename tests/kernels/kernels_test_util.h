// Random inputs and 16-bit weight storage shared by the kernel tests.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "hwy/targets.h"
#include "molt/common/dtype.h"
#include "molt/kernels/linear.h"

namespace molt::test {

inline std::vector<float> random_floats(size_t n, uint32_t seed, float lo = -1.0f,
                                        float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

// A weight matrix in `dtype` built from f32 values, plus the exact f32 values it stores
// (rounded to the dtype) for the double-precision reference.
struct TestWeights {
  DType dtype;
  int64_t rows, cols;
  std::vector<float> f32;     // F32 storage
  std::vector<uint16_t> h16;  // BF16 / F16 storage
  std::vector<float> exact;   // what the stored values are, as f32
  WeightMatrix view() const {
    return {dtype, rows, cols,
            dtype == DType::F32 ? static_cast<const void*>(f32.data())
                                : static_cast<const void*>(h16.data())};
  }
};

inline TestWeights make_weights(DType dtype, int64_t rows, int64_t cols, uint32_t seed) {
  TestWeights t{dtype, rows, cols, {}, {}, random_floats(static_cast<size_t>(rows * cols), seed)};
  if (dtype == DType::F32) {
    t.f32 = t.exact;
  } else {
    t.h16.resize(t.exact.size());
    for (size_t i = 0; i < t.exact.size(); ++i) {
      t.h16[i] = dtype == DType::BF16 ? f32_to_bf16(t.exact[i]) : f32_to_f16(t.exact[i]);
      t.exact[i] = dtype == DType::BF16 ? bf16_to_f32(t.h16[i]) : f16_to_f32(t.h16[i]);
    }
  }
  return t;
}

// Fixture base for tests run once per compiled SIMD target this CPU can execute (AVX3, AVX2,
// SSE4, scalar, ...): dispatch is mocked to the target of the parameter.
class PerSimdTarget : public ::testing::TestWithParam<int64_t> {
 protected:
  void SetUp() override { hwy::SetSupportedTargetsForTest(GetParam()); }
  void TearDown() override { hwy::SetSupportedTargetsForTest(0); }
};

inline std::string simd_target_param_name(const ::testing::TestParamInfo<int64_t>& info) {
  return hwy::TargetName(info.param);
}

#define MOLT_INSTANTIATE_PER_SIMD_TARGET(fixture)                                    \
  INSTANTIATE_TEST_SUITE_P(Simd, fixture,                                            \
                           ::testing::ValuesIn(hwy::SupportedAndGeneratedTargets()), \
                           ::molt::test::simd_target_param_name)

}  // namespace molt::test
