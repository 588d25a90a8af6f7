// Healing rebuilds a native cache from any starting cache (here: zeros standing in for a
// mapped one), layer by layer, including positions decoded after the seam.
#include "runtime/heal.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "molt/common/error.h"
#include "runtime_fixture.h"

namespace molt {
namespace {

double max_rel_diff(std::span<const float> a, std::span<const float> b, size_t n) {
  double diff = 0, scale = 0;
  for (size_t i = 0; i < n; ++i) {
    diff = std::max(diff, static_cast<double>(std::abs(a[i] - b[i])));
    scale = std::max(scale, static_cast<double>(std::abs(b[i])));
  }
  return diff / std::max(scale, 1e-30);
}

TEST(Heal, RebuildsTheNativeCacheLayerByLayer) {
  const Model& m = *test::runtime_ladder().models[1];
  const CacheGeometry g = m.cache_geometry();
  const std::vector<int32_t> history = test::test_prompt(70);  // 60 carried + 10 decoded after
  const int64_t n0 = 60, held = 69;

  KVCache native = m.new_cache(80);
  m.forward(std::span<const int32_t>(history).first(held), native, {});

  KVCache live = m.new_cache(80);  // the "mapped" cache: zeros for [0, n0)
  live.set_size(n0);
  m.forward(std::span<const int32_t>(history).subspan(n0, held - n0), live,
            {});  // decoded after the seam
  runtime::HealJob heal(std::span<const int32_t>(history).first(n0));
  const int64_t chunk = 25;  // 3 chunks per layer
  int64_t steps = 0;
  bool done = false;
  while (!done) {
    done = heal.step(m, live, history, chunk);
    ++steps;
    if (!done) {
      // Healed layers are native for the carried positions, the layer being healed up to
      // the chunk done, the rest untouched.
      const size_t rows = static_cast<size_t>(n0 * g.kv_dim());
      for (int64_t l = 0; l < heal.layers_done(); ++l) {
        EXPECT_LT(max_rel_diff(live.k(l), native.k(l), rows), 1e-4)
            << "layer " << l << " step " << steps;
      }
      const int64_t l = heal.layers_done();
      const size_t part = static_cast<size_t>(heal.positions_done() * g.kv_dim());
      if (part > 0) {
        EXPECT_LT(max_rel_diff(live.v(l), native.v(l), part), 1e-4) << "step " << steps;
      }
      EXPECT_EQ(live.k(l)[part], 0.0f) << "step " << steps;
      for (int64_t u = l + 1; u < g.n_layers; ++u) EXPECT_EQ(live.k(u)[0], 0.0f);
    }
  }
  EXPECT_EQ(steps, 3 * g.n_layers);
  EXPECT_EQ(heal.steps(), steps);
  EXPECT_EQ(live.size(), held);
  const size_t rows = static_cast<size_t>(held * g.kv_dim());
  for (int64_t l = 0; l < g.n_layers; ++l) {
    EXPECT_LT(max_rel_diff(live.k(l), native.k(l), rows), 1e-4) << l;
    EXPECT_LT(max_rel_diff(live.v(l), native.v(l), rows), 1e-4) << l;
  }
  EXPECT_EQ(runtime::HealJob::extra_bytes(m.config(), n0),
            static_cast<size_t>(n0) * 4 * g.hidden_size);
}

// After a map with native layers (here 1): layer 0 is native already and heal goes on from the
// hidden states entering layer 1, one layer fewer per position.
TEST(Heal, StartsAfterTheMapsNativeLayers) {
  const Model& m = *test::runtime_ladder().models[1];
  const CacheGeometry g = m.cache_geometry();
  const std::vector<int32_t> history = test::test_prompt(70);
  const int64_t n0 = 60, held = 66, d = m.config().hidden_size;
  KVCache native = m.new_cache(80);
  m.forward(std::span<const int32_t>(history).first(held), native, {});

  KVCache live = m.new_cache(80);
  live.set_size(n0);
  std::vector<float> hidden(static_cast<size_t>(n0 * d));
  m.embed(std::span<const int32_t>(history).first(n0), hidden);
  m.forward_layers(0, 0, n0, hidden, live, 1);  // as the map's native layer writes it
  m.forward(std::span<const int32_t>(history).subspan(n0, held - n0), live, {});
  runtime::HealJob heal(std::span<const int32_t>(history).first(n0), 1, hidden);
  EXPECT_EQ(heal.first_layer(), 1);
  EXPECT_EQ(heal.layers_done(), 1);
  int64_t steps = 0;
  while (!heal.step(m, live, history, 25)) ++steps;
  EXPECT_EQ(steps + 1, 3 * (g.n_layers - 1));
  const size_t rows = static_cast<size_t>(held * g.kv_dim());
  for (int64_t l = 0; l < g.n_layers; ++l) {
    EXPECT_LT(max_rel_diff(live.k(l), native.k(l), rows), 1e-4) << l;
    EXPECT_LT(max_rel_diff(live.v(l), native.v(l), rows), 1e-4) << l;
  }
  // Hidden states of the wrong size are refused at the first step, naming what was expected.
  runtime::HealJob bad(std::span<const int32_t>(history).first(n0), 1, std::vector<float>(7));
  try {
    bad.step(m, live, history, 25);
    FAIL() << "healed from 7 hidden values";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("7 hidden values entering layer 1"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(runtime::HealJob(std::span<const int32_t>(history).first(n0), 0, hidden), Error);
}

}  // namespace
}  // namespace molt
