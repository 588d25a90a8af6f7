#include "molt/kernels/linear.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <tuple>
#include <vector>

#include "hwy/targets.h"
#include "kernels/matmul.h"
#include "kernels/matvec.h"
#include "kernels_test_util.h"
#include "molt/common/error.h"
#include "molt/kernels/threads.h"

namespace molt {
namespace {

using test::make_weights;
using test::random_floats;

// y = W x in double, with the bound sum |w||x| that f32 rounding error scales with.
void reference(const test::TestWeights& w, const float* x, int64_t t, std::vector<double>& y,
               std::vector<double>& mag) {
  y.assign(static_cast<size_t>(w.rows), 0.0);
  mag.assign(static_cast<size_t>(w.rows), 0.0);
  for (int64_t r = 0; r < w.rows; ++r) {
    for (int64_t c = 0; c < w.cols; ++c) {
      const double p =
          static_cast<double>(w.exact[static_cast<size_t>(r * w.cols + c)]) * x[t * w.cols + c];
      y[static_cast<size_t>(r)] += p;
      mag[static_cast<size_t>(r)] += std::fabs(p);
    }
  }
}

void expect_close(const test::TestWeights& w, const std::vector<float>& x, int64_t n,
                  const std::vector<float>& y, const std::string& what) {
  std::vector<double> ref, mag;
  for (int64_t t = 0; t < n; ++t) {
    reference(w, x.data(), t, ref, mag);
    for (int64_t r = 0; r < w.rows; ++r) {
      const double got = y[static_cast<size_t>(t * w.rows + r)];
      const double tol = 1e-5 * mag[static_cast<size_t>(r)] + 1e-7;
      ASSERT_NEAR(got, ref[static_cast<size_t>(r)], tol) << what << " token " << t << " row " << r;
    }
  }
}

class LinearTest : public ::testing::TestWithParam<std::tuple<DType, int64_t, int64_t>> {};

TEST_P(LinearTest, MatvecMatchesDoubleReference) {
  const auto [dtype, rows, cols] = GetParam();
  const auto w = make_weights(dtype, rows, cols, 1);
  const auto x = random_floats(static_cast<size_t>(cols), 2);
  std::vector<float> y(static_cast<size_t>(rows), -123.0f);
  matvec(w.view(), x.data(), y.data());
  expect_close(w, x, 1, y, "matvec");
}

TEST_P(LinearTest, MatmulMatchesDoubleReference) {
  const auto [dtype, rows, cols] = GetParam();
  const auto w = make_weights(dtype, rows, cols, 3);
  for (int64_t n : {1, 3, 17}) {
    const auto x = random_floats(static_cast<size_t>(n * cols), 4);
    std::vector<float> y(static_cast<size_t>(n * rows), -123.0f);
    matmul(w.view(), x.data(), n, y.data());
    expect_close(w, x, n, y, "matmul n=" + std::to_string(n));
  }
}

TEST_P(LinearTest, DequantizeRowIsExact) {
  const auto [dtype, rows, cols] = GetParam();
  const auto w = make_weights(dtype, rows, cols, 5);
  std::vector<float> out(static_cast<size_t>(cols));
  for (int64_t r : {int64_t{0}, rows / 2, rows - 1}) {
    dequantize_row(w.view(), r, out.data());
    for (int64_t c = 0; c < cols; ++c) {
      ASSERT_EQ(out[static_cast<size_t>(c)], w.exact[static_cast<size_t>(r * cols + c)]);
    }
  }
}

// Odd sizes hit every SIMD tail; 64 x 896 and 37 x 4864 hit the full-width paths.
INSTANTIATE_TEST_SUITE_P(Shapes, LinearTest,
                         ::testing::Combine(::testing::Values(DType::F32, DType::BF16, DType::F16),
                                            ::testing::Values(int64_t{1}, int64_t{13}, int64_t{64}),
                                            ::testing::Values(int64_t{1}, int64_t{20}, int64_t{897},
                                                              int64_t{896})),
                         [](const auto& info) {
                           return std::string(dtype_name(std::get<0>(info.param))) + "_" +
                                  std::to_string(std::get<1>(info.param)) + "x" +
                                  std::to_string(std::get<2>(info.param));
                         });

TEST(Linear, MatmulSpansSeveralWidenedTiles) {
  // Tiles of 16 rows: 37 rows are three tiles, the last one partial.
  for (DType dtype : {DType::BF16, DType::F16}) {
    const auto w = make_weights(dtype, 37, 897, 6);
    const auto x = random_floats(static_cast<size_t>(5 * 897), 7);
    std::vector<float> y(5 * 37, -123.0f);
    matmul_widened(w.view(), x.data(), 5, y.data(), 16);
    expect_close(w, x, 5, y, std::string("matmul ") + std::string(dtype_name(dtype)));
  }
}

TEST(Linear, MatvecSameResultForAnyThreadCount) {
  const auto w = make_weights(DType::BF16, 203, 896, 8);
  const auto x = random_floats(896, 9);
  std::vector<float> y1(203), y2(203);
  const int before = num_threads();
  set_num_threads(1);
  matvec(w.view(), x.data(), y1.data());
  set_num_threads(2);
  matvec(w.view(), x.data(), y2.data());
  set_num_threads(before);
  EXPECT_EQ(y1, y2);  // each row is summed by one thread in a fixed order
}

// The CI machine runs one SIMD target; mock the CPU so every compiled one (AVX3, AVX2, SSE4,
// scalar, ...) that this CPU can execute is checked.
TEST(Linear, EverySimdTargetMatchesReference) {
  std::vector<std::string> seen;
  for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    seen.push_back(simd_target_name());
    for (DType dtype : {DType::F32, DType::BF16, DType::F16}) {
      for (int64_t cols : {7, 64, 897}) {
        const auto w = make_weights(dtype, 13, cols, 10);
        const auto x = random_floats(static_cast<size_t>(cols), 11);
        std::vector<float> y(13), row(static_cast<size_t>(cols));
        matvec(w.view(), x.data(), y.data());
        expect_close(w, x, 1, y, seen.back() + " " + std::string(dtype_name(dtype)));
        dequantize_row(w.view(), 12, row.data());
        for (int64_t c = 0; c < cols; ++c) {
          ASSERT_EQ(row[static_cast<size_t>(c)], w.exact[static_cast<size_t>(12 * cols + c)]);
        }
      }
    }
  }
  hwy::SetSupportedTargetsForTest(0);
  std::string names;
  for (const auto& n : seen) names += n + " ";
  RecordProperty("targets", names);
#if defined(__aarch64__)
  // arm64: NEON is every CPU's baseline, so Highway compiles it alone (SVE is disabled).
  EXPECT_EQ(names, "NEON ");
#else
  EXPECT_GE(seen.size(), 2u) << names;  // at least the best target and the scalar fallback
#endif
}

TEST(Linear, RejectsUnsupportedDtype) {
  std::vector<int32_t> data(4);
  const WeightMatrix w{DType::I32, 2, 2, data.data()};
  float x[2] = {1, 2}, y[2];
  try {
    matvec(w, x, y);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("matvec: weight dtype I32 is not supported"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(matmul(w, x, 1, y), Error);
  EXPECT_THROW(dequantize_row(w, 0, y), Error);
  // I8 is quantised: without a group size and scales it is refused too.
  const WeightMatrix i8{DType::I8, 2, 2, data.data()};
  EXPECT_THROW(matvec(i8, x, y), Error);
}

TEST(Linear, RejectsNullDataAndBadRow) {
  const WeightMatrix null_w{DType::F32, 2, 2, nullptr};
  float x[2] = {1, 2}, y[2];
  EXPECT_THROW(matvec(null_w, x, y), Error);
  const std::vector<float> data(4, 1.0f);
  const WeightMatrix w{DType::F32, 2, 2, data.data()};
  try {
    dequantize_row(w, 2, y);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("row 2 is outside [0, 2)"), std::string::npos) << e.what();
  }
  EXPECT_THROW(matmul(w, x, -1, y), Error);
}

}  // namespace
}  // namespace molt
