#include "molt/kernels/team.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <atomic>
#include <stdexcept>
#include <vector>

#include "kernels_test_util.h"
#include "molt/kernels/attention.h"
#include "molt/kernels/linear.h"
#include "molt/kernels/quant.h"
#include "molt/kernels/threads.h"

namespace molt {
namespace {

using test::random_floats;

// Sets the kernel thread count for one test and puts the old one back.
class Threads {
 public:
  explicit Threads(int n) : before_(num_threads()) { set_num_threads(n); }
  ~Threads() { set_num_threads(before_); }
  Threads(const Threads&) = delete;
  Threads& operator=(const Threads&) = delete;

 private:
  int before_;
};

TEST(Team, EveryThreadRunsEveryPartAndItsWritesAreSeenAfter) {
  for (int nt : {2, 3}) {
    Threads threads(nt);
    constexpr int kParts = 500;
    std::vector<int> seen(static_cast<size_t>(kParts * nt), 0);
    std::vector<int> team_sizes(static_cast<size_t>(kParts), 0);
    bool inside = false;
    run_as_team([&] {
      inside = in_team();
      for (int p = 0; p < kParts; ++p) {
        parallel([&] {
          const int t = omp_get_thread_num();
          if (t == 0) team_sizes[static_cast<size_t>(p)] = omp_get_num_threads();
          seen[static_cast<size_t>(p * nt + t)] = p + 1;
        });
        // Every thread's write of this part is visible here, before the next part starts.
        for (int t = 0; t < nt; ++t) ASSERT_EQ(seen[static_cast<size_t>(p * nt + t)], p + 1);
      }
    });
    EXPECT_TRUE(inside);
    EXPECT_FALSE(in_team());
    for (int s : team_sizes) EXPECT_EQ(s, nt);
  }
}

TEST(Team, ParallelOutsideAStepIsAnOrdinaryRegion) {
  Threads threads(2);
  std::atomic<int> ran{0};
  parallel([&] { ran.fetch_add(1); });
  EXPECT_EQ(ran.load(), 2);
}

TEST(Team, AnExceptionFromTheStepReachesTheCallerAndTheThreadsAreFree) {
  Threads threads(2);
  EXPECT_THROW(run_as_team([&] {
                 parallel([] {});
                 throw std::runtime_error("step failed");
               }),
               std::runtime_error);
  EXPECT_FALSE(in_team());
  // The team's threads left the region: a new step runs on both.
  std::atomic<int> ran{0};
  run_as_team([&] { parallel([&] { ran.fetch_add(1); }); });
  EXPECT_EQ(ran.load(), 2);
}

TEST(Team, AStepInsideAStepRunsAsPartOfIt) {
  Threads threads(2);
  std::atomic<int> ran{0};
  run_as_team([&] { run_as_team([&] { parallel([&] { ran.fetch_add(1); }); }); });
  EXPECT_EQ(ran.load(), 2);
}

TEST(Team, WithOneThreadTheStepRunsAlone) {
  Threads threads(1);
  std::atomic<int> ran{0};
  run_as_team([&] {
    EXPECT_FALSE(in_team());
    parallel([&] { ran.fetch_add(1); });
  });
  EXPECT_EQ(ran.load(), 1);
}

// The kernels give the same results bit for bit inside a step as in their own regions.
TEST(Team, KernelsGiveTheSameResultsInsideAStep) {
  Threads threads(2);
  const auto dense = random_floats(size_t{256} * 512, 1);
  const QuantizedMatrix q4 = interleave_rows8(
      quantize_affine(WeightMatrix{DType::F32, 256, 512, dense.data()}, 4, 64, DType::BF16).view());
  const QuantizedMatrix q8 =
      quantize_affine(WeightMatrix{DType::F32, 256, 512, dense.data()}, 8, 64, DType::BF16);
  const WeightMatrix f32{DType::F32, 256, 512, dense.data()};
  const auto x = random_floats(512, 2);
  const AttentionShape shape{4, 2, 64};
  const int64_t p0 = 300;
  const auto q = random_floats(4 * 64, 3);
  const auto k = random_floats(static_cast<size_t>((p0 + 1) * 2 * 64), 4);
  const auto v = random_floats(k.size(), 5);
  auto run = [&] {
    std::vector<float> out(3 * 256 + 4 * 64);
    matvec(q4.view(), x.data(), out.data());
    matvec(q8.view(), x.data(), out.data() + 256);
    matvec(f32, x.data(), out.data() + 512);
    attention(shape, q.data(), k.data(), v.data(), p0, 1, out.data() + 768);
    return out;
  };
  const std::vector<float> alone = run();
  std::vector<float> stepped;
  run_as_team([&] { stepped = run(); });
  EXPECT_EQ(alone, stepped);
}

}  // namespace
}  // namespace molt
