// The bf16 prefill path on the trained tiny ladder against PyTorch's f32 logits (the fixture of
// tiny_ladder_logits_test.cc): rounding activations to bf16 moves the logits by a bounded
// amount and leaves the next-token NLL and the greedy choices as they were.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "kernels/gemm_bf16.h"
#include "molt/kernels/linear.h"
#include "molt/kernels/threads.h"
#include "molt/model/model.h"
#include "test_util.h"

namespace molt {
namespace {

const std::filesystem::path kLadder = std::filesystem::path(MOLT_SOURCE_DIR) / "models/tiny-ladder";

// Mean −log p(ids[t + 1]) over the sequence, from logits [T × V].
double mean_nll(const std::vector<float>& logits, const std::vector<int32_t>& ids, int64_t V) {
  double sum = 0;
  const auto T = static_cast<int64_t>(ids.size());
  for (int64_t t = 0; t + 1 < T; ++t) {
    const float* l = logits.data() + t * V;
    const double m = *std::max_element(l, l + V);
    double z = 0;
    for (int64_t v = 0; v < V; ++v) z += std::exp(l[v] - m);
    sum += m + std::log(z) - l[ids[static_cast<size_t>(t + 1)]];
  }
  return sum / static_cast<double>(T - 1);
}

class Bf16Prefill : public ::testing::TestWithParam<std::string> {};

TEST_P(Bf16Prefill, StaysWithinItsBoundOfPyTorchF32) {
  if (!bf16_gemm_supported()) GTEST_SKIP() << "this CPU has no bf16 dot products";
  const std::string rung = GetParam();
  set_num_threads(1);
  test::GemmPrecisionGuard guard;
  const auto fix = nlohmann::json::parse(test::read_file(kLadder / "fixtures/ids.json"));
  const std::vector<int32_t> ids = fix.at("ids").get<std::vector<int32_t>>();
  auto model = Model::load(kLadder / rung);
  const int64_t V = model->config().vocab_size, T = static_cast<int64_t>(ids.size());
  std::vector<float> want(static_cast<size_t>(T * V)), f32(want.size()), bf16(want.size());
  for (auto [precision, out] :
       {std::pair{GemmPrecision::kF32, &f32}, {GemmPrecision::kBF16, &bf16}}) {
    set_gemm_precision(precision);
    KVCache cache = model->new_cache(T);
    model->forward(ids, cache, *out);
  }
  set_gemm_precision(guard.saved);
  // The reference: PyTorch's f32 logits where the fixture has them (dense rungs), else the f32
  // path (a quantised rung: its f32 path is checked against dequantised weights elsewhere).
  const std::filesystem::path fixture = kLadder / "fixtures" / (rung + "_logits.f32");
  if (std::filesystem::exists(fixture)) {
    const std::string raw = test::read_file(fixture);
    ASSERT_EQ(raw.size(), static_cast<size_t>(T * V) * 4);
    std::memcpy(want.data(), raw.data(), raw.size());
  } else {
    want = f32;
  }
  double worst = 0;
  int64_t same_argmax = 0;
  for (int64_t t = 0; t < T; ++t) {
    const float* w = want.data() + t * V;
    const float* g = bf16.data() + t * V;
    float scale = 0;
    for (int64_t v = 0; v < V; ++v) scale = std::max(scale, std::abs(w[v]));
    for (int64_t v = 0; v < V; ++v) worst = std::max(worst, std::abs(g[v] - w[v]) / double{scale});
    same_argmax += std::max_element(w, w + V) - w == std::max_element(g, g + V) - g;
  }
  const double nll_ref = mean_nll(want, ids, V), nll_f32 = mean_nll(f32, ids, V),
               nll_bf16 = mean_nll(bf16, ids, V);
  std::printf(
      "%s, %lld positions: bf16 prefill logits within %.2e of max|logit| of the "
      "reference; argmax equal at %lld; NLL %.5f (f32 path %.5f, "
      "reference %.5f, bf16 − f32 %+.3f%%)\n",
      rung.c_str(), static_cast<long long>(T), worst, static_cast<long long>(same_argmax), nll_bf16,
      nll_f32, nll_ref, 100 * (nll_bf16 - nll_f32) / nll_f32);
  EXPECT_GT(worst, 1e-6) << "the bf16 path gave f32's logits: was it taken?";
  EXPECT_LT(worst, 2e-2) << rung;
  EXPECT_GE(same_argmax, T - T / 20) << rung << ": greedy choices changed at more than 5%";
  EXPECT_LT(std::abs(nll_bf16 - nll_f32), 0.002 * nll_f32) << rung << ": NLL moved by ≥ 0.2%";
}

INSTANTIATE_TEST_SUITE_P(Rungs, Bf16Prefill, ::testing::Values("l", "m", "s", "l-int8"),
                         [](const auto& info) {
                           std::string n = info.param;
                           std::replace(n.begin(), n.end(), '-', '_');
                           return n;
                         });

}  // namespace
}  // namespace molt
