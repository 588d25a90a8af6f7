// Out-of-memory tests: a forked child whose address space is capped (RLIMIT_AS) after start-up.
// Set before exec, the limit would stop OpenBLAS's constructor, which retries a ~135 MB mmap
// forever before main(). Only the forking thread lives in the child: it must not start BLAS or
// OpenMP threads (it runs OpenMP regions with one thread).
#pragma once

#include <malloc.h>
#include <omp.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <functional>
#include <string>
#include <typeinfo>

namespace molt::test {

// The address space this process holds now (/proc/self/statm, first field).
inline size_t vm_bytes() {
  std::ifstream f("/proc/self/statm");
  size_t pages = 0;
  f >> pages;
  return pages * static_cast<size_t>(sysconf(_SC_PAGESIZE));
}

// The soft limit only, so that the child can raise it again.
inline bool set_as_limit(rlim_t bytes) {
  rlimit r{};
  if (getrlimit(RLIMIT_AS, &r) != 0) return false;
  r.rlim_cur = bytes;
  return setrlimit(RLIMIT_AS, &r) == 0;
}

// Bytes malloc hands out now (in use, not what it keeps free for later).
inline size_t heap_in_use() {
  const struct mallinfo2 m = mallinfo2();
  return m.uordblks + m.hblkhd;
}

// Whether any mapping of this process is of a file whose path starts with `prefix`.
inline bool maps_file_under(const std::string& prefix) {
  std::ifstream f("/proc/self/maps");
  for (std::string line; std::getline(f, line);) {
    if (line.find(" " + prefix) != std::string::npos) return true;
  }
  return false;
}

struct ChildRun {
  int status = -1;
  std::string report;  // what the child saw, one line each
};

// Runs `body` in a forked child; it appends to its report and returns whether every check
// held, which becomes the exit code. A hang ends with SIGALRM, an escaped exception or a crash
// with a non-zero status; either way the report so far comes back.
inline ChildRun in_child(const std::function<bool(std::string&)>& body) {
  int fds[2];
  if (pipe(fds) != 0) return {};
  const pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    alarm(60);
    omp_set_num_threads(1);
    std::string report;
    bool ok = false;
    try {
      ok = body(report);
    } catch (const std::exception& e) {
      report += std::string("escaped: ") + typeid(e).name() + ": " + e.what() + "\n";
    } catch (...) {
      report += "escaped: a non-std exception\n";
    }
    for (size_t at = 0; at < report.size();) {
      const ssize_t n = write(fds[1], report.data() + at, report.size() - at);
      if (n <= 0) break;
      at += static_cast<size_t>(n);
    }
    _exit(ok ? 0 : 1);
  }
  close(fds[1]);
  ChildRun r;
  char buf[4096];
  ssize_t n;
  while ((n = read(fds[0], buf, sizeof buf)) > 0) r.report.append(buf, static_cast<size_t>(n));
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  r.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

// A check inside the child: notes a failure in the report.
inline bool check(bool ok, const std::string& what, std::string& report) {
  if (!ok) report += "FAILED: " + what + "\n";
  return ok;
}

inline bool sanitized() {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  return true;  // the sanitizers' shadow memory does not live within an address-space limit
#else
  return false;
#endif
}

}  // namespace molt::test
