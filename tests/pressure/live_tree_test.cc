// The live budget on fake /proc and /sys trees (one temp dir per test, a test-driven clock):
// which directory each cgroup layout resolves to, the budget it yields, squeezes from the PSI
// counter and cgroup events, and sources that break after construction.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "molt/pressure/live.h"

namespace molt {
namespace {

namespace fs = std::filesystem;

constexpr uint64_t kMiB = uint64_t{1} << 20;

std::string bytes(uint64_t mib) {
  return fmt::format("{}\n", mib * kMiB);
}
std::string meminfo(uint64_t avail_mib) {
  return fmt::format(
      "MemTotal:       16777216 kB\nMemFree:         1000000 kB\nMemAvailable: {:>10} kB\n",
      avail_mib * 1024);
}
std::string psi(uint64_t some_total) {
  return fmt::format(
      "some avg10=0.00 avg60=0.00 avg300=0.00 total={}\nfull avg10=0.00 avg60=0.00 avg300=0.00 "
      "total=0\n",
      some_total);
}
std::string events(uint64_t high, uint64_t max = 0) {
  return fmt::format("low 0\nhigh {}\nmax {}\noom 0\noom_kill 0\n", high, max);
}

constexpr const char* kRootMount = "22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n";
constexpr const char* kCgroup2Mount =
    "30 22 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 "
    "rw,nsdelegate,memory_recursiveprot\n";

class FakeTree : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "molt-live-XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    root_ = tmpl;
  }
  void TearDown() override { fs::remove_all(root_); }

  void put(const std::string& rel, const std::string& text) {
    const fs::path p = root_ / rel;
    fs::create_directories(p.parent_path());
    std::ofstream(p) << text;
  }
  void drop(const std::string& rel) { ASSERT_TRUE(fs::remove(root_ / rel)) << rel; }

  LiveOptions options() {
    LiveOptions o;
    o.root = root_;
    o.reserve_mib = 64;
    o.squeeze = 0.8;
    o.squeeze_ms = 2000;
    o.psi_stall_us = 150000;
    o.psi_window_us = 2000000;
    o.now_ms = [this] { return now_; };
    return o;
  }
  double budget(LiveBudget& live, double used_mib) {
    BudgetQuery q;
    q.used_mib = used_mib;
    return live.budget_mib(q);
  }

  // cgroup v2 at /sys/fs/cgroup, the process in /app.slice/molt.scope: limit 800 MiB (high),
  // 300 MiB charged → headroom 500 MiB; MemAvailable 4096 MiB.
  static constexpr const char* kScope = "sys/fs/cgroup/app.slice/molt.scope";
  void cgroup_v2_tree() {
    put("proc/self/mountinfo", std::string(kRootMount) + kCgroup2Mount);
    put("proc/self/cgroup", "0::/app.slice/molt.scope\n");
    put(std::string(kScope) + "/memory.current", bytes(300));
    put(std::string(kScope) + "/memory.max", bytes(1024));
    put(std::string(kScope) + "/memory.high", bytes(800));
    put(std::string(kScope) + "/memory.events", events(0));
    put("proc/meminfo", meminfo(4096));
  }

  fs::path root_;
  double now_ = 0;
};

TEST_F(FakeTree, CgroupV2) {
  cgroup_v2_tree();
  std::string why;
  const auto cg = read_cgroup_memory(&why, root_);
  ASSERT_TRUE(cg) << why;
  EXPECT_EQ(cg->version, 2);
  EXPECT_EQ(cg->dir, root_ / kScope);
  EXPECT_EQ(cg->current, 300 * kMiB);
  EXPECT_EQ(cg->limit(), std::optional<uint64_t>(800 * kMiB));

  LiveBudget live(options());
  ASSERT_EQ(live.notes().size(), 3u);
  EXPECT_EQ(live.notes()[0],
            fmt::format("cgroup v2 {}: charged 300 MiB, limit 800 MiB", (root_ / kScope).string()));
  EXPECT_EQ(live.notes()[1], "MemAvailable: 4096 MiB");
  EXPECT_EQ(live.notes()[2].rfind("PSI: skipped: ", 0), 0u) << live.notes()[2];
  // 200 used + min(800 − 300, 4096) − 64 reserve.
  EXPECT_DOUBLE_EQ(budget(live, 200), 636.0);
  // The charge moves: 700 MiB charged → headroom 100.
  put(std::string(kScope) + "/memory.current", bytes(700));
  EXPECT_DOUBLE_EQ(budget(live, 200), 236.0);
  // Over high: the budget is never negative.
  put(std::string(kScope) + "/memory.current", bytes(1000));
  EXPECT_DOUBLE_EQ(budget(live, 50), 0.0);
  EXPECT_TRUE(live.warnings().empty());
}

