// The C++ engine against PyTorch on every trained rung of the bundled tiny ladder: the
// fixture (models/tiny-ladder/fixtures) holds a fixed id sequence and each rung's logits from
// tools/tiny-ladder/model.py on the exported bf16 weights, computed in f32.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "molt/kernels/threads.h"
#include "molt/model/model.h"
#include "test_util.h"

namespace molt {
namespace {

const std::filesystem::path kLadder = std::filesystem::path(MOLT_SOURCE_DIR) / "models/tiny-ladder";

std::vector<std::string> rungs() {
  const auto j = nlohmann::json::parse(molt::test::read_file(kLadder / "ladder.json"));
  std::vector<std::string> out;
  for (const auto& r : j.at("rungs")) {
    // PyTorch fixtures exist for the trained (dense) checkpoints; quantised rungs are
    // checked against dense logits by the quantisation tests.
    const std::string precision = r.value("precision", "bf16");
    if (precision != "bf16" && precision != "f32" && precision != "f16") continue;
    const std::string path = r.at("path");
    if (std::find(out.begin(), out.end(), path) == out.end()) out.push_back(path);
  }
  return out;
}

class TinyLadderLogits : public ::testing::TestWithParam<std::string> {};

TEST_P(TinyLadderLogits, PrefillAndDecodeMatchPyTorch) {
  const std::string rung = GetParam();
  set_num_threads(1);  // tiny matrices: one thread is fastest and immune to a loaded machine
  const auto fix = nlohmann::json::parse(molt::test::read_file(kLadder / "fixtures/ids.json"));
  const std::vector<int32_t> ids = fix.at("ids").get<std::vector<int32_t>>();
  const std::string raw = molt::test::read_file(kLadder / "fixtures" / (rung + "_logits.f32"));
  auto model = Model::load(kLadder / rung);
  const int64_t V = model->config().vocab_size;
  const int64_t T = static_cast<int64_t>(ids.size());
  ASSERT_EQ(raw.size(), static_cast<size_t>(T * V) * 4) << rung << ": fixture size";
  std::vector<float> want(static_cast<size_t>(T * V));
  std::memcpy(want.data(), raw.data(), raw.size());

  KVCache cache = model->new_cache(T);
  std::vector<float> got(want.size());
  model->forward(ids, cache, got);
  KVCache step = model->new_cache(T);
  double worst = 0, worst_decode = 0;
  for (int64_t t = 0; t < T; ++t) {
    const std::vector<float> d = model->decode(ids[static_cast<size_t>(t)], step);
    float scale = 0;
    for (int64_t v = 0; v < V; ++v) scale = std::max(scale, std::abs(want[t * V + v]));
    for (int64_t v = 0; v < V; ++v) {
      const double ref = want[t * V + v];
      worst = std::max(worst, std::abs(got[t * V + v] - ref) / scale);
      worst_decode = std::max(worst_decode, std::abs(d[v] - ref) / scale);
    }
  }
  // f32 compute on both sides; differences are summation order only.
  EXPECT_LT(worst, 1e-4) << rung << " prefill";
  EXPECT_LT(worst_decode, 1e-4) << rung << " decode";
}

INSTANTIATE_TEST_SUITE_P(Rungs, TinyLadderLogits, ::testing::ValuesIn(rungs()),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace molt
