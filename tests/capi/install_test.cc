// The installed package: `cmake --install` this build into a temporary prefix, build
// examples/c/chat.c against it with pkg-config (shared and static) and with find_package(molt),
// and run each on the tiny ladder under spike_mid_answer: a contiguous stream with migrations.
// Also: libmolt.so exports the C API and nothing else.
#include <gtest/gtest.h>

#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "test_util.h"

namespace molt {
namespace {

namespace fs = std::filesystem;

test::CommandResult sh(const std::string& cmd) {
  test::CommandResult r;
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  if (p == nullptr) return r;
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) r.output.append(buf, n);
  const int status = pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

std::string q(const fs::path& p) {
  return "'" + p.string() + "'";
}

// Runs chat --events and checks the stream: tokens 0..n−1 in order, a migration, done.
void expect_stream(const fs::path& chat) {
  const fs::path src = MOLT_SOURCE_DIR;
  const auto r =
      sh(q(chat) + " --ladder " + q(src / "models/tiny-ladder/ladder.json") +
         " --prompt 'initrd provides the capability to load a RAM disk' --raw" + " --trace " +
         q(src / "traces/spike_mid_answer.json") + " --max-tokens 48 --ignore-eos --events");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::istringstream in(r.output);
  int64_t next = 0, migrations = 0, done_tokens = -1;
  for (std::string line; std::getline(in, line);) {
    std::istringstream w(line);
    std::string kind;
    w >> kind;
    if (kind == "token") {
      int64_t index = -1;
      w >> index;
      EXPECT_EQ(index, next++) << line;
    } else if (kind == "migration") {
      ++migrations;
    } else if (kind == "done") {
      w >> done_tokens;
    }
  }
  EXPECT_EQ(next, 48) << r.output;
  EXPECT_EQ(done_tokens, 48) << r.output;
  EXPECT_GE(migrations, 1) << r.output;
}

fs::path find_file(const fs::path& root, const std::string& name) {
  for (const auto& e : fs::recursive_directory_iterator(root)) {
    if (e.path().filename() == name) return e.path();
  }
  return {};
}

TEST(CapiInstall, ChatBuildsAgainstTheInstalledPackage) {
  if (MOLT_SANITIZED) GTEST_SKIP() << "a sanitized libmolt.so needs a sanitized app";
  test::TempDir dir;
  const fs::path prefix = dir / "prefix", src = MOLT_SOURCE_DIR;
  const std::string cmake = MOLT_CMAKE, cc = MOLT_C_COMPILER;
  auto r = sh(q(cmake) + " --install " + q(MOLT_BUILD_DIR) + " --prefix " + q(prefix));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  ASSERT_TRUE(fs::exists(prefix / "include/molt/molt.h"));
  const fs::path pc = find_file(prefix, "molt.pc"), so = find_file(prefix, "libmolt.so");
  ASSERT_FALSE(pc.empty()) << "no molt.pc under " << prefix;
  ASSERT_FALSE(so.empty()) << "no libmolt.so under " << prefix;
  ASSERT_TRUE(fs::exists(so.parent_path() / "libmolt.a"));
  ASSERT_FALSE(find_file(prefix, "molt-config.cmake").empty());

  // Only the C API is visible.
  r = sh(q(MOLT_NM) + " -D --defined-only " + q(so) + " | awk '{print $3}'");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::istringstream syms(r.output);
  int exported = 0;
  for (std::string s; std::getline(syms, s);) {
    if (s.empty() || s.rfind("MOLT_", 0) == 0) continue;  // the version node
    EXPECT_EQ(s.rfind("molt_", 0), 0u) << "libmolt.so exports " << s;
    ++exported;
  }
  EXPECT_GT(exported, 10);

  // pkg-config, shared: the rpath comes from the package's own libdir.
  // A cross build's dependencies are the target's .pc files (the toolchain file's LIBDIR).
  const std::string libdir = MOLT_PKG_CONFIG_LIBDIR;
  const std::string pkg = "PKG_CONFIG_PATH=" + q(pc.parent_path()) +
                          (libdir.empty() ? "" : " PKG_CONFIG_LIBDIR=" + q(libdir)) +
                          " pkg-config ";
  r = sh(q(cc) + " -std=c99 -Wall -Werror " + q(src / "examples/c/chat.c") + " -o " +
         q(dir / "chat-pc") + " $(" + pkg + "--cflags --libs molt) -Wl,-rpath,$(" + pkg +
         "--variable=libdir molt)");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  expect_stream(dir / "chat-pc");

  // pkg-config, static: libmolt.a and what it needs (Libs.private, Requires.private).
  r = sh(q(cc) + " -std=c99 " + q(src / "examples/c/chat.c") + " -o " + q(dir / "chat-static") +
         " $(" + pkg + "--cflags molt) $(" + pkg +
         "--static --libs molt | sed 's/-lmolt\\b/-l:libmolt.a/')");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = sh("ldd " + q(dir / "chat-static"));
  EXPECT_EQ(r.output.find("libmolt.so"), std::string::npos) << r.output;
  expect_stream(dir / "chat-static");

  // find_package(molt) → molt::molt (a cross build configures with its toolchain file).
  const std::string toolchain_file = MOLT_TOOLCHAIN_FILE;
  const std::string toolchain =
      toolchain_file.empty() ? "" : " -DCMAKE_TOOLCHAIN_FILE=" + q(toolchain_file);
  r = sh(q(cmake) + " -S " + q(src / "examples/c") + " -B " + q(dir / "build") +
         " -DCMAKE_PREFIX_PATH=" + q(prefix) + " -DCMAKE_C_COMPILER=" + q(cc) +
         " -DCMAKE_BUILD_TYPE=Release" + toolchain);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = sh(q(cmake) + " --build " + q(dir / "build"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  expect_stream(dir / "build/chat");
}

}  // namespace
}  // namespace molt
