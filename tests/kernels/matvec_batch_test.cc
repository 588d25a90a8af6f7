// Batched decode's linears: matvec_batch over n vectors gives, for every vector, exactly what
// matvec gives for it alone (bit for bit), for every weight format (f32, bf16, f16, int8,
// MLX 4 / 8 bits in both layouts), every compiled SIMD target, n from 1 to past a group of 8,
// and shapes the SIMD chunks do not tile.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kernels_test_util.h"
#include "molt/common/error.h"
#include "molt/kernels/linear.h"
#include "molt/kernels/quant.h"
#include "molt/kernels/threads.h"

namespace molt {
namespace {

using test::make_weights;
using test::random_floats;

// One weight in a named format, owning its storage.
struct Weight {
  std::string name;
  test::TestWeights dense;
  QuantizedMatrix q;
  bool quantized = false;
  WeightMatrix view() const { return quantized ? q.view() : dense.view(); }
};

std::vector<Weight> every_format(int64_t rows, int64_t cols, uint32_t seed) {
  std::vector<Weight> out;
  for (DType dt : {DType::F32, DType::BF16, DType::F16}) {
    out.push_back({std::string(dtype_name(dt)), make_weights(dt, rows, cols, seed), {}, false});
  }
  const test::TestWeights f32 = make_weights(DType::F32, rows, cols, seed);
  const WeightMatrix dense = f32.view();
  auto add = [&](std::string name, QuantizedMatrix q) {
    out.push_back({std::move(name), {}, std::move(q), true});
  };
  add("int8 per channel", quantize_int8(dense, 0));
  for (int64_t G : {32, 64}) {
    if (cols % G != 0) continue;
    add("int8 g" + std::to_string(G), quantize_int8(dense, G));
    for (int bits : {4, 8}) {
      const std::string name = "q" + std::to_string(bits) + " g" + std::to_string(G);
      add(name, quantize_affine(dense, bits, G, DType::BF16));
      if (rows % 8 == 0) add(name + " rows8", interleave_rows8(out.back().q.view()));
    }
  }
  return out;
}

// Each of the n rows of matvec_batch against matvec of that row alone.
void expect_rows_equal_matvec(const WeightMatrix& w, const std::vector<float>& x, int64_t n,
                              const std::string& what) {
  const int64_t rows = w.rows, cols = w.cols;
  std::vector<float> batched(static_cast<size_t>(n * rows), -7.0f);
  matvec_batch(w, x.data(), n, batched.data());
  std::vector<float> one(static_cast<size_t>(rows));
  for (int64_t v = 0; v < n; ++v) {
    matvec(w, x.data() + v * cols, one.data());
    const std::vector<float> got(batched.begin() + v * rows, batched.begin() + (v + 1) * rows);
    ASSERT_EQ(got, one) << what << " n " << n << " vector " << v;
  }
}

class MatvecBatch : public test::PerSimdTarget {};

TEST_P(MatvecBatch, EveryRowEqualsMatvecBitForBit) {
  // 896: Qwen2.5-0.5B's width; 128: two chunks of 64; 37 rows: the four streams do not split
  // them evenly; 97 columns: no vector width tiles them (scalar tails, the exact path).
  const int64_t shapes[][2] = {{40, 896}, {64, 128}, {37, 128}, {37, 97}, {8, 64}};
  for (const auto& s : shapes) {
    const int64_t rows = s[0], cols = s[1];
    for (const Weight& w : every_format(rows, cols, 3)) {
      const std::string what = w.name + " " + std::to_string(rows) + "x" + std::to_string(cols);
      for (int64_t n : {1, 2, 3, 4, 5, 8, 9}) {
        auto x = random_floats(static_cast<size_t>(n * cols), 10 + static_cast<uint32_t>(n));
        x[static_cast<size_t>(cols / 3)] = 25.0f;  // an outlier, as Qwen activations have
        expect_rows_equal_matvec(w.view(), x, n, what);
      }
    }
  }
}

// Several weights of one input (q/k/v, gate/up) over n vectors: one region, the same floats.
TEST_P(MatvecBatch, SeveralWeightsEqualOneByOne) {
  const int64_t cols = 256, n = 3;
  const auto x = random_floats(static_cast<size_t>(n * cols), 21);
  const std::vector<Weight> a = every_format(24, cols, 4), b = every_format(8, cols, 5),
                            c = every_format(40, cols, 6);
  for (size_t f = 0; f < a.size(); ++f) {
    // A mixed set too (this format beside bf16): split into passes of one format.
    for (const Weight* second : {&b[f], &b[1]}) {
      const WeightMatrix wa = a[f].view(), wb = second->view(), wc = c[f].view();
      const WeightMatrix* ws[] = {&wa, &wb, &wc};
      std::vector<float> ya(static_cast<size_t>(n * wa.rows)), yb(static_cast<size_t>(n * wb.rows)),
          yc(static_cast<size_t>(n * wc.rows));
      float* ys[] = {ya.data(), yb.data(), yc.data()};
      matvec_batch(ws, x.data(), n, ys);
      for (int i = 0; i < 3; ++i) {
        std::vector<float> alone(static_cast<size_t>(n * ws[i]->rows));
        matvec_batch(*ws[i], x.data(), n, alone.data());
        const std::vector<float>& got = i == 0 ? ya : i == 1 ? yb : yc;
        EXPECT_EQ(got, alone) << a[f].name << " with " << second->name << " weight " << i;
      }
    }
  }
}

MOLT_INSTANTIATE_PER_SIMD_TARGET(MatvecBatch);

TEST(MatvecBatchThreads, SameResultForAnyThreadCount) {
  const int64_t rows = 203, cols = 896, n = 5;
  const auto x = random_floats(static_cast<size_t>(n * cols), 31);
  const int before = num_threads();
  for (const Weight& w : every_format(rows, cols, 7)) {
    std::vector<float> y1(static_cast<size_t>(n * rows)), y2(y1.size());
    set_num_threads(1);
    matvec_batch(w.view(), x.data(), n, y1.data());
    set_num_threads(2);
    matvec_batch(w.view(), x.data(), n, y2.data());
    EXPECT_EQ(y1, y2) << w.name;
  }
  set_num_threads(before);
}

TEST(MatvecBatchErrors, BadArgumentsThrow) {
  const auto w = make_weights(DType::BF16, 4, 32, 1);
  const WeightMatrix v = w.view();
  const auto x = random_floats(64, 2);
  std::vector<float> y(8, -1.0f);
  EXPECT_THROW(matvec_batch(v, x.data(), -1, y.data()), Error);
  matvec_batch(v, x.data(), 0, y.data());  // nothing to do
  EXPECT_EQ(y, std::vector<float>(8, -1.0f));
  const WeightMatrix* ws[] = {&v, &v};
  float* one[] = {y.data()};
  EXPECT_THROW(matvec_batch(ws, x.data(), 2, one), Error);
  const WeightMatrix* nine[9] = {&v, &v, &v, &v, &v, &v, &v, &v, &v};
  std::vector<float*> ys(9, y.data());
  EXPECT_THROW(matvec_batch(nine, x.data(), 1, ys), Error);
}

}  // namespace
}  // namespace molt