TEST_F(FakeTree, CgroupV2MountRootIsNotSlash) {
  // A container sees its own cgroup bind-mounted: the mount's root is /app.slice, so the
  // process's /app.slice/molt.scope is mnt/molt.scope, not mnt/app.slice/molt.scope.
  put("proc/self/mountinfo",
      std::string(kRootMount) +
          "30 22 0:26 /app.slice /sys/fs/cgroup rw,relatime shared:4 - cgroup2 cgroup2 rw\n");
  put("proc/self/cgroup", "0::/app.slice/molt.scope\n");
  put("sys/fs/cgroup/molt.scope/memory.current", bytes(100));
  put("sys/fs/cgroup/molt.scope/memory.max", bytes(612));
  put("sys/fs/cgroup/molt.scope/memory.high", "max\n");
  put("sys/fs/cgroup/app.slice/molt.scope/memory.current", bytes(1));  // the wrong place
  put("sys/fs/cgroup/app.slice/molt.scope/memory.max", bytes(2));
  put("proc/meminfo", meminfo(4096));
  std::string why;
  const auto cg = read_cgroup_memory(&why, root_);
  ASSERT_TRUE(cg) << why;
  EXPECT_EQ(cg->dir, root_ / "sys/fs/cgroup/molt.scope");
  LiveBudget live(options());
  EXPECT_DOUBLE_EQ(budget(live, 100), 100 + (612 - 100) - 64.0);

  // A cgroup outside the mount's root: this mount cannot reach it.
  put("proc/self/cgroup", "0::/other.slice/x.scope\n");
  const auto none = read_cgroup_memory(&why, root_);
  EXPECT_FALSE(none);
  EXPECT_NE(why.find("cgroup v2: the mount at /sys/fs/cgroup has root /app.slice, which does not "
                     "contain /other.slice/x.scope"),
            std::string::npos)
      << why;
  LiveBudget meminfo_only(options());
  EXPECT_EQ(meminfo_only.notes()[0].rfind("cgroup: skipped: cgroup v2: the mount at", 0), 0u)
      << meminfo_only.notes()[0];
  EXPECT_DOUBLE_EQ(budget(meminfo_only, 100), 100 + 4096 - 64.0);
}

TEST_F(FakeTree, CgroupV2MountPointWithEscapes) {
  // mountinfo writes a space as \040; the tags before " - " vary in number.
  put("proc/self/mountinfo",
      std::string(kRootMount) +
          "31 22 0:27 / /sys/fs/my\\040cgroup rw shared:4 master:1 propagate_from:2 - cgroup2 "
          "cgroup2 rw\n");
  put("proc/self/cgroup", "0::/a\n");
  put("sys/fs/my cgroup/a/memory.current", bytes(10));
  put("sys/fs/my cgroup/a/memory.max", bytes(110));
  std::string why;
  const auto cg = read_cgroup_memory(&why, root_);
  ASSERT_TRUE(cg) << why;
  EXPECT_EQ(cg->dir, root_ / "sys/fs/my cgroup/a");
  LiveBudget live(options());
  EXPECT_EQ(live.notes()[1].rfind("MemAvailable: skipped: ", 0), 0u);
  EXPECT_DOUBLE_EQ(budget(live, 50), 50 + 100 - 64.0);
}

