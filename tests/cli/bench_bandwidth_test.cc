// molt bench bandwidth: the memory-bandwidth bound printed beside decode speed.
#include <gtest/gtest.h>
#include <sched.h>

#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "test_util.h"

namespace molt {
namespace {

TEST(CliBenchBandwidth, JsonHasTriadAndRead) {
  // Small arrays keep it fast; the figures are not asserted beyond being measured.
  auto r = test::run_molt("bench bandwidth --mib 4 --repeats 1 --threads 1 --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto j = nlohmann::json::parse(r.output);
  EXPECT_GT(j.at("triad_gb_s").get<double>(), 0.0);
  EXPECT_GT(j.at("read_gb_s").get<double>(), 0.0);
  EXPECT_EQ(j.at("threads").get<int>(), 1);
  EXPECT_EQ(j.at("mib_per_array").get<int>(), 4);
}

TEST(CliBenchBandwidth, RejectsZeroSize) {
  auto r = test::run_molt("bench bandwidth --mib 0");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("bench bandwidth: --mib must be at least 1"), std::string::npos)
      << r.output;
}

// molt runs itself once more to set libgomp's wait policy before it loads. With OMP_PROC_BIND
// set, libgomp has by then pinned the first thread to one CPU; the new image must still get every
// CPU the process had, one thread on each (it once ran both threads on CPU 0: half speed).
TEST(CliBenchBandwidth, BoundThreadsGetCpusOfTheirOwn) {
  cpu_set_t mine;
  if (test::under_emulation() || sched_getaffinity(0, sizeof mine, &mine) != 0 ||
      CPU_COUNT(&mine) < 2) {
    GTEST_SKIP() << "needs 2 CPUs and a native process";
  }
  test::CommandResult r;
  {
    const test::ScopedEnv bind("OMP_PROC_BIND", "close"), show("OMP_DISPLAY_AFFINITY", "true"),
        format("OMP_AFFINITY_FORMAT", "molt-affinity %A.");
    r = test::run_molt("bench bandwidth --mib 1 --repeats 1 --threads 2 --json");
  }
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::set<std::string> cpus;
  for (size_t at = r.output.find("molt-affinity "); at != std::string::npos;
       at = r.output.find("molt-affinity ", at + 1)) {
    const size_t from = at + 14;
    cpus.insert(r.output.substr(from, r.output.find('.', from) - from));
  }
  EXPECT_EQ(cpus.size(), 2u) << r.output;
}

}  // namespace
}  // namespace molt
