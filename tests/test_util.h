// Helpers shared by the test suites: temporary folders, running the CLI, reading files.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <sstream>
#include <string>

#include "molt/kernels/linear.h"

namespace molt::test {

// A fresh folder under the system temp dir, removed when the object dies.
class TempDir {
 public:
  TempDir() {
    std::random_device rd;
    path_ = std::filesystem::temp_directory_path() /
            ("molt-test-" + std::to_string(rd()) + "-" + std::to_string(rd()));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(const std::string& name) const { return path_ / name; }

 private:
  std::filesystem::path path_;
};

#ifdef MOLT_SOURCE_DIR
// The tree a page-trace test reads: MOLT_TRACE_ROOT (a deliberately broken copy, to watch the
// test fail) or the source tree.
inline std::filesystem::path trace_root() {
  const char* r = std::getenv("MOLT_TRACE_ROOT");
  return r != nullptr && *r != 0 ? std::filesystem::path(r)
                                 : std::filesystem::path(MOLT_SOURCE_DIR);
}
#endif

// Sets an environment variable for the life of the object (the commands a test runs inherit
// it), then puts back what was there before, or unsets it.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    const char* old = std::getenv(name);
    if (old != nullptr) old_ = old;
    setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (old_) {
      setenv(name_.c_str(), old_->c_str(), 1);
    } else {
      unsetenv(name_.c_str());
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_;
  std::optional<std::string> old_;
};

struct CommandResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr together
};

// Runs `molt <args>` (the binary under test) through the shell, with stderr merged.
inline CommandResult run_molt(const std::string& args, const std::string& stdin_text = "") {
  std::string cmd = std::string(MOLT_BINARY) + " " + args + " 2>&1";
  if (!stdin_text.empty()) {
    std::filesystem::path in = std::filesystem::temp_directory_path() /
                               ("molt-stdin-" + std::to_string(std::random_device{}()));
    std::ofstream(in, std::ios::binary) << stdin_text;
    cmd = std::string(MOLT_BINARY) + " " + args + " < " + in.string() + " 2>&1";
  }
  CommandResult r;
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.output.append(buf, n);
  int status = pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

inline std::string read_file(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

inline void write_file(const std::filesystem::path& p, const std::string& bytes) {
  std::ofstream(p, std::ios::binary) << bytes;
}

// The share of RSS that AddressSanitizer may add to memory the program reads: it reads the
// shadow byte of every 8 bytes, and some kernels charge those shadow pages to the process
// (6.18 does; stop 28's CI kernel did not). 0 without ASan. Tests that compare RSS with a
// computed footprint accept up to this much on top, never less than the footprint.
inline constexpr double kAsanShadowShare =
#if defined(__SANITIZE_ADDRESS__)
    1.0 / 8;
#else
    0.0;
#endif

// AddressSanitizer keeps freed memory in its quarantine, resident, so under ASan the RSS peak
// of a stretch of work counts every allocation it freed, not the most it held at once. A test
// that compares an RSS peak with a footprint calls this first: under ASan with the quarantine
// on, it runs the same test again in a child with the quarantine off (everything else as
// configured), expects the child to pass, and returns true, so the caller returns at once.
inline bool measured_in_a_child_without_asan_quarantine() {
#if defined(__SANITIZE_ADDRESS__)
  const char* env = std::getenv("ASAN_OPTIONS");
  const std::string options = env == nullptr ? "" : env;
  if (options.find("quarantine_size_mb=0") != std::string::npos) return false;
  const ::testing::TestInfo* t = ::testing::UnitTest::GetInstance()->current_test_info();
  const std::string cmd = "ASAN_OPTIONS='" + options + ":quarantine_size_mb=0' " +
                          std::filesystem::read_symlink("/proc/self/exe").string() +
                          " --gtest_filter=" + t->test_suite_name() + "." + t->name() + " 2>&1";
  std::fflush(stdout);
  const int status = std::system(cmd.c_str());
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
      << "the child without ASan's quarantine failed: " << cmd;
  return true;
#else
  return false;
#endif
}

// Whether the tests run under qemu-user (make arm64-test sets MOLT_UNDER_EMULATION): there
// the process is the emulator, whose memory and address-space limits are not a device's.
inline bool under_emulation() {
  return std::getenv("MOLT_UNDER_EMULATION") != nullptr;
}
inline constexpr const char* kEmulatedAddressLimit =
    "under qemu-user RLIMIT_AS constrains the emulator's mappings, not the guest's as on a "
    "device (seen: the rung loaded within the headroom)";

// MiB that qemu-user adds to a process's RSS when it runs code it has not run before (the
// translated code lives in the process): RSS tests accept this much more under emulation
// (measured: +2.5 to +3.7 MiB over a first prefill).
inline double emulator_rss_mib() {
  return under_emulation() ? 6.0 : 0.0;
}

// Restores the process's GEMM precision (kernels/linear.h) when a test that changes it ends.
struct GemmPrecisionGuard {
  GemmPrecision saved = gemm_precision();
  GemmPrecisionGuard() = default;
  GemmPrecisionGuard(const GemmPrecisionGuard&) = delete;
  GemmPrecisionGuard& operator=(const GemmPrecisionGuard&) = delete;
  ~GemmPrecisionGuard() { set_gemm_precision(saved); }
};

// The reference data folder (../shared/data/qwen2.5); empty when absent.
inline std::filesystem::path shared_qwen_dir() {
  std::filesystem::path d = std::filesystem::path(MOLT_SHARED_DIR) / "data" / "qwen2.5";
  return std::filesystem::exists(d) ? d : std::filesystem::path{};
}

#define MOLT_REQUIRE_SHARED(dir)                                      \
  const std::filesystem::path dir = ::molt::test::shared_qwen_dir();  \
  if (dir.empty())                                                    \
  GTEST_SKIP() << "../shared/data/qwen2.5 is absent: reference data " \
                  "tests skipped"

}  // namespace molt::test
