// MOLT_GEMM from the command line's side: a bad value is refused with the variable named, bf16
// is refused where the CPU lacks it, and a generation runs end to end on the bf16 path where the
// CPU has it.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "kernels/gemm_bf16.h"
#include "test_util.h"

namespace molt {
namespace {

// Sets MOLT_GEMM for the molt processes a test starts; restores f32 (tests' default) after.
struct GemmEnvironment {
  explicit GemmEnvironment(const char* value) { setenv("MOLT_GEMM", value, 1); }
  ~GemmEnvironment() { setenv("MOLT_GEMM", "f32", 1); }
};

const std::string kGenerate = std::string("generate --model '") + MOLT_SOURCE_DIR +
                              "/models/tiny-ladder/s' --prompt 'The kernel' --max-tokens 4";

TEST(GemmCli, ABadValueIsRefusedNamingTheVariable) {
  GemmEnvironment env("fp16");
  const auto r = test::run_molt(kGenerate);
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("MOLT_GEMM: 'fp16' is not a GEMM precision (auto, f32 or bf16)"),
            std::string::npos)
      << r.output;
  const auto flag = test::run_molt("bench decode --model /nonexistent --gemm fp16");
  EXPECT_NE(flag.exit_code, 0);
  EXPECT_NE(flag.output.find("--gemm"), std::string::npos) << flag.output;
}

TEST(GemmCli, Bf16GeneratesWhereTheCpuHasItAndIsRefusedElsewhere) {
  GemmEnvironment env("bf16");
  const auto r = test::run_molt(kGenerate);
  if (bf16_gemm_supported()) {
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("4 tokens generated"), std::string::npos) << r.output;
  } else {
    EXPECT_NE(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("bf16 GEMM needs a CPU with bf16 dot products"), std::string::npos)
        << r.output;
  }
}

}  // namespace
}  // namespace molt
