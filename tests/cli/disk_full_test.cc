// A full disk during `molt fit` and `molt quantize`: the real binary runs with a small
// RLIMIT_FSIZE (SIGXFSZ ignored, so a write past the limit fails with EFBIG as one on a full
// disk fails with ENOSPC). The command must fail naming the file and the reason, and leave no
// half-written output that looks valid: a fresh output does not appear, an earlier one stays
// byte for byte, and no temporary is left beside it.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "molt/transfer/map_file.h"
#include "test_util.h"

namespace molt {
namespace {

namespace fs = std::filesystem;

struct Outcome {
  int exit_code = -1;  // -1: killed by a signal
  std::string output;  // stdout and stderr together
};

// Runs `molt <args>` with every file it writes capped at `limit` bytes. molt ignores SIGXFSZ
// itself; `ignore_sigxfsz` = false shows it does (the default action would kill it).
Outcome run_molt_fsize(const std::vector<std::string>& args, rlim_t limit,
                       bool ignore_sigxfsz = true) {
  std::vector<std::string> all = {MOLT_BINARY};
  all.insert(all.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : all) argv.push_back(a.data());
  argv.push_back(nullptr);
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return {};
  const pid_t pid = ::fork();
  if (pid == 0) {  // only async-signal-safe calls until exec
    ::dup2(fds[1], STDOUT_FILENO);
    ::dup2(fds[1], STDERR_FILENO);
    ::signal(SIGXFSZ, ignore_sigxfsz ? SIG_IGN : SIG_DFL);
    const rlimit r{limit, limit};
    ::setrlimit(RLIMIT_FSIZE, &r);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  ::close(fds[1]);
  Outcome run;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(fds[0], buf, sizeof buf)) > 0) run.output.append(buf, static_cast<size_t>(n));
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return run;
}

constexpr rlim_t kNoLimit = rlim_t{1} << 30;

// Every file under `dir` by relative path, with its size and a hash of its bytes (equal
// snapshots: the same files byte for byte, as far as a test can tell; short when printed).
std::map<std::string, std::string> snapshot(const fs::path& dir) {
  std::map<std::string, std::string> files;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (e.is_regular_file()) {
      const std::string bytes = test::read_file(e.path());
      files[fs::relative(e.path(), dir).string()] = std::to_string(bytes.size()) + " bytes, hash " +
                                                    std::to_string(std::hash<std::string>{}(bytes));
    }
  }
  return files;
}

// The names in `dir` (the output's parent: nothing else may be left there).
std::vector<std::string> entries(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

std::string tiny_s() {
  return (fs::path(MOLT_SOURCE_DIR) / "models/tiny-ladder/s").string();
}

// Where a failure at `limit` lands and what the message must name.
struct Fault {
  rlim_t limit;
  std::string file;  // the file the message names
};

void expect_named_failure(const Outcome& r, const Fault& f) {
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find(f.file), std::string::npos) << "expected " << f.file << ":\n" << r.output;
  EXPECT_NE(r.output.find("File too large"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("internal error"), std::string::npos) << r.output;
}

class DiskFull : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new test::TempDir();
    const std::string common =
        " --geometry qwen2.5-0.5b --vocab 200 --dtype f32 --intermediate 128 ";
    ASSERT_EQ(test::run_molt("synth" + common +
                             "--layers 3 --hidden 64 --heads 4 --kv-heads 2 --seed 1 --out " +
                             (*dir_ / "big").string())
                  .exit_code,
              0);
    ASSERT_EQ(test::run_molt("synth" + common +
                             "--layers 2 --hidden 48 --heads 2 --kv-heads 1 --seed 2 --out " +
                             (*dir_ / "small").string())
                  .exit_code,
              0);
    std::mt19937 rng(7);
    std::string ids;
    for (int i = 0; i < 3000; ++i) ids += std::to_string(rng() % 200) + " ";
    test::write_file(*dir_ / "ids.txt", ids);
  }
  static void TearDownTestSuite() { delete dir_; }

  static std::vector<std::string> fit_args(const fs::path& out, const std::string& k = "1") {
    return {"fit",
            "--from",
            (*dir_ / "big").string(),
            "--to",
            (*dir_ / "small").string(),
            "--corpus-ids",
            (*dir_ / "ids.txt").string(),
            "--sequences",
            "6",
            "--seq-len",
            "32",
            "--stride",
            "2",
            "--heldout-every",
            "3",
            "--threads",
            "1",
            "--k",
            k,
            "--out",
            out.string()};
  }
  static std::vector<std::string> quantize_args(const fs::path& out, bool int8 = false) {
    std::vector<std::string> a = {"quantize",   "--model",   tiny_s(), "--out",
                                  out.string(), "--threads", "1"};
    if (int8) a.push_back("--int8");
    return a;
  }
  static test::TempDir* dir_;
};
test::TempDir* DiskFull::dir_ = nullptr;

