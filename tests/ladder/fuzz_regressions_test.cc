// Inputs the ladder.json fuzzer found (tests/fuzz/regressions/ladder_manifest/): each is
// refused with a molt::Error naming the file, and nothing else escapes (a path the file system
// cannot even look up, for one, is "does not exist", not a std::filesystem_error).
#include "fuzz_regressions.h"

#include <gtest/gtest.h>

#include "molt/ladder/manifest.h"

namespace molt {
namespace {

TEST(FuzzRegressions, LadderManifests) {
  test::TempDir tmp;
  for (const char* rung : {"l", "l-int8", "m", "s", "maps/l-s", "maps/m-s"}) {
    std::filesystem::create_directories(tmp / rung);
  }
  const auto file = tmp / "ladder.json";
  test::expect_all_refused(
      "ladder_manifest",
      [&](const std::string& bytes) {
        test::write_file(file, bytes);
        LadderManifest::load(file);
      },
      file.string());
}

}  // namespace
}  // namespace molt
