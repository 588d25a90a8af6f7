// Out of memory while a rung loads (RLIMIT_AS in a forked child, address_limit.h): a
// molt::Error naming the checkpoint, and no partial state — the rung stays released, nothing of
// it stays mapped, and it loads once memory is back.
#include <gtest/gtest.h>

#include "ladder/address_limit.h"
#include "ladder/shared_fixture.h"
#include "molt/common/error.h"
#include "molt/formats/safetensors.h"
#include "molt/ladder/ladder.h"
#include "molt/ladder/synthetic.h"
#include "test_util.h"

namespace molt {
namespace {

namespace fs = std::filesystem;
using test::check;
using test::ChildRun;
using test::in_child;
using test::set_as_limit;
using test::vm_bytes;
constexpr size_t kMiB = size_t{1} << 20;

// "big" (~61 MB of bf16 weights in 16 MB shards) cannot load within the headroom; "small"
// (~8 MB) can, unless something of a failed load is still mapped.
constexpr size_t kShard = 16 * kMiB, kHeadroom = 24 * kMiB;

const fs::path& manifest() {
  static const fs::path m =
      test::shared_fixture(
          "alloc-ladder",
          [](const fs::path& dir) {
            SyntheticLadderOptions o;
            o.vocab = 512;
            o.rungs = {{"big", 512, 8, 8, 2, 64, 2048}, {"small", 256, 4, 4, 2, 64, 1024}};
            write_synthetic_ladder(dir, o);
            // Shards, so that a load can fail after its first file is mapped.
            const WeightStore s = WeightStore::open_dir(dir / "big");
            std::vector<TensorToWrite> tensors;
            for (const std::string& name : s.names()) {
              const TensorView& t = s.get(name);
              tensors.push_back({name, t.dtype, t.shape, {t.data, t.nbytes}});
            }
            write_safetensors_sharded(dir / "big", tensors, kShard);
          }) /
      "ladder.json";
  return m;
}

// Loads `r` at a limit of (address space now + headroom): expects a molt::Error and no trace
// of the attempt (nothing of the checkpoint mapped, the heap as it was), then `fits` loads at
// the same limit, then, with the limit lifted, `r` itself.
bool fail_then_recover(Ladder& l, Rung& r, Rung* fits, size_t headroom, std::string& report) {
  const size_t heap = test::heap_in_use();
  rlimit saved{};
  getrlimit(RLIMIT_AS, &saved);
  if (!check(set_as_limit(vm_bytes() + headroom), "setrlimit(RLIMIT_AS)", report)) return false;
  bool ok = true;
  try {
    r.load();
    return check(false, "rung '" + r.name() + "' loaded within the headroom", report);
  } catch (const Error& e) {
    report += std::string("error: ") + e.what() + "\n";
  }
  ok &= check(r.state() == RungState::kReleased, "the rung is released", report);
  ok &= check(r.resident_bytes() == 0, "the rung counts 0 resident bytes", report);
  ok &= check(l.resident_bytes() == 0, "the ladder counts 0 resident bytes", report);
  const std::string files = fs::canonical(r.path()).string();
  ok &= check(!test::maps_file_under(files), "no file of the rung stays mapped", report);
  const int64_t grew = static_cast<int64_t>(test::heap_in_use()) - static_cast<int64_t>(heap);
  ok &= check(grew < int64_t{1} << 20,
              "the heap in use is back where it was (" + std::to_string(grew) + " bytes more)",
              report);
  if (fits != nullptr) {
    try {
      fits->load();
      ok &= check(fits->state() == RungState::kLoaded, "the smaller rung loads", report);
      fits->release();
    } catch (const Error& e) {
      ok &= check(false, std::string("the smaller rung loads: ") + e.what(), report);
    }
  }
  if (!check(setrlimit(RLIMIT_AS, &saved) == 0, "lifting the limit", report)) return false;
  r.load();
  ok &= check(r.state() == RungState::kLoaded, "loads once memory is back", report);
  ok &= check(test::maps_file_under(files), "a loaded rung's files are mapped", report);
  ok &= check(r.resident_bytes() == r.footprint().heap_weight_bytes + r.footprint().weight_bytes,
              "resident bytes of a loaded rung", report);
  r.release();
  return ok;
}

TEST(AllocFailure, AMappingThatDoesNotFitIsAnErrorAndLeavesNothingMapped) {
  if (test::sanitized()) GTEST_SKIP() << "RLIMIT_AS and sanitizers do not mix";
  if (test::under_emulation()) GTEST_SKIP() << test::kEmulatedAddressLimit;
  auto l = Ladder::open(manifest());
  Rung& big = l->rung(l->index("big"));
  Rung& small = l->rung(l->index("small"));
  ASSERT_GT(big.footprint().weight_bytes, 2 * kHeadroom);
  ASSERT_LT(small.footprint().weight_bytes, kHeadroom / 2);
  const ChildRun c = in_child(
      [&](std::string& report) { return fail_then_recover(*l, big, &small, kHeadroom, report); });
  RecordProperty("child_report", c.report);
  EXPECT_EQ(c.status, 0) << c.report;
  // The shard that did not fit is named, with the reason.
  EXPECT_NE(c.report.find((fs::path(manifest()).parent_path() / "big" / "model-0000").string()),
            std::string::npos)
      << c.report;
  EXPECT_NE(c.report.find("mmap failed"), std::string::npos) << c.report;
  EXPECT_NE(c.report.find("Cannot allocate memory"), std::string::npos) << c.report;
}

// Quantising at load needs heap beyond the mapping: an allocation fails half way through.
TEST(AllocFailure, AnAllocationThatFailsWhileQuantisingIsAnError) {
  if (test::sanitized()) GTEST_SKIP() << "RLIMIT_AS and sanitizers do not mix";
  if (test::under_emulation()) GTEST_SKIP() << test::kEmulatedAddressLimit;
  const fs::path dir = fs::path(manifest()).parent_path() / "big";
  LoadOptions q8;
  q8.precision = Precision::Q8;
  auto l = Ladder::single(dir, q8);
  Rung& big = l->rung(0);
  // Room for the mapping (and its 2 MiB alignment slack), not for the int8 copies (~31 MB).
  const size_t headroom = big.footprint().weight_bytes + 12 * kMiB;
  const ChildRun c = in_child(
      [&](std::string& report) { return fail_then_recover(*l, big, nullptr, headroom, report); });
  RecordProperty("child_report", c.report);
  EXPECT_EQ(c.status, 0) << c.report;
  EXPECT_NE(
      c.report.find("error: " + dir.string() + ": out of memory while loading the checkpoint"),
      std::string::npos)
      << c.report;
  EXPECT_NE(c.report.find("quantising to q8 at load"), std::string::npos) << c.report;
}

}  // namespace
}  // namespace molt