TEST_F(DiskFull, QuantizeFreshOutputNeverAppears) {
  if (!fs::exists(fs::path(tiny_s()) / "model.safetensors")) GTEST_SKIP();
  const rlim_t tokenizer = fs::file_size(fs::path(tiny_s()) / "tokenizer.json");
  // config.json is written first, then the tokenizer files are copied, then the weights.
  for (const Fault& f :
       {Fault{64, "config.json.tmp: write failed"}, Fault{4096, "tokenizer.json.tmp: write failed"},
        Fault{tokenizer + 4096, "model.safetensors.tmp: write failed"}}) {
    SCOPED_TRACE(f.file);
    test::TempDir parent;
    const Outcome r = run_molt_fsize(quantize_args(parent / "q4"), f.limit);
    expect_named_failure(r, f);
    EXPECT_FALSE(fs::exists(parent / "q4"));
    EXPECT_EQ(entries(parent.path()), std::vector<std::string>{});
  }
}

// Under a plain `ulimit -f` (SIGXFSZ at its default, which ends the process) molt still fails
// cleanly: it ignores the signal and the write fails with EFBIG.
TEST_F(DiskFull, AFileSizeLimitIsAnErrorNotASignal) {
  if (!fs::exists(fs::path(tiny_s()) / "model.safetensors")) GTEST_SKIP();
  test::TempDir parent;
  const Outcome r = run_molt_fsize(quantize_args(parent / "q4"), 64, /*ignore_sigxfsz=*/false);
  expect_named_failure(r, {64, "config.json.tmp: write failed"});
  EXPECT_EQ(entries(parent.path()), std::vector<std::string>{});
}

TEST_F(DiskFull, QuantizeLeavesAnEarlierCheckpointByteForByte) {
  if (!fs::exists(fs::path(tiny_s()) / "model.safetensors")) GTEST_SKIP();
  test::TempDir parent;
  const fs::path out = parent / "q";
  const Outcome first = run_molt_fsize(quantize_args(out, /*int8=*/true), kNoLimit);
  ASSERT_EQ(first.exit_code, 0) << first.output;
  test::write_file(out / "NOTES.md", "kept\n");  // a file of the user's, not the command's
  const auto before = snapshot(out);
  const rlim_t tokenizer = fs::file_size(fs::path(tiny_s()) / "tokenizer.json");
  for (const Fault& f : {Fault{64, "config.json.tmp: write failed"},
                         Fault{tokenizer + 4096, "model.safetensors.tmp: write failed"}}) {
    SCOPED_TRACE(f.file);
    const Outcome r = run_molt_fsize(quantize_args(out), f.limit);
    expect_named_failure(r, f);
    EXPECT_EQ(snapshot(out), before);
    EXPECT_EQ(entries(parent.path()), std::vector<std::string>{"q"});
  }
  // With room the new checkpoint replaces the old one whole: 4-bit now, the user's file kept,
  // nothing else beside it.
  const Outcome ok = run_molt_fsize(quantize_args(out), kNoLimit);
  ASSERT_EQ(ok.exit_code, 0) << ok.output;
  const auto cfg = nlohmann::json::parse(test::read_file(out / "config.json"));
  EXPECT_EQ(cfg["quantization"]["bits"], 4);
  EXPECT_EQ(test::read_file(out / "NOTES.md"), "kept\n");
  EXPECT_EQ(entries(parent.path()), std::vector<std::string>{"q"});
  const Outcome gen = run_molt_fsize({"generate", "--model", out.string(), "--ids", "1 2 3",
                                      "--max-tokens", "2", "--threads", "1"},
                                     kNoLimit);
  EXPECT_EQ(gen.exit_code, 0) << gen.output;
}

// One byte below the size of each file a fit writes (measured by a reference run into a folder
// of its own): each limit fails the first file written that is larger, so with k = 1 (a small
// map) failures land after the map too, in whatever the fit writes beside it.
std::vector<rlim_t> failing_limits(const std::vector<std::string>& args) {
  std::vector<rlim_t> limits;
  const Outcome ref = run_molt_fsize(args, kNoLimit);
  EXPECT_EQ(ref.exit_code, 0) << ref.output;
  const fs::path out = args.back();
  for (const auto& e : fs::directory_iterator(out)) limits.push_back(fs::file_size(e) - 1);
  std::sort(limits.begin(), limits.end());
  return limits;
}