TEST_F(FakeTree, CgroupV1MemoryHierarchy) {
  // A hybrid host: a cgroup2 mount without the memory controller, memory on v1.
  put("proc/self/mountinfo",
      std::string(kRootMount) +
          "31 22 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"
          "32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n"
          "35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"
          "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n");
  put("proc/self/cgroup", "4:memory:/process_api/abc\n1:cpu:/\n0::/\n");
  put("sys/fs/cgroup/unified/cgroup.procs", "1\n");
  const std::string dir = "sys/fs/cgroup/memory/process_api/abc";
  put(dir + "/memory.limit_in_bytes", bytes(2048));
  put(dir + "/memory.usage_in_bytes", bytes(512));
  put(dir + "/memory.soft_limit_in_bytes", bytes(1536));
  put(dir + "/memory.failcnt", "0\n");
  put(dir + "/memory.oom_control", "oom_kill_disable 0\nunder_oom 0\noom_kill 0\n");
  put("proc/meminfo", meminfo(8192));
  std::string why;
  const auto cg = read_cgroup_memory(&why, root_);
  ASSERT_TRUE(cg) << why;
  EXPECT_EQ(cg->version, 1);
  EXPECT_EQ(cg->dir, root_ / dir);
  EXPECT_EQ(cg->limit(), std::optional<uint64_t>(1536 * kMiB));

  LiveBudget live(options());
  // 100 used + min(1536 − 512, 8192) − 64.
  EXPECT_DOUBLE_EQ(budget(live, 100), 1060.0);
  // An unlimited soft limit (v1 writes ~2^63): limit_in_bytes rules.
  put(dir + "/memory.soft_limit_in_bytes", "9223372036854771712\n");
  EXPECT_DOUBLE_EQ(budget(live, 100), 100 + (2048 - 512) - 64.0);
  // failcnt rising is a hit on the limit: squeezed to 0.8 × used for squeeze_ms.
  put(dir + "/memory.failcnt", "3\n");
  now_ = 10;
  EXPECT_DOUBLE_EQ(budget(live, 100), 80.0);
  now_ = 2009;
  EXPECT_DOUBLE_EQ(budget(live, 100), 80.0);
  now_ = 2010;
  EXPECT_DOUBLE_EQ(budget(live, 100), 1572.0);
  // So is an oom kill.
  put(dir + "/memory.oom_control", "oom_kill_disable 0\nunder_oom 0\noom_kill 1\n");
  EXPECT_DOUBLE_EQ(budget(live, 100), 80.0);
}

TEST_F(FakeTree, CgroupV1ContainerBindMount) {
  put("proc/self/mountinfo",
      std::string(kRootMount) +
          "35 22 0:32 /docker/abc /sys/fs/cgroup/memory ro,relatime - cgroup cgroup rw,memory\n");
  put("proc/self/cgroup", "4:memory:/docker/abc\n");
  put("sys/fs/cgroup/memory/memory.usage_in_bytes", bytes(100));
  put("sys/fs/cgroup/memory/memory.limit_in_bytes", bytes(400));
  std::string why;
  const auto cg = read_cgroup_memory(&why, root_);
  ASSERT_TRUE(cg) << why;
  EXPECT_EQ(cg->dir, root_ / "sys/fs/cgroup/memory");
  EXPECT_EQ(cg->version, 1);
  LiveBudget live(options());
  EXPECT_DOUBLE_EQ(budget(live, 10), 10 + 300 - 64.0);
}

TEST_F(FakeTree, NoCgroupMeminfoOnly) {
  put("proc/self/mountinfo", kRootMount);
  put("proc/self/cgroup", "0::/\n");
  put("proc/meminfo", meminfo(1000));
  std::string why;
  EXPECT_FALSE(read_cgroup_memory(&why, root_));
  EXPECT_EQ(why, "cgroup v2: no cgroup2 mount; cgroup v1: no v1 memory hierarchy");
  LiveBudget live(options());
  EXPECT_EQ(live.notes()[0], "cgroup: skipped: " + why);
  EXPECT_DOUBLE_EQ(budget(live, 300), 300 + 1000 - 64.0);
  put("proc/meminfo", meminfo(500));
  EXPECT_DOUBLE_EQ(budget(live, 300), 300 + 500 - 64.0);
}

TEST_F(FakeTree, NothingAtAll) {
  LiveBudget live(options());
  ASSERT_EQ(live.notes().size(), 3u);
  EXPECT_EQ(live.notes()[0], fmt::format("cgroup: skipped: {} unreadable",
                                         (root_ / "proc/self/mountinfo").string()));
  EXPECT_TRUE(std::isinf(budget(live, 100)));  // no source limits it
}

