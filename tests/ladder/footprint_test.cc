// Footprint accounting against the kernel's own numbers: the computed footprint of a loaded
// rung with its cache and a prefill's scratch matches the measured RSS growth within 5%;
// parking really gives the weights' pages back; release unmaps them. Each test needs a process
// of its own, as ctest gives it: kept buffers and the allocator's state carry over between
// tests of one process.
#include <gtest/gtest.h>

#include "kernels/gemm_bf16.h"
#include "ladder/shared_fixture.h"
#include "molt/common/error.h"
#include "molt/kernels/linear.h"
#include "molt/kernels/threads.h"
#include "molt/ladder/ladder.h"
#include "molt/ladder/process_memory.h"
#include "molt/ladder/synthetic.h"
#include "molt/model/kv_cache.h"
#include "molt/model/synth.h"
#include "test_util.h"

namespace molt {
namespace {

namespace fs = std::filesystem;
constexpr double kMiB = 1024.0 * 1024.0;

// Rungs large enough that allocator noise (a few hundred KiB) stays far below 5%.
const fs::path& rss_manifest() {
  static const fs::path m =
      test::shared_fixture(
          "rss-ladder",
          [](const fs::path& dir) {
            SyntheticLadderOptions o;
            o.vocab = 512;
            o.dtype = DType::BF16;
            o.rungs = {{"big", 512, 8, 8, 2, 64, 2048}, {"warm", 64, 1, 2, 1, 32, 128}};
            write_synthetic_ladder(dir, o);
          }) /
      "ladder.json";
  return m;
}

// Warms the allocator, BLAS and the thread pool on a tiny rung so that their one-time buffers
// are not charged to the rung under test.
void warm_up(Ladder& l, int warm, int64_t tokens) {
  Rung& r = l.rung(warm);
  r.load();
  KVCache c = r.model().new_cache(tokens);
  std::vector<int32_t> ids(static_cast<size_t>(tokens), 7);
  r.model().forward(ids, c, {});
  r.release();
}

// On each GEMM path this CPU has (the bf16 one keeps other buffers: kernels/linear.h), and
// with each type of KV cache (f16 and int8 prefill widens a layer's rows: kernels/attention.h).
struct FootprintCase {
  GemmPrecision gemm;
  KvDType kv;
};
class FootprintPerGemm : public ::testing::TestWithParam<FootprintCase> {};

TEST_P(FootprintPerGemm, MatchesMeasuredRssWithinFivePercent) {
  if (GetParam().gemm == GemmPrecision::kBF16 && !bf16_gemm_supported()) {
    GTEST_SKIP() << "this CPU has no bf16 dot products";
  }
  test::GemmPrecisionGuard guard;
  set_gemm_precision(GetParam().gemm);
  set_num_threads(1);
  const KvDType kv = GetParam().kv;
  // Long enough that the widened rows of a prefill chunk at its end weigh (4 MiB here).
  const int64_t capacity = 1024, chunk = 64;
  auto l = Ladder::open(rss_manifest(), FootprintShape{chunk, capacity, num_threads(), kv});
  warm_up(*l, 1, chunk);
  Rung& r = l->rung(0);
  ASSERT_EQ(r.name(), "big");
  const Footprint f = r.footprint();

  if (!reset_peak_rss())
    GTEST_SKIP() << "cannot reset VmHWM (/proc/self/clear_refs): peak RSS not measurable";
  if (test::measured_in_a_child_without_asan_quarantine()) return;
  const ProcessMemory before = read_process_memory();
  r.load();
  const ProcessMemory loaded = read_process_memory();
  KVCache cache = r.model().new_cache(capacity, false, kv);
  std::vector<int32_t> ids(static_cast<size_t>(chunk));
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>(i * 7 % 512);
  std::vector<float> logits(512);
  // The last chunk of a full cache: prefill attends over (and widens) every row.
  cache.set_size(capacity - chunk);
  r.model().forward(ids, cache, {}, logits);
  const ProcessMemory after = read_process_memory();

  const double weights = (static_cast<double>(loaded.rss_bytes) - before.rss_bytes) / kMiB;
  const double peak = (static_cast<double>(after.peak_bytes) - before.rss_bytes) / kMiB;
  const double computed = f.total(capacity) / kMiB;
  std::printf(
      "footprint of '%s' (%s, %s KV): weights %.2f + heap %.2f + KV %.2f (%lld tokens) + scratch "
      "%.2f "
      "= %.2f MiB; measured: load %.2f MiB, peak growth %.2f MiB (%+.1f%%)\n",
      r.name().c_str(), before.source.c_str(), std::string(kv_dtype_name(kv)).c_str(),
      f.weight_bytes / kMiB, f.heap_weight_bytes / kMiB, f.kv_bytes(capacity) / kMiB,
      static_cast<long long>(capacity), f.scratch_bytes / kMiB, computed, weights, peak,
      100 * (peak - computed) / computed);
  const double tolerance = 0.05 * computed, w = (f.weight_bytes + f.heap_weight_bytes) / kMiB;
  EXPECT_GE(weights, w - tolerance);
  EXPECT_LE(weights, w * (1 + test::kAsanShadowShare) + tolerance);
  EXPECT_GE(peak, computed - tolerance);
  EXPECT_LE(peak, computed * (1 + test::kAsanShadowShare) + tolerance + test::emulator_rss_mib());
  r.release();
}

INSTANTIATE_TEST_SUITE_P(Gemm, FootprintPerGemm,
                         ::testing::Values(FootprintCase{GemmPrecision::kF32, KvDType::kF32},
                                           FootprintCase{GemmPrecision::kBF16, KvDType::kF32},
                                           FootprintCase{GemmPrecision::kF32, KvDType::kF16},
                                           FootprintCase{GemmPrecision::kF32, KvDType::kInt8}),
                         [](const auto& info) {
                           const FootprintCase& c = info.param;
                           return std::string(c.gemm == GemmPrecision::kF32 ? "f32" : "bf16") +
                                  "_kv_" + std::string(kv_dtype_name(c.kv));
                         });

// The cache alone at a real geometry (Qwen2.5-0.5B: 24 layers, 2 KV heads of 64) and a long
// context: its resident bytes are the footprint's KV bytes, so f16 holds half of f32's and
// int8 a little over a quarter (its scales), in the kernel's own count.
TEST(Footprint, KvBytesOfEachTypeAreWhatTheCacheHolds) {
  const ModelConfig c = qwen25_geometry("qwen2.5-0.5b");
  const CacheGeometry g{c.num_hidden_layers, c.num_key_value_heads, c.head_dim, c.hidden_size};
  const int64_t tokens = 8192;
  double f32_mib = 0;
  for (KvDType t : {KvDType::kF32, KvDType::kF16, KvDType::kInt8}) {
    const size_t computed =
        compute_footprint(c, 0, DType::F32, FootprintShape{64, tokens, 1, t}).kv_bytes(tokens);
    const ProcessMemory before = read_process_memory();
    const KVCache cache(g, tokens, false, t);
    const ProcessMemory after = read_process_memory();
    const double grew = (static_cast<double>(after.rss_bytes) - before.rss_bytes) / kMiB;
    if (t == KvDType::kF32) f32_mib = grew;
    std::printf("KV cache of %lld tokens, %s: computed %.1f MiB, RSS grew %.1f MiB (%.3f of f32)\n",
                static_cast<long long>(tokens), std::string(kv_dtype_name(t)).c_str(),
                computed / kMiB, grew, grew / f32_mib);
    EXPECT_EQ(cache.bytes(), computed);
    EXPECT_GE(grew, 0.98 * computed / kMiB - 1.0);
    EXPECT_LE(grew, (1.02 + test::kAsanShadowShare) * computed / kMiB + 1.0);
  }
  // f16 is the default (as SessionOptions'), half of f32.
  EXPECT_EQ(
      compute_footprint(c, 0, DType::F32, FootprintShape{64, tokens, 1}).kv_bytes_per_token * 2,
      compute_footprint(c, 0, DType::F32, FootprintShape{64, tokens, 1, KvDType::kF32})
          .kv_bytes_per_token);
}

TEST(Footprint, ParkReleasesTheWeightsAndUnparkBringsThemBack) {
  auto l = Ladder::open(rss_manifest());
  Rung& r = l->rung(0);
  const double weights = r.footprint().weight_bytes / kMiB;
  EXPECT_EQ(r.state(), RungState::kReleased);
  EXPECT_EQ(r.resident_bytes(), 0u);

  const double base = read_process_memory().rss_bytes / kMiB;
  r.load();
  EXPECT_EQ(r.state(), RungState::kLoaded);
  KVCache cache = r.model().new_cache(16);  // the cache must survive parking
  std::vector<int32_t> ids = {1, 2, 3, 4};
  const std::vector<float> before = r.model().prefill(ids, cache);
  const double loaded = read_process_memory().rss_bytes / kMiB;

  r.park();
  EXPECT_EQ(r.state(), RungState::kParked);
  EXPECT_EQ(r.resident_bytes(), r.footprint().heap_weight_bytes);
  const double parked = read_process_memory().rss_bytes / kMiB;

  r.unpark();
  EXPECT_EQ(r.state(), RungState::kLoaded);
  const double unparked = read_process_memory().rss_bytes / kMiB;
  // The cache kept while parked still decodes the same continuation as an unparked run.
  KVCache again = r.model().new_cache(16);
  r.model().prefill(ids, again);
  EXPECT_EQ(r.model().decode(9, cache), r.model().decode(9, again));

  r.release();
  EXPECT_EQ(r.state(), RungState::kReleased);
  const double released = read_process_memory().rss_bytes / kMiB;
  std::printf(
      "RSS: base %.1f, loaded %.1f, parked %.1f, unparked %.1f, released %.1f MiB (weights %.1f "
      "MiB)\n",
      base, loaded, parked, unparked, released, weights);
  EXPECT_NEAR(loaded - parked, weights, 0.05 * weights);
  EXPECT_NEAR(unparked - parked, weights, 0.05 * weights);
  // Under ASan freed blocks wait in its quarantine, so the model's heap (f32 norms, decode
  // scratch: ~4 MiB here) stays resident after release.
#if defined(__SANITIZE_ADDRESS__)
  const double quarantine = 8.0;
#else
  const double quarantine = 0.0;
#endif
  EXPECT_NEAR(unparked - released, weights, 0.05 * weights + quarantine);
  EXPECT_THROW(r.model(), Error);
}

TEST(Footprint, ComputedTermsFollowTheConfig) {
  ModelConfig c;
  c.hidden_size = 896, c.num_hidden_layers = 24, c.num_attention_heads = 14,
  c.num_key_value_heads = 2;
  c.head_dim = 64, c.intermediate_size = 4864, c.vocab_size = 151936;
  const Footprint f = compute_footprint(c, 988 << 20, DType::BF16, FootprintShape{64, 2048, 1});
  EXPECT_EQ(f.kv_bytes_per_token, 2u * 24 * 128 * 2);  // 12 KiB per token for Qwen2.5-0.5B in f16
  EXPECT_EQ(f.weight_bytes, size_t{988} << 20);
  EXPECT_EQ(f.heap_weight_bytes, (24u * 2 * 896 + 896 + 24u * (896 + 256)) * 4);
  EXPECT_EQ(f.total(100),
            f.weight_bytes + f.heap_weight_bytes + 100 * f.kv_bytes_per_token + f.scratch_bytes);
  EXPECT_EQ(f.parked(100), f.heap_weight_bytes + 100 * f.kv_bytes_per_token);
  // f32 weights need no widening tile.
  EXPECT_LT(compute_footprint(c, 0, DType::F32, FootprintShape{64, 2048, 1}).scratch_bytes,
            f.scratch_bytes);
}

}  // namespace
}  // namespace molt
