// molt's Qwen2 forward against golden logits from an independent float64 NumPy reference of
// the Hugging Face model (tools/reference/qwen2_reference.py), on the tiny random checkpoints
// of tests/fixtures/golden/ (f32, bf16 and f16 files; tied and untied heads; GQA 1, 2, 3
// and 7; head_dim 10 to 64, one given explicitly; odd sizes; 3 shards; rope_theta 1e4, 1e6).
//
// Error measure: per row, max |molt − ref| / max |ref| (fixtures/golden_fixtures.h). The
// reference reads the same stored bits, so 16-bit files are no less exact than f32 ones: what
// remains is f32 rounding, ~2e-6 measured for the reference's own arithmetic in f32.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "fixtures/golden_fixtures.h"
#include "molt/model/model.h"

namespace molt {
namespace {

namespace fs = std::filesystem;
using test::GoldenCase;
using test::max_rel_error;

// Golden tolerance by stored dtype (both far above the ~2e-6 f32 floor, far below the 0.4+
// that a wrong RoPE, GQA mapping, bias, mask, norm or scale gives: tools/reference/self_check.py).
constexpr double kTolF32 = 1e-4;
constexpr double kTol16 = 2e-4;
// Decode (matvec) against prefill (GEMM) of the same engine.
constexpr double kTolDecode = 1e-4;

double golden_tolerance(const Model& m) {
  return m.weights().embed.dtype == DType::F32 ? kTolF32 : kTol16;
}

std::span<float> rows(std::vector<float>& v, int64_t first, int64_t n, int64_t vocab) {
  return std::span<float>(v).subspan(static_cast<size_t>(first * vocab),
                                     static_cast<size_t>(n * vocab));
}

std::vector<float> prefill_all(const Model& m, const GoldenCase& g) {
  std::vector<float> out(static_cast<size_t>(g.T() * g.vocab));
  KVCache cache = m.new_cache(g.T());
  m.forward(g.ids, cache, out);
  EXPECT_EQ(cache.size(), g.T());
  return out;
}

TEST(GoldenFixtures, ArePresentAndComplete) {
  const auto dirs = test::golden_dirs();
  ASSERT_GE(dirs.size(), 6u) << "fixtures missing under " << test::golden_root()
                             << "; regenerate with python3 tools/reference/make_fixtures.py";
  for (const fs::path& d : dirs) {
    for (const char* f : {"config.json", "generation_config.json", "ids.txt", "logits.f32"}) {
      EXPECT_TRUE(fs::exists(d / f)) << d / f;
    }
    EXPECT_TRUE(fs::exists(d / "model.safetensors") ||
                fs::exists(d / "model.safetensors.index.json"))
        << d;
  }
}

class Golden : public ::testing::TestWithParam<fs::path> {
 protected:
  void SetUp() override {
    g_ = test::load_golden(GetParam());
    ASSERT_GT(g_.vocab, 0);
    model_ = Model::load(GetParam());
    ASSERT_EQ(model_->config().vocab_size, g_.vocab) << "logits.f32 does not match config.json";
    tol_ = golden_tolerance(*model_);
  }
  GoldenCase g_;
  std::unique_ptr<Model> model_;
  double tol_ = 0.0;
};

TEST_P(Golden, PrefillMatchesReference) {
  const std::vector<float> got = prefill_all(*model_, g_);
  const double err = max_rel_error(got, g_.logits, g_.vocab);
  RecordProperty("max_rel_error", std::to_string(err));
  std::printf("    %s prefill: max rel error %.2e (tolerance %.0e)\n",
              GetParam().filename().c_str(), err, tol_);
  EXPECT_LE(err, tol_);
  // The greedy token agrees wherever the reference's top two are not within tolerance.
  for (int64_t t = 0; t < g_.T(); ++t) {
    auto want = g_.row(t);
    auto have = std::span<const float>(got).subspan(static_cast<size_t>(t * g_.vocab), g_.vocab);
    EXPECT_EQ(std::max_element(have.begin(), have.end()) - have.begin(),
              std::max_element(want.begin(), want.end()) - want.begin())
        << "position " << t;
  }
}

TEST_P(Golden, DecodeTokenByTokenMatchesPrefillAndReference) {
  const std::vector<float> prefill = prefill_all(*model_, g_);
  std::vector<float> decode(prefill.size());
  KVCache cache = model_->new_cache(g_.T());
  for (int64_t t = 0; t < g_.T(); ++t) {
    model_->forward(std::span<const int32_t>(g_.ids).subspan(t, 1), cache,
                    rows(decode, t, 1, g_.vocab));
    ASSERT_EQ(cache.size(), t + 1);
  }
  const double vs_prefill = max_rel_error(decode, prefill, g_.vocab);
  const double vs_ref = max_rel_error(decode, g_.logits, g_.vocab);
  std::printf("    %s decode: vs prefill %.2e, vs reference %.2e\n", GetParam().filename().c_str(),
              vs_prefill, vs_ref);
  EXPECT_LE(vs_prefill, kTolDecode);
  EXPECT_LE(vs_ref, tol_);
}

// Prefill in two chunks (the GEMM path at a non-zero start position), then decode the rest.
TEST_P(Golden, ChunkedPrefillThenDecodeMatchesReference) {
  const int64_t T = g_.T(), a = 5, b = 9;
  ASSERT_GT(T, b + 1);
  std::vector<float> got(static_cast<size_t>(T * g_.vocab));
  KVCache cache = model_->new_cache(T);
  const std::span<const int32_t> ids(g_.ids);
  model_->forward(ids.subspan(0, a), cache, rows(got, 0, a, g_.vocab));
  model_->forward(ids.subspan(a, b - a), cache, rows(got, a, b - a, g_.vocab));
  for (int64_t t = b; t < T; ++t) {
    model_->forward(ids.subspan(t, 1), cache, rows(got, t, 1, g_.vocab));
  }
  EXPECT_EQ(cache.size(), T);
  EXPECT_LE(max_rel_error(got, g_.logits, g_.vocab), tol_);
}

// Dropping the cache tail and re-running those tokens gives their logits again.
TEST_P(Golden, TruncateAndReplayMatchesReference) {
  const int64_t T = g_.T(), keep = 7;
  KVCache cache = model_->new_cache(T);
  std::vector<float> first(static_cast<size_t>(T * g_.vocab));
  model_->forward(g_.ids, cache, first);
  cache.truncate(keep);
  ASSERT_EQ(cache.size(), keep);
  std::vector<float> again(static_cast<size_t>((T - keep) * g_.vocab));
  model_->forward(std::span<const int32_t>(g_.ids).subspan(keep), cache, again);
  const std::span<const float> want =
      std::span<const float>(g_.logits).subspan(static_cast<size_t>(keep * g_.vocab));
  EXPECT_LE(max_rel_error(again, want, g_.vocab), tol_);
}

// prefill()/decode() and last_logits return the last position's row; keeping hidden states
// in the cache changes nothing.
TEST_P(Golden, LastLogitsAndConvenienceCalls) {
  const int64_t T = g_.T(), V = g_.vocab;
  const std::span<const int32_t> ids(g_.ids);
  KVCache cache = model_->new_cache(T, /*keep_hidden=*/true);
  std::vector<float> last = model_->prefill(ids.subspan(0, T - 1), cache);
  ASSERT_EQ(static_cast<int64_t>(last.size()), V);
  EXPECT_LE(test::row_rel_error(last, g_.row(T - 2)), tol_);
  std::vector<float> next = model_->decode(g_.ids[T - 1], cache);
  ASSERT_EQ(static_cast<int64_t>(next.size()), V);
  EXPECT_LE(test::row_rel_error(next, g_.row(T - 1)), tol_);

  KVCache c2 = model_->new_cache(T);
  std::vector<float> only_last(static_cast<size_t>(V));
  model_->forward(ids, c2, {}, only_last);
  EXPECT_LE(test::row_rel_error(only_last, g_.row(T - 1)), tol_);
}

std::string fixture_name(const ::testing::TestParamInfo<fs::path>& info) {
  return info.param.filename().string();
}

INSTANTIATE_TEST_SUITE_P(Fixtures, Golden, ::testing::ValuesIn(test::golden_dirs()), fixture_name);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(Golden);  // ArePresentAndComplete fails instead

}  // namespace
}  // namespace molt
