// Inputs the pressure-trace fuzzer found (tests/fuzz/regressions/pressure_trace/): each is
// refused with a molt::Error naming the file, and nothing else escapes.
#include "fuzz_regressions.h"

#include <gtest/gtest.h>

#include "molt/pressure/trace.h"

namespace molt {
namespace {

TEST(FuzzRegressions, PressureTraces) {
  test::TempDir tmp;
  const auto file = tmp / "trace.json";
  test::expect_all_refused(
      "pressure_trace",
      [&](const std::string& bytes) {
        test::write_file(file, bytes);
        PressureTrace::load(file);
      },
      file.string());
}

}  // namespace
}  // namespace molt
