// The hog. After fork() only async-signal-safe calls run in the child (mmap, write, nanosleep,
// _exit): the parent may have OpenMP and BLAS threads whose locks the child must not touch.
#include "molt/pressure/hog.h"

#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

#include "molt/common/error.h"

namespace molt {
namespace {

// Maps and writes every page; nullptr when mmap fails.
void* take(size_t bytes) {
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return nullptr;
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  auto* c = static_cast<volatile char*>(p);
  for (size_t i = 0; i < bytes; i += page) c[i] = 1;
  return p;
}

void sleep_ms(double ms) {
  timespec ts{static_cast<time_t>(ms / 1000),
              static_cast<long>(static_cast<int64_t>(ms * 1e6) % 1000000000)};
  while (::nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

}  // namespace

std::unique_ptr<Hog> Hog::start(size_t mib, double hold_ms) {
  int fds[2];
  if (::pipe(fds) != 0) fail("hog: pipe failed: {}", std::strerror(errno));
  const size_t bytes = mib << 20;
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(fds[0]);
    ::close(fds[1]);
    fail("hog: fork failed: {}", std::strerror(errno));
  }
  if (pid == 0) {
    ::close(fds[0]);
    const char ok = take(bytes) != nullptr ? 'y' : 'n';
    (void)!::write(fds[1], &ok, 1);
    ::close(fds[1]);
    if (ok != 'y') ::_exit(1);
    if (hold_ms < 0) {
      for (;;) ::pause();
    }
    sleep_ms(hold_ms);
    ::_exit(0);
  }
  ::close(fds[1]);
  char ok = 0;
  ssize_t n;
  while ((n = ::read(fds[0], &ok, 1)) < 0 && errno == EINTR) {
  }
  ::close(fds[0]);
  std::unique_ptr<Hog> h(new Hog(pid));
  if (n != 1 || ok != 'y') {
    h->stop();
    fail("hog: the child could not map {} MiB", mib);
  }
  return h;
}

Hog::~Hog() {
  stop();
}

bool Hog::running() {
  if (pid_ <= 0) return false;
  int status = 0;
  if (::waitpid(pid_, &status, WNOHANG) == pid_) {
    pid_ = -1;
    return false;
  }
  return true;
}

size_t Hog::rss_bytes() const {
  if (pid_ <= 0) return 0;
  std::ifstream f("/proc/" + std::to_string(pid_) + "/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoull(line.substr(6)) * 1024;
  }
  return 0;
}

void Hog::stop() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGKILL);
  int status = 0;
  while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
  pid_ = -1;
}

void hog_foreground(size_t mib, double hold_ms, void (*on_ready)(size_t)) {
  const size_t bytes = mib << 20;
  void* p = take(bytes);
  if (p == nullptr) fail("hog: cannot map {} MiB: {}", mib, std::strerror(errno));
  if (on_ready) on_ready(bytes);
  sleep_ms(hold_ms);
  ::munmap(p, bytes);
}

}  // namespace molt
