#include "cmd_transfer_util.h"

#include <fmt/core.h>

#include <cstdio>

#include "command.h"
#include "molt/common/error.h"
#include "molt/ladder/ladder.h"

namespace molt::cli {

std::string rung_name(const std::filesystem::path& dir) {
  std::filesystem::path p = std::filesystem::absolute(dir).lexically_normal();
  if (p.filename().empty()) p = p.parent_path();
  return p.filename().string();
}

ProgressBar::ProgressBar(std::string label, int64_t total)
    : label_(std::move(label)),
      total_(total),
      enabled_(stderr_is_tty()),
      start_(std::chrono::steady_clock::now()) {}

void ProgressBar::update(int64_t done) {
  if (!enabled_ || total_ <= 0) return;
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const int width = 30, filled = static_cast<int>(width * done / total_);
  std::string bar;
  for (int i = 0; i < width; ++i) bar += i < filled ? "█" : "░";
  const double each = done > 0 ? s / static_cast<double>(done) : 0;
  const double left = each * static_cast<double>(total_ - done);
  fmt::print(stderr, "\r[{}] {}/{} {} {:.2f} s each, {:.0f} s left   ", label_, done, total_, bar,
             each, left);
  std::fflush(stderr);
}

void ProgressBar::finish() {
  if (enabled_ && total_ > 0) fmt::print(stderr, "\n");
}

}  // namespace molt::cli