TEST_F(DiskFull, FitFreshOutputNeverAppears) {
  test::TempDir parent, ref;
  const std::vector<rlim_t> limits = failing_limits(fit_args(ref / "map", "1"));
  ASSERT_GE(limits.size(), 2u);  // map.safetensors and index.json at least
  for (rlim_t limit : limits) {
    SCOPED_TRACE("limit " + std::to_string(limit));
    const Outcome r = run_molt_fsize(fit_args(parent / "map", "1"), limit);
    expect_named_failure(r, {limit, ".tmp: write failed"});
    EXPECT_FALSE(fs::exists(parent / "map"));
    EXPECT_EQ(entries(parent.path()), std::vector<std::string>{});
  }
  // The map is the first file written: the smallest limit fails there.
  expect_named_failure(run_molt_fsize(fit_args(parent / "map", "1"), 512),
                       {512, "map.safetensors.tmp: write failed"});
  // --keep-stats writes the statistics first (they outlive a failed solve): there it fails.
  auto keep = fit_args(parent / "map");
  keep.push_back("--keep-stats");
  expect_named_failure(run_molt_fsize(keep, 512), {512, "stats-1-of-1.molt-stats.tmp"});
  EXPECT_EQ(entries(parent.path()), std::vector<std::string>{});
  // Room for the largest file: the map appears whole.
  const Outcome ok = run_molt_fsize(fit_args(parent / "map", "1"), limits.back() + 1);
  ASSERT_EQ(ok.exit_code, 0) << ok.output;
  EXPECT_EQ(read_map_dir(parent / "map").info["k"], 1);
  EXPECT_EQ(entries(parent.path()), std::vector<std::string>{"map"});
}

TEST_F(DiskFull, FitLeavesAnEarlierMapByteForByte) {
  test::TempDir parent, ref;
  const fs::path out = parent / "map";
  const Outcome first = run_molt_fsize(fit_args(out, "2"), kNoLimit);
  ASSERT_EQ(first.exit_code, 0) << first.output;
  const auto before = snapshot(out);
  for (rlim_t limit : failing_limits(fit_args(ref / "map", "1"))) {
    SCOPED_TRACE("limit " + std::to_string(limit));
    const Outcome r = run_molt_fsize(fit_args(out, "1"), limit);
    expect_named_failure(r, {limit, ".tmp: write failed"});
    EXPECT_EQ(snapshot(out), before);
    EXPECT_EQ(entries(parent.path()), std::vector<std::string>{"map"});
  }
  EXPECT_EQ(read_map_dir(out).info["k"], 2);  // still the first map, checksums and all

  const Outcome ok = run_molt_fsize(fit_args(out, "1"), kNoLimit);
  ASSERT_EQ(ok.exit_code, 0) << ok.output;
  EXPECT_EQ(read_map_dir(out).info["k"], 1);
  for (const std::string& name : entries(out)) {
    EXPECT_EQ(name.find(".tmp"), std::string::npos) << name;
  }
  EXPECT_EQ(entries(parent.path()), std::vector<std::string>{"map"});
}

TEST_F(DiskFull, MergeIntoTheStatisticsFolderKeepsItWhole) {
  test::TempDir parent;
  const fs::path kept = parent / "kept";
  auto args = fit_args(kept, "2");
  args.push_back("--keep-stats");
  const Outcome first = run_molt_fsize(args, kNoLimit);
  ASSERT_EQ(first.exit_code, 0) << first.output;
  const auto before = snapshot(kept);
  ASSERT_EQ(before.count("stats-1-of-1.molt-stats"), 1u);
  const std::vector<std::string> merge = {
      "fit", "merge", kept.string(), "--method", "depth-remap", "--threads", "1"};
  const Outcome r = run_molt_fsize(merge, 512);
  expect_named_failure(r, {512, "map.safetensors.tmp: write failed"});
  EXPECT_EQ(snapshot(kept), before);
  EXPECT_EQ(entries(parent.path()), std::vector<std::string>{"kept"});
  // With room: the new map replaces the old one, the statistics stay beside it.
  const Outcome ok = run_molt_fsize(merge, kNoLimit);
  ASSERT_EQ(ok.exit_code, 0) << ok.output;
  EXPECT_EQ(read_map_dir(kept).method, "depth-remap");
  EXPECT_EQ(snapshot(kept).at("stats-1-of-1.molt-stats"), before.at("stats-1-of-1.molt-stats"));
  for (const std::string& name : entries(kept)) {
    EXPECT_EQ(name.find(".tmp"), std::string::npos) << name;
  }
  EXPECT_EQ(entries(parent.path()), std::vector<std::string>{"kept"});
}

}  // namespace
}  // namespace molt
