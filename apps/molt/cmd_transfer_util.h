// Shared by `molt fit`, `molt transfer eval` and `molt bench transfer`.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "molt/runtime/route_setup.h"
#include "molt/tokenizer/tokenizer.h"
#include "molt/transfer/conditions.h"
#include "molt/transfer/corpus.h"

namespace molt::cli {

// The folder name of a checkpoint ("l" for models/tiny-ladder/l).
std::string rung_name(const std::filesystem::path& dir);

// "[fit] 12/500 ████░░░░ 3.1 s each, 25 min left" on stderr when it is a terminal.
class ProgressBar {
 public:
  ProgressBar(std::string label, int64_t total);
  void update(int64_t done);
  void finish();

 private:
  std::string label_;
  int64_t total_;
  bool enabled_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace molt::cli
