#include "molt/kernels/team.h"

#include <omp.h>

#include <atomic>
#include <cstdint>
#include <exception>
#include <thread>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace molt {

namespace {

void relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// Spins until done(), then yields the core between tries: a waiting thread answers within
// ~0.1 us, and one that waits long (more threads than cores, a loaded machine) stops taking the
// core from the thread it waits on.
template <class Done>
void wait_until(Done done) {
  constexpr int kSpins = 1 << 14;
  for (int i = 0; !done();) {
    if (i < kSpins) {
      ++i;
      relax();
    } else {
      std::this_thread::yield();
    }
  }
}

// The state the step's thread shares with the others. A part is published by bumping `part`
// (release: fn, ctx and everything the step wrote before are visible to a thread that sees the
// new count); each other thread runs it and adds one to `done` (release: what it wrote is visible
// to the step's thread once it sees the count).
struct Team {
  std::atomic<uint64_t> part{0};
  std::atomic<int> done{0};
  std::atomic<bool> over{false};
  void (*fn)(void*) = nullptr;
  void* ctx = nullptr;
  int others = 0;

  void run(void (*f)(void*), void* c) {
    fn = f;
    ctx = c;
    done.store(0, std::memory_order_relaxed);
    part.fetch_add(1, std::memory_order_release);
    f(c);
    wait_until([&] { return done.load(std::memory_order_acquire) == others; });
  }

  // The loop of every thread but the step's, until the step is over.
  void serve() {
    uint64_t seen = 0;
    for (;;) {
      uint64_t now = 0;
      wait_until([&] {
        now = part.load(std::memory_order_acquire);
        return now != seen || over.load(std::memory_order_acquire);
      });
      if (now == seen) return;  // over, and no part left to run
      seen = now;
      fn(ctx);
      done.fetch_add(1, std::memory_order_release);
    }
  }
};

thread_local Team* running = nullptr;  // the team of the step this thread runs, if any

}  // namespace

void team_step(void (*step)(void*), void* ctx) {
  if (running != nullptr || omp_in_parallel() || omp_get_max_threads() < 2) {
    step(ctx);
    return;
  }
  Team team;
  std::exception_ptr error;
#pragma omp parallel
  {
    if (omp_get_thread_num() == 0) {
      team.others = omp_get_num_threads() - 1;
      running = &team;
      try {
        step(ctx);
      } catch (...) {
        error = std::current_exception();
      }
      running = nullptr;
      team.over.store(true, std::memory_order_release);
    } else {
      team.serve();
    }
  }
  if (error) std::rethrow_exception(error);
}

void team_parallel(void (*fn)(void*), void* ctx) {
  if (running != nullptr) {
    running->run(fn, ctx);
    return;
  }
#pragma omp parallel
  fn(ctx);
}

bool in_team() {
  return running != nullptr;
}

}  // namespace molt
