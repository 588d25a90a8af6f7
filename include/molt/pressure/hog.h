// A real allocating child process that takes memory away: it maps `mib` MiB of anonymous
// memory, writes every page (so the kernel must back it), holds it for `hold_ms` and exits.
// `molt pressure hog --mib N --hold-ms T` runs the same thing in the foreground.
#pragma once

#include <cstddef>
#include <memory>

namespace molt {

class Hog {
 public:
  // Forks the child and returns once all its pages are written (or throws molt::Error when
  // fork/mmap fail). hold_ms < 0 holds until stop().
  static std::unique_ptr<Hog> start(size_t mib, double hold_ms);
  ~Hog();
  Hog(const Hog&) = delete;
  Hog& operator=(const Hog&) = delete;

  int pid() const { return pid_; }
  bool running();
  // Its resident set now (bytes; 0 once it has exited).
  size_t rss_bytes() const;
  // Kills the child (if alive) and reaps it.
  void stop();

 private:
  explicit Hog(int pid) : pid_(pid) {}
  int pid_ = -1;
};

// In this process: allocate and touch `mib` MiB, call on_ready, hold for hold_ms, free.
void hog_foreground(size_t mib, double hold_ms, void (*on_ready)(size_t bytes) = nullptr);

}  // namespace molt
