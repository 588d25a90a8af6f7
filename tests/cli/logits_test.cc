// `molt logits` end to end: the written file against the golden reference logits of
// tests/fixtures/golden/ (see tests/model/golden_test.cc for the error measure).
#include <gtest/gtest.h>

#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "fixtures/golden_fixtures.h"
#include "test_util.h"

namespace molt {
namespace {

namespace fs = std::filesystem;

constexpr double kTol = 2e-4;  // the looser (16-bit file) bound of golden_test.cc

std::vector<float> read_f32(const fs::path& p) {
  const std::string bytes = test::read_file(p);
  std::vector<float> v(bytes.size() / sizeof(float));
  std::memcpy(v.data(), bytes.data(), v.size() * sizeof(float));
  return v;
}

class LogitsCli : public ::testing::TestWithParam<fs::path> {};

TEST_P(LogitsCli, PrefillAndDecodeFilesMatchReference) {
  const test::GoldenCase g = test::load_golden(GetParam());
  ASSERT_GT(g.vocab, 0);
  test::TempDir tmp;
  for (const char* mode : {"", " --decode"}) {
    const fs::path out = tmp / (std::string("logits") + (*mode ? "-decode" : "") + ".f32");
    const test::CommandResult r =
        test::run_molt("logits --model " + GetParam().string() + " --ids \"" + g.ids_text +
                       "\" --out " + out.string() + mode);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const std::vector<float> got = read_f32(out);
    ASSERT_EQ(got.size(), g.logits.size()) << "mode '" << mode << "': " << out;
    EXPECT_LE(test::max_rel_error(got, g.logits, g.vocab), kTol) << "mode '" << mode << "'";
  }
}

std::string fixture_name(const ::testing::TestParamInfo<fs::path>& info) {
  return info.param.filename().string();
}

INSTANTIATE_TEST_SUITE_P(Fixtures, LogitsCli, ::testing::ValuesIn(test::golden_dirs()),
                         fixture_name);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(LogitsCli);

TEST(LogitsCliErrors, BadInputsFailWithAMessage) {
  const auto dirs = test::golden_dirs();
  ASSERT_FALSE(dirs.empty());
  test::TempDir tmp;
  const std::string out = (tmp / "x.f32").string();

  test::CommandResult r =
      test::run_molt("logits --model " + (tmp / "absent").string() + " --ids \"1 2\" --out " + out);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("absent"), std::string::npos) << r.output;

  r = test::run_molt("logits --model " + dirs[0].string() + " --ids \"1 x 2\" --out " + out);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("--ids"), std::string::npos) << r.output;

  // An id past the vocabulary must be refused, not read out of bounds.
  r = test::run_molt("logits --model " + dirs[0].string() + " --ids \"1 99999\" --out " + out);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("99999"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace molt
