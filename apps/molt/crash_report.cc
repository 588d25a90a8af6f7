#include "crash_report.h"

#include <execinfo.h>
#include <unistd.h>

#include <csignal>
#include <cstdint>
#include <cstring>
#include <initializer_list>

namespace molt::cli {
namespace {

// The handler may run on a smashed stack (a runaway recursion): it runs on its own.
alignas(16) char g_alt_stack[64 * 1024];

// Only async-signal-safe calls from here on: write(2), backtrace_symbols_fd, no allocation.
void say(const char* s) {
  size_t n = std::strlen(s);
  while (n > 0) {
    const ssize_t w = write(STDERR_FILENO, s, n);
    if (w <= 0) return;
    s += w;
    n -= static_cast<size_t>(w);
  }
}

void say_hex(uintptr_t x) {
  char buf[2 + 2 * sizeof x + 1];
  char* p = buf + sizeof buf;
  *--p = '\0';
  do {
    *--p = "0123456789abcdef"[x & 0xf];
    x >>= 4;
  } while (x != 0);
  *--p = 'x';
  *--p = '0';
  say(p);
}

void say_dec(long x) {
  char buf[24];
  char* p = buf + sizeof buf;
  *--p = '\0';
  const bool negative = x < 0;
  unsigned long u = negative ? 0ul - static_cast<unsigned long>(x) : static_cast<unsigned long>(x);
  do {
    *--p = static_cast<char>('0' + u % 10);
    u /= 10;
  } while (u != 0);
  if (negative) *--p = '-';
  say(p);
}

const char* signal_name(int sig) {
  switch (sig) {
    case SIGSEGV:
      return "SIGSEGV (invalid memory access)";
    case SIGBUS:
      return "SIGBUS (bus error)";
    case SIGFPE:
      return "SIGFPE (arithmetic fault)";
    case SIGILL:
      return "SIGILL (illegal instruction: a SIMD target this CPU lacks?)";
    case SIGABRT:
      return "SIGABRT (abort)";
    default:
      return "unknown";
  }
}

void on_fatal_signal(int sig, siginfo_t* info, void* /*context*/) {
  say("\nmolt: fatal signal ");
  say(signal_name(sig));
  if (info != nullptr && info->si_code <= 0) {  // kill(2), tgkill, sigqueue: not a fault
    say(" sent by process ");
    say_dec(info->si_pid);
  } else if (info != nullptr && sig != SIGABRT) {
    say(" at address ");
    say_hex(reinterpret_cast<uintptr_t>(info->si_addr));
  }
  say("\nmolt: stack (addr2line -Cfe <molt binary> <offset> names a frame without a symbol):\n");
  void* frames[64];
  const int n = backtrace(frames, 64);
  backtrace_symbols_fd(frames, n, STDERR_FILENO);
  // Die of the same signal: the default action (and core dump) the process would have had.
  signal(sig, SIG_DFL);
  raise(sig);
}

bool under_sanitizer() {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  return true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
  return true;
#else
  return false;
#endif
#else
  return false;
#endif
}

}  // namespace

void install_crash_report() {
  if (under_sanitizer()) return;
  // backtrace() loads libgcc on its first call, which allocates: do it now, not in a handler.
  void* warm[1];
  backtrace(warm, 1);
  stack_t ss{};
  ss.ss_sp = g_alt_stack;
  ss.ss_size = sizeof g_alt_stack;
  sigaltstack(&ss, nullptr);
  struct sigaction sa {};
  sa.sa_sigaction = on_fatal_signal;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_RESETHAND;
  sigemptyset(&sa.sa_mask);
  for (const int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT}) sigaction(sig, &sa, nullptr);
}

}  // namespace molt::cli
