// Live Linux signals (parsers on fixed text; readers skipped with a message where this machine
// lacks the source) and the allocating child process.
#include "molt/pressure/live.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "molt/common/error.h"
#include "molt/pressure/hog.h"

namespace molt {
namespace {

TEST(Live, ParsesPsi) {
  const PsiMemory p = parse_psi(
      "some avg10=1.50 avg60=0.20 avg300=0.00 total=12345\nfull avg10=0.10 avg60=0.00 avg300=0.00 "
      "total=99\n",
      "psi");
  EXPECT_DOUBLE_EQ(p.some.avg10, 1.5);
  EXPECT_DOUBLE_EQ(p.some.avg60, 0.2);
  EXPECT_EQ(p.some.total_us, 12345u);
  EXPECT_DOUBLE_EQ(p.full.avg10, 0.1);
  EXPECT_EQ(p.full.total_us, 99u);
  EXPECT_THROW(parse_psi("full avg10=0 avg60=0 avg300=0 total=0\n", "psi"), Error);
  try {
    parse_psi("some avg10=x avg60=0 avg300=0 total=0\n", "/proc/pressure/memory");
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(
        std::string(e.what()).find("/proc/pressure/memory: some line: 'avg10=x' is not a number"),
        std::string::npos)
        << e.what();
  }
}

TEST(Live, ParsesCgroupFiles) {
  EXPECT_EQ(parse_cgroup_limit("max\n", "memory.max"), std::nullopt);
  EXPECT_EQ(parse_cgroup_limit("536870912\n", "memory.max"), std::optional<uint64_t>(536870912));
  EXPECT_EQ(parse_cgroup_limit("9223372036854771712\n", "memory.limit_in_bytes"), std::nullopt);
  EXPECT_THROW(parse_cgroup_limit("lots\n", "memory.max"), Error);
  const auto ev = parse_key_values("low 0\nhigh 3\nmax 1\noom 0\noom_kill 0\n", "memory.events");
  EXPECT_EQ(ev.at("high"), 3u);
  EXPECT_EQ(ev.at("max"), 1u);
  try {
    parse_key_values("high\n", "memory.events");
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("memory.events: line 'high' has no value"),
              std::string::npos);
  }
  CgroupMemory m;
  m.max = 100;
  m.high = 80;
  EXPECT_EQ(m.limit(), std::optional<uint64_t>(80));
  m.high.reset();
  EXPECT_EQ(m.limit(), std::optional<uint64_t>(100));
}

TEST(Live, ParsesMountinfo) {
  const auto m = parse_mountinfo(
      "22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n"
      "31 22 0:27 /a\\134b /mnt/my\\040disk rw,nosuid shared:4 master:1 - cgroup2 none "
      "rw,nsdelegate\n"
      "40 22 0:30 / /x rw - tmpfs tmpfs\n",
      "mountinfo");
  ASSERT_EQ(m.size(), 3u);
  EXPECT_EQ(m[1].root, "/a\\b");
  EXPECT_EQ(m[1].mount_point, "/mnt/my disk");
  EXPECT_EQ(m[1].fstype, "cgroup2");
  EXPECT_EQ(m[1].source, "none");
  EXPECT_EQ(m[1].super_options, "rw,nsdelegate");
  EXPECT_EQ(m[2].super_options, "");
  try {
    parse_mountinfo(
        "22 1 8:1 / / rw - ext4 /dev/sda1 rw\n31 22 0:27 / /m rw shared:4 cgroup2 none rw\n", "mi");
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("mi: line 2: expected"), std::string::npos) << e.what();
  }
}

TEST(Live, CgroupPathRelativeToMountRoot) {
  using P = std::filesystem::path;
  EXPECT_EQ(relative_to_mount_root("/app.slice/molt.scope", "/"), P("app.slice/molt.scope"));
  EXPECT_EQ(relative_to_mount_root("/app.slice/molt.scope", "/app.slice"), P("molt.scope"));
  EXPECT_EQ(relative_to_mount_root("/app.slice/molt.scope", "/app.slice/"), P("molt.scope"));
  EXPECT_EQ(relative_to_mount_root("/app.slice", "/app.slice"), P());
  EXPECT_EQ(relative_to_mount_root("/", "/"), P());
  EXPECT_EQ(relative_to_mount_root("/app.slicex/a", "/app.slice"), std::nullopt);
  EXPECT_EQ(relative_to_mount_root("/other/a", "/app.slice"), std::nullopt);
  EXPECT_EQ(relative_to_mount_root("/", "/app.slice"), std::nullopt);
  EXPECT_EQ(relative_to_mount_root("/../../outside", "/"), std::nullopt);  // another namespace
}

TEST(Live, ParsesMeminfo) {
  const std::string text =
      "MemTotal:       24683128 kB\nMemFree:        19417172 kB\nMemAvailable:   21522784 kB\n";
  EXPECT_EQ(parse_meminfo_field(text, "MemAvailable", "meminfo"), 21522784ull * 1024);
  EXPECT_THROW(parse_meminfo_field(text, "SwapTotal", "meminfo"), Error);
}

TEST(Live, CgroupOfThisProcess) {
  std::string why;
  const auto cg = read_cgroup_memory(&why);
  if (!cg) GTEST_SKIP() << "no cgroup memory files here: " << why;
  EXPECT_GT(cg->current, 0u);
  std::printf("cgroup v%d %s: charged %.1f MiB, limit %s\n", cg->version, cg->dir.c_str(),
              cg->current / 1048576.0,
              cg->limit() ? std::to_string(*cg->limit() >> 20).c_str() : "none");
}

TEST(Live, PsiOfThisMachine) {
  std::string why;
  const auto psi = read_psi_memory(&why);
  if (!psi) GTEST_SKIP() << why;
  EXPECT_GE(psi->some.avg10, 0.0);
  auto trigger = PsiTrigger::open(150000, 2000000, &why);
  if (!trigger) GTEST_SKIP() << "PSI averages readable; trigger not available: " << why;
  std::printf("PSI trigger armed (some 150 ms per 2 s); fired now: %d\n", trigger->fired(0));
}

TEST(Live, MemAvailableAndTheLiveBudget) {
  std::string why;
  const auto avail = read_mem_available(&why);
  if (!avail) GTEST_SKIP() << why;
  EXPECT_GT(*avail, 0u);
  LiveBudget live;
  // cgroup, MemAvailable, PSI: each read or skipped with a reason.
  ASSERT_EQ(live.notes().size(), 3u);
  for (const std::string& n : live.notes()) std::printf("live: %s\n", n.c_str());
  BudgetQuery q;
  q.used_mib = 100;
  const double b = live.budget_mib(q);
  EXPECT_GT(b, 0.0);
  EXPECT_LE(b, 100 + *avail / 1048576.0);
  EXPECT_TRUE(live.warnings().empty());
}

TEST(Hog, TakesRealMemoryAndGivesItBack) {
  auto hog = Hog::start(64, -1);
  ASSERT_TRUE(hog->running());
  EXPECT_GE(hog->rss_bytes(), size_t{64} << 20);  // every page written, so resident
  hog->stop();
  EXPECT_FALSE(hog->running());
  EXPECT_EQ(hog->rss_bytes(), 0u);

  auto brief = Hog::start(8, 1);  // exits by itself
  for (int i = 0; i < 2000 && brief->running(); ++i) usleep(1000);
  EXPECT_FALSE(brief->running());
}

}  // namespace
}  // namespace molt
