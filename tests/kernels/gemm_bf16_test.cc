// The bf16 prefill path (kernels/gemm_bf16.h): exact to its rounded inputs, within a stated
// bound of the f32 path for dense and quantised weights, chosen and refused as documented.
#include "kernels/gemm_bf16.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "kernels/matmul.h"
#include "kernels_test_util.h"
#include "molt/common/error.h"
#include "molt/kernels/linear.h"
#include "molt/kernels/quant.h"
#include "test_util.h"

namespace molt {
namespace {

using test::make_weights;
using test::random_floats;

#define SKIP_WITHOUT_BF16()                                                        \
  if (!bf16_gemm_supported())                                                      \
  GTEST_SKIP() << "this CPU has no bf16 dot products: the bf16 path is not taken " \
                  "(matmul uses f32 sgemm, covered by linear_test.cc)"

// x rounded to bf16 in memory that ends right at a page that cannot be read: any read past
// its end faults.
class GuardedX {
 public:
  explicit GuardedX(const std::vector<float>& x) {
    const auto page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    const size_t bytes = x.size() * sizeof(uint16_t);
    span_ = (bytes + page - 1) / page * page + page;
    base_ = mmap(nullptr, span_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (base_ == MAP_FAILED) return;
    char* guard = static_cast<char*>(base_) + span_ - page;
    if (mprotect(guard, page, PROT_NONE) != 0) return;
    data_ = reinterpret_cast<uint16_t*>(guard - bytes);
    round_to_bf16(x.data(), static_cast<int64_t>(x.size()), data_);
  }
  ~GuardedX() {
    if (base_ != MAP_FAILED) munmap(base_, span_);
  }
  GuardedX(const GuardedX&) = delete;
  GuardedX& operator=(const GuardedX&) = delete;
  const uint16_t* data() const { return data_; }  // null when the mapping failed

 private:
  size_t span_ = 0;
  void* base_ = MAP_FAILED;
  uint16_t* data_ = nullptr;
};

// The product of n rows of x with w, x in an ordinary buffer.
std::vector<float> plain_product(const std::vector<float>& x, int64_t n, int64_t cols,
                                 const std::vector<uint16_t>& w, int64_t rows) {
  std::vector<uint16_t> xb(x.size());
  round_to_bf16(x.data(), static_cast<int64_t>(x.size()), xb.data());
  std::vector<float> y(static_cast<size_t>(n * rows));
  gemm_bf16(xb.data(), n, cols, w.data(), rows, y.data(), rows);
  return y;
}

TEST(GemmBf16, ReadsNothingPastTheEndOfX) {
  SKIP_WITHOUT_BF16();
  for (auto [n, rows, cols] : {std::tuple<int64_t, int64_t, int64_t>{1, 16, 33},
                               {5, 16, 33},
                               {17, 64, 257},
                               {16, 24, 895},
                               {3, 8, 64},
                               {2048, 64, 1088},
                               {2047, 64, 1088},
                               {100, 64, 1088}}) {
    SCOPED_TRACE(testing::Message() << n << " × " << cols << " · " << rows);
    const auto w = make_weights(DType::BF16, rows, cols, 5);
    const auto x = random_floats(static_cast<size_t>(n * cols), 6);
    const GuardedX xg(x);
    ASSERT_NE(xg.data(), nullptr);
    std::vector<float> got(static_cast<size_t>(n * rows));
    gemm_bf16(xg.data(), n, cols, w.h16.data(), rows, got.data(), rows);
    EXPECT_EQ(got, plain_product(x, n, cols, w.h16, rows));
  }
}

// Two threads multiplying at once inside a parallel region, as a map applies its layers, with a
// primitive of the same shape built outside the region first. With oneDNN's shared library
// scratchpad each overwrote the other's copy of x and read past its end: `molt serve` crashed
// mid-migration now and then, and this crashed every time.
TEST(GemmBf16, TwoThreadsAtOnceInsideAParallelRegion) {
  SKIP_WITHOUT_BF16();
  for (auto [n, rows, cols] : {std::tuple<int64_t, int64_t, int64_t>{2048, 64, 1088},
                               {2047, 64, 1088},
                               {700, 64, 1088},
                               {64, 64, 1088},
                               {61, 96, 33}}) {
    SCOPED_TRACE(testing::Message() << n << " × " << cols << " · " << rows);
    const auto w = make_weights(DType::BF16, rows, cols, 5);
    const auto x = random_floats(static_cast<size_t>(n * cols), 6);
    const std::vector<float> want = plain_product(x, n, cols, w.h16, rows);
    int same = 0;
#pragma omp parallel num_threads(2) reduction(+ : same)
    {
      const GuardedX xg(x);
      std::vector<float> got(static_cast<size_t>(n * rows));
      for (int rep = 0; rep < 3 && xg.data() != nullptr; ++rep) {
        gemm_bf16(xg.data(), n, cols, w.h16.data(), rows, got.data(), rows);
        same += got == want;
      }
    }
    EXPECT_EQ(same, 6);
  }
}

// A new shape per call (a server sees a new prompt length with every request) keeps at most
// kGemmBf16CachedShapes primitives, and a shape used again after being evicted is rebuilt and
// still right.
TEST(GemmBf16, ThePrimitiveCacheStaysBounded) {
  SKIP_WITHOUT_BF16();
  constexpr int64_t rows = 16, cols = 32;
  const auto w = make_weights(DType::BF16, rows, cols, 3);
  const int64_t most = kGemmBf16CachedShapes + 40;
  const auto x = random_floats(static_cast<size_t>(most * cols), 4);
  std::vector<uint16_t> xb(x.size());
  round_to_bf16(x.data(), static_cast<int64_t>(x.size()), xb.data());
  std::vector<float> first(static_cast<size_t>(2 * rows)), again(first.size());
  gemm_bf16(xb.data(), 2, cols, w.h16.data(), rows, first.data(), rows);
  for (int64_t n = 3; n <= most; ++n) {
    std::vector<float> y(static_cast<size_t>(n * rows));
    gemm_bf16(xb.data(), n, cols, w.h16.data(), rows, y.data(), rows);
    ASSERT_LE(gemm_bf16_cached_shapes(), kGemmBf16CachedShapes) << "after n = " << n;
  }
  EXPECT_EQ(gemm_bf16_cached_shapes(), kGemmBf16CachedShapes);
  gemm_bf16(xb.data(), 2, cols, w.h16.data(), rows, again.data(), rows);  // evicted: rebuilt
  EXPECT_EQ(first, again);
}

// Products of the bf16-rounded operands summed in double: what gemm_bf16 must reproduce up to
// its f32 accumulation.
TEST(GemmBf16, EqualsTheProductOfItsRoundedInputs) {
  SKIP_WITHOUT_BF16();
  for (auto [n, rows, cols] :
       {std::tuple<int64_t, int64_t, int64_t>{1, 7, 33}, {17, 64, 896}, {64, 130, 257}}) {
    const auto w = make_weights(DType::BF16, rows, cols, 11);
    const auto x = random_floats(static_cast<size_t>(n * cols), 12);
    std::vector<uint16_t> xb(x.size());
    round_to_bf16(x.data(), static_cast<int64_t>(x.size()), xb.data());
    const int64_t ldy = rows + 3;  // a wider output: columns past `rows` stay untouched
    std::vector<float> y(static_cast<size_t>(n * ldy), -7.0f);
    gemm_bf16(xb.data(), n, cols, w.h16.data(), rows, y.data(), ldy);
    for (int64_t t = 0; t < n; ++t) {
      for (int64_t r = 0; r < ldy; ++r) {
        const float got = y[static_cast<size_t>(t * ldy + r)];
        if (r >= rows) {
          ASSERT_EQ(got, -7.0f) << "column " << r << " is outside the product";
          continue;
        }
        double ref = 0, mag = 0;
        for (int64_t c = 0; c < cols; ++c) {
          const double p = static_cast<double>(bf16_to_f32(xb[static_cast<size_t>(t * cols + c)])) *
                           w.exact[static_cast<size_t>(r * cols + c)];
          ref += p, mag += std::fabs(p);
        }
        ASSERT_NEAR(got, ref, 1e-5 * mag + 1e-7)
            << n << "×" << cols << " row " << t << " col " << r;
      }
    }
  }
}

// Σ|x||w| per output: rounding x to bf16 (relative error ≤ 2⁻⁹) moves y by at most 2⁻⁹ of it.
std::vector<double> magnitudes(const std::vector<float>& exact, int64_t rows, int64_t cols,
                               const std::vector<float>& x, int64_t n) {
  std::vector<double> mag(static_cast<size_t>(n * rows), 0.0);
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t r = 0; r < rows; ++r) {
      double m = 0;
      for (int64_t c = 0; c < cols; ++c) {
        m += std::fabs(static_cast<double>(exact[static_cast<size_t>(r * cols + c)]) *
                       x[static_cast<size_t>(t * cols + c)]);
      }
      mag[static_cast<size_t>(t * rows + r)] = m;
    }
  }
  return mag;
}

TEST(GemmBf16, DenseMatmulIsWithinTheRoundingBoundOfF32) {
  SKIP_WITHOUT_BF16();
  test::GemmPrecisionGuard guard;
  const int64_t n = 19, rows = 96, cols = 896;
  const auto w = make_weights(DType::BF16, rows, cols, 21);
  const auto x = random_floats(static_cast<size_t>(n * cols), 22);
  std::vector<float> y32(static_cast<size_t>(n * rows)), y16(y32.size());
  set_gemm_precision(GemmPrecision::kF32);
  EXPECT_FALSE(bf16_gemm_active());
  matmul(w.view(), x.data(), n, y32.data());
  set_gemm_precision(GemmPrecision::kBF16);
  EXPECT_TRUE(bf16_gemm_active());
  matmul(w.view(), x.data(), n, y16.data());
  const auto mag = magnitudes(w.exact, rows, cols, x, n);
  double worst = 0;
  for (size_t i = 0; i < y32.size(); ++i) {
    ASSERT_LE(std::fabs(y16[i] - y32[i]), 0x1p-9 * mag[i] + 1e-5 * mag[i]) << "output " << i;
    worst = std::max(worst, std::fabs(y16[i] - y32[i]) / mag[i]);
  }
  EXPECT_GT(worst, 0.0) << "the bf16 path gave f32's results: was it taken?";
  std::printf("dense BF16: worst |bf16 − f32| = %.2e of Σ|x||w| (bound 2^-9 = %.2e)\n", worst,
              0x1p-9);
}

// Quantised weights go to bf16 tile by tile: rounding both the dequantised weight and x.
TEST(GemmBf16, QuantisedMatmulSpansTilesWithinTheRoundingBound) {
  SKIP_WITHOUT_BF16();
  const int64_t n = 5, rows = 40, cols = 256;
  const auto dense = make_weights(DType::F32, rows, cols, 31);
  const auto x = random_floats(static_cast<size_t>(n * cols), 32);
  const QuantizedMatrix i8 = quantize_int8(dense.view(), 64);
  const QuantizedMatrix q4 = quantize_affine(dense.view(), 4, 64, DType::BF16);
  const QuantizedMatrix q8 = quantize_affine(dense.view(), 8, 32, DType::F16);
  const QuantizedMatrix q4r8 = interleave_rows8(q4.view());
  for (const auto& [name, q] : {std::pair<std::string, const QuantizedMatrix*>{"int8", &i8},
                                {"q4", &q4},
                                {"q8", &q8},
                                {"q4 rows8", &q4r8}}) {
    const WeightMatrix v = q->view();
    std::vector<float> exact(static_cast<size_t>(rows * cols));
    for (int64_t r = 0; r < rows; ++r) dequantize_row(v, r, exact.data() + r * cols);
    std::vector<float> y32(static_cast<size_t>(n * rows)), y16(y32.size(), -1.0f);
    matmul_widened(v, x.data(), n, y32.data(), 16);
    matmul_bf16(v, x.data(), n, y16.data(), 16);  // tiles of 16 rows: 16 + 16 + 8
    const auto mag = magnitudes(exact, rows, cols, x, n);
    for (size_t i = 0; i < y32.size(); ++i) {
      ASSERT_LE(std::fabs(y16[i] - y32[i]), 0x1p-8 * mag[i] + 1e-5 * mag[i])
          << name << " output " << i;
    }
  }
}

TEST(GemmBf16, PrecisionIsParsedAndRefusedWithItsSource) {
  EXPECT_EQ(parse_gemm_precision("auto", "--gemm"), GemmPrecision::kAuto);
  EXPECT_EQ(parse_gemm_precision("f32", "--gemm"), GemmPrecision::kF32);
  try {
    parse_gemm_precision("fp16", "the environment variable MOLT_GEMM");
    FAIL() << "fp16 was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("MOLT_GEMM: 'fp16' is not a GEMM precision"),
              std::string::npos)
        << e.what();
  }
  test::GemmPrecisionGuard guard;
  if (bf16_gemm_supported()) {
    EXPECT_EQ(parse_gemm_precision("bf16", "--gemm"), GemmPrecision::kBF16);
    set_gemm_precision(GemmPrecision::kAuto);
    EXPECT_TRUE(bf16_gemm_active());
    EXPECT_STREQ(gemm_path_name(), "bf16 (oneDNN)");
  } else {
    EXPECT_THROW(parse_gemm_precision("bf16", "--gemm"), Error);
    EXPECT_THROW(set_gemm_precision(GemmPrecision::kBF16), Error);
    set_gemm_precision(GemmPrecision::kAuto);
    EXPECT_FALSE(bf16_gemm_active());
    EXPECT_STREQ(gemm_path_name(), "f32 (OpenBLAS sgemm)");
  }
}

}  // namespace
}  // namespace molt