TEST_F(FakeTree, PsiTotalRiseSqueezesForSqueezeMs) {
  put("proc/meminfo", meminfo(1000));
  put("proc/pressure/memory", psi(1000));
  LiveBudget live(options());
  ASSERT_EQ(live.notes().size(), 3u);
  EXPECT_NE(live.notes()[2].find("detector: some total= rising ≥ 150000 µs"), std::string::npos)
      << live.notes()[2];
  EXPECT_NE(live.notes()[2].find("is not on procfs"), std::string::npos) << live.notes()[2];
  const double normal = 500 + 1000 - 64.0;
  now_ = 100;
  EXPECT_DOUBLE_EQ(budget(live, 500), normal);
  // 150 ms stalled since the previous check: squeezed to 0.8 × 500 for 2000 ms.
  put("proc/pressure/memory", psi(151000));
  now_ = 200;
  EXPECT_DOUBLE_EQ(budget(live, 500), 400.0);
  now_ = 1000;
  EXPECT_DOUBLE_EQ(budget(live, 500), 400.0);
  now_ = 2199;
  EXPECT_DOUBLE_EQ(budget(live, 400), 320.0);  // squeeze × what is used now
  now_ = 2200;
  EXPECT_DOUBLE_EQ(budget(live, 500), normal);
  // 100 ms is not enough; 60 ms more within the 2 s window is.
  put("proc/pressure/memory", psi(251000));
  now_ = 3000;
  EXPECT_DOUBLE_EQ(budget(live, 500), normal);
  put("proc/pressure/memory", psi(311000));
  now_ = 3500;
  EXPECT_DOUBLE_EQ(budget(live, 500), 400.0);
  // A slow leak of 100 ms every 3 s never squeezes.
  now_ = 10000;
  EXPECT_DOUBLE_EQ(budget(live, 500), normal);
  put("proc/pressure/memory", psi(411000));
  now_ = 13000;
  EXPECT_DOUBLE_EQ(budget(live, 500), normal);
  put("proc/pressure/memory", psi(511000));
  now_ = 16000;
  EXPECT_DOUBLE_EQ(budget(live, 500), normal);
  EXPECT_TRUE(live.warnings().empty());
}

TEST_F(FakeTree, TriggerRefusesAFakeFileAndLeavesItAlone) {
  put("proc/pressure/memory", psi(7));
  std::string why;
  EXPECT_EQ(PsiTrigger::open(150000, 2000000, &why, root_), nullptr);
  EXPECT_NE(why.find("is not on procfs"), std::string::npos) << why;
  std::string why_psi;
  const auto p = read_psi_memory(&why_psi, root_);
  ASSERT_TRUE(p) << why_psi;
  EXPECT_EQ(p->some.total_us, 7u);
}

TEST_F(FakeTree, CgroupHighEventSqueezes) {
  cgroup_v2_tree();
  LiveBudget live(options());
  EXPECT_DOUBLE_EQ(budget(live, 200), 636.0);
  put(std::string(kScope) + "/memory.events", events(1));
  now_ = 50;
  EXPECT_DOUBLE_EQ(budget(live, 200), 160.0);
  now_ = 1000;
  EXPECT_DOUBLE_EQ(budget(live, 200), 160.0);  // no new event, still inside squeeze_ms
  now_ = 2050;
  EXPECT_DOUBLE_EQ(budget(live, 200), 636.0);
  put(std::string(kScope) + "/memory.events", events(1, 1));  // max too
  EXPECT_DOUBLE_EQ(budget(live, 200), 160.0);
}

TEST_F(FakeTree, CgroupFileGoneKeepsTheLastHeadroom) {
  cgroup_v2_tree();
  LiveBudget live(options());
  EXPECT_DOUBLE_EQ(budget(live, 200), 636.0);  // check 1
  put(std::string(kScope) + "/memory.current", bytes(400));
  EXPECT_DOUBLE_EQ(budget(live, 200), 536.0);  // check 2: headroom 400
  drop(std::string(kScope) + "/memory.current");
  EXPECT_DOUBLE_EQ(budget(live, 200), 536.0);  // check 3
  EXPECT_DOUBLE_EQ(budget(live, 250), 586.0);
  ASSERT_EQ(live.warnings().size(), 1u);  // once, not every check
  EXPECT_EQ(live.warnings()[0],
            fmt::format("cgroup v2 {}: memory.current unreadable since check 3; using the last "
                        "known headroom 400 MiB",
                        (root_ / kScope).string()));
  EXPECT_NE(live.describe().find("warnings: cgroup v2"), std::string::npos);
  // Back again: fresh values.
  put(std::string(kScope) + "/memory.current", bytes(100));
  EXPECT_DOUBLE_EQ(budget(live, 200), 200 + 700 - 64.0);
  // A limit file that was there at construction going away is a fault too, not "no limit".
  drop(std::string(kScope) + "/memory.high");
  EXPECT_DOUBLE_EQ(budget(live, 200), 200 + 700 - 64.0);
  EXPECT_EQ(live.warnings().size(), 1u);  // cgroup already warned
}

