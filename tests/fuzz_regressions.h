// Replays the inputs the fuzzers found (tests/fuzz/regressions/<harness>/, see tests/fuzz) in
// the GoogleTest suites: each must be refused with a molt::Error that names its file, and
// nothing else may escape (gtest fails a test on any other exception; ASan builds catch the
// memory errors).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "molt/common/error.h"
#include "test_util.h"

namespace molt::test {

inline std::vector<std::filesystem::path> fuzz_regressions(const std::string& harness) {
  const std::filesystem::path dir =
      std::filesystem::path(MOLT_SOURCE_DIR) / "tests" / "fuzz" / "regressions" / harness;
  std::vector<std::filesystem::path> out;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    if (e.is_regular_file()) out.push_back(e.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

// `parse` gets each input's bytes and reads them the way the harness does; every input must
// throw molt::Error whose message holds `needle` (the file's name, normally).
inline void expect_all_refused(const std::string& harness,
                               const std::function<void(const std::string& bytes)>& parse,
                               const std::string& needle) {
  const auto inputs = fuzz_regressions(harness);
  ASSERT_FALSE(inputs.empty()) << "no inputs under tests/fuzz/regressions/" << harness;
  for (const auto& input : inputs) {
    SCOPED_TRACE(input.filename().string());
    std::string what;
    bool refused = false;
    try {
      parse(read_file(input));
    } catch (const Error& e) {
      refused = true;
      what = e.what();
    }
    EXPECT_TRUE(refused) << "accepted";
    if (refused) {
      EXPECT_NE(what.find(needle), std::string::npos) << what;
    }
  }
}

}  // namespace molt::test
