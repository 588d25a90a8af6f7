// Inputs the SessionOptions fuzzer found (tests/fuzz/regressions/options/): each is refused
// with a molt::Error naming the field, and nothing else escapes.
#include "fuzz_regressions.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "molt/runtime/options.h"

namespace molt {
namespace {

TEST(FuzzRegressions, SessionOptionsJson) {
  test::expect_all_refused(
      "options",
      [&](const std::string& bytes) {
        const nlohmann::json j = nlohmann::json::parse(bytes);  // the harness skips bad JSON
        options_from_json(j, {}, "options.json");
      },
      "options.json");
}

}  // namespace
}  // namespace molt