TEST_F(FakeTree, CgroupFileCorruptKeepsTheLastHeadroom) {
  cgroup_v2_tree();
  LiveBudget live(options());
  EXPECT_DOUBLE_EQ(budget(live, 200), 636.0);
  put(std::string(kScope) + "/memory.current", "garbage\n");
  EXPECT_DOUBLE_EQ(budget(live, 200), 636.0);
  ASSERT_EQ(live.warnings().size(), 1u);
  const std::string& w = live.warnings()[0];
  EXPECT_EQ(w.rfind(fmt::format("cgroup v2 {}: unparsable (", (root_ / kScope).string()), 0), 0u)
      << w;
  EXPECT_NE(w.find("memory.current: 'garbage' is not a byte count) since check 2; using the last "
                   "known headroom 500 MiB"),
            std::string::npos)
      << w;
  // A torn write must not read as a smaller number.
  put(std::string(kScope) + "/memory.current", "12x\n");
  EXPECT_DOUBLE_EQ(budget(live, 200), 636.0);
  drop(std::string(kScope) + "/memory.high");
  put(std::string(kScope) + "/memory.current", bytes(300));
  EXPECT_DOUBLE_EQ(budget(live, 200), 636.0);  // memory.high gone: still the last known
}

TEST_F(FakeTree, PsiFileRemovedWarnsAndNeverThrows) {
  put("proc/meminfo", meminfo(1000));
  put("proc/pressure/memory", psi(0));
  LiveBudget live(options());
  const double normal = 100 + 1000 - 64.0;
  EXPECT_DOUBLE_EQ(budget(live, 100), normal);
  drop("proc/pressure/memory");
  double b = 0;
  EXPECT_NO_THROW(b = budget(live, 100));
  EXPECT_DOUBLE_EQ(b, normal);
  ASSERT_EQ(live.warnings().size(), 1u);
  EXPECT_EQ(live.warnings()[0].rfind(fmt::format("PSI {}: unreadable since check 2; ",
                                                 (root_ / "proc/pressure/memory").string()),
                                     0),
            0u)
      << live.warnings()[0];
  // Back with a large total: a fresh baseline, not a squeeze for what happened meanwhile.
  put("proc/pressure/memory", psi(10000000));
  now_ = 100;
  EXPECT_DOUBLE_EQ(budget(live, 100), normal);
  put("proc/pressure/memory", psi(10150000));
  now_ = 200;
  EXPECT_DOUBLE_EQ(budget(live, 100), 80.0);
  // Unparsable later: the same, no throw.
  put("proc/pressure/memory", "some avg10=zzz\n");
  now_ = 5000;
  EXPECT_NO_THROW(b = budget(live, 100));
  EXPECT_DOUBLE_EQ(b, normal);
}

TEST_F(FakeTree, MeminfoGoneKeepsTheLastValue) {
  put("proc/meminfo", meminfo(1000));
  LiveBudget live(options());
  EXPECT_DOUBLE_EQ(budget(live, 100), 1036.0);
  put("proc/meminfo", meminfo(900));
  EXPECT_DOUBLE_EQ(budget(live, 100), 936.0);
  drop("proc/meminfo");
  EXPECT_DOUBLE_EQ(budget(live, 100), 936.0);
  ASSERT_EQ(live.warnings().size(), 1u);
  EXPECT_EQ(live.warnings()[0],
            fmt::format("MemAvailable {}: unreadable since check 3; using the last known headroom "
                        "900 MiB",
                        (root_ / "proc/meminfo").string()));
}

TEST_F(FakeTree, MalformedAtConstructionSkipsTheSource) {
  cgroup_v2_tree();
  put(std::string(kScope) + "/memory.current", "abc\n");
  put("proc/pressure/memory", "full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n");
  LiveBudget live(options());
  ASSERT_EQ(live.notes().size(), 3u);
  EXPECT_EQ(live.notes()[0],
            fmt::format("cgroup: skipped: {}/memory.current: 'abc' is not a byte count",
                        (root_ / kScope).string()));
  EXPECT_EQ(live.notes()[2], fmt::format("PSI: skipped: {}: no 'some' line",
                                         (root_ / "proc/pressure/memory").string()));
  EXPECT_DOUBLE_EQ(budget(live, 200), 200 + 4096 - 64.0);  // MemAvailable alone

  put("proc/self/mountinfo", std::string(kRootMount) + "30 22 0:26 / /sys/fs/cgroup rw\n");
  put("proc/meminfo", "MemAvailable:   lots kB\n");
  LiveBudget broken(options());
  EXPECT_NE(broken.notes()[0].find("mountinfo: line 2: expected"), std::string::npos)
      << broken.notes()[0];
  EXPECT_NE(broken.notes()[1].find("MemAvailable: cannot read"), std::string::npos)
      << broken.notes()[1];
  EXPECT_TRUE(std::isinf(budget(broken, 200)));
}

}  // namespace
}  // namespace molt
