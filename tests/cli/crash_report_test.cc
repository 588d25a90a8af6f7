// A crash of the real binary says where it happened: `molt serve` sent SIGSEGV (what a wild
// pointer would raise) prints the signal and a stack on stderr, then dies of that same signal
// (so a supervisor or CI sees status 139, as without the report).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "test_util.h"

namespace molt {
namespace {

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kSanitized = true;  // the sanitizer's own handler reports; molt installs none
#else
constexpr bool kSanitized = false;
#endif

TEST(CrashReport, AFatalSignalPrintsTheStackAndKeepsTheSignalAsStatus) {
  if (kSanitized) GTEST_SKIP() << "under a sanitizer molt leaves fatal signals to its handler";
  const std::string ladder =
      (std::filesystem::path(MOLT_SOURCE_DIR) / "models/tiny-ladder/ladder.json").string();
  std::vector<std::string> all = {MOLT_BINARY, "serve", "--ladder", ladder, "--port", "0"};
  std::vector<char*> argv;
  argv.reserve(all.size() + 1);
  for (std::string& a : all) argv.push_back(a.data());
  argv.push_back(nullptr);
  int fds[2];
  ASSERT_EQ(::pipe2(fds, O_CLOEXEC), 0);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {  // only async-signal-safe calls until exec
    ::dup2(fds[1], STDOUT_FILENO);
    ::dup2(fds[1], STDERR_FILENO);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  ::close(fds[1]);
  std::string out;
  char buf[4096];
  ssize_t n;
  bool signalled = false;
  while ((n = ::read(fds[0], buf, sizeof buf)) > 0) {
    out.append(buf, static_cast<size_t>(n));
    if (!signalled && out.find("listening on http://") != std::string::npos) {
      ::kill(pid, SIGSEGV);
      signalled = true;
    }
  }
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  ASSERT_TRUE(signalled) << out;
  ASSERT_TRUE(WIFSIGNALED(status)) << "status " << status << "\n" << out;
  EXPECT_EQ(WTERMSIG(status), SIGSEGV);
  EXPECT_NE(out.find("molt: fatal signal SIGSEGV (invalid memory access) sent by process " +
                     std::to_string(::getpid())),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("molt: stack"), std::string::npos) << out;
  // The stack names molt's own frames (the binary exports its symbols).
  EXPECT_NE(out.find("main"), std::string::npos) << out;
}

}  // namespace
}  // namespace molt
