// molt quantize, --precision at load, bench decode's bound and bench sgemm, end to end.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "test_util.h"

namespace molt {
namespace {

namespace fs = std::filesystem;

std::string tiny_s() {
  return (fs::path(MOLT_SOURCE_DIR) / "models/tiny-ladder/s").string();
}

TEST(CliQuantize, WritesAnMlxCheckpointThatGenerates) {
  if (!fs::exists(fs::path(tiny_s()) / "model.safetensors")) GTEST_SKIP();
  test::TempDir dir;
  const std::string out = (dir / "q4").string();
  auto r = test::run_molt("quantize --model " + tiny_s() + " --out " + out +
                          " --bits 4 --group-size 64");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("affine 4-bit, group 64"), std::string::npos) << r.output;
  const auto cfg = nlohmann::json::parse(test::read_file(dir / "q4" / "config.json"));
  EXPECT_EQ(cfg["quantization"], nlohmann::json({{"group_size", 64}, {"bits", 4}}));
  EXPECT_EQ(cfg["quantization_config"], cfg["quantization"]);
  r = test::run_molt("generate --model " + out + " --ids \"1 2 3\" --max-tokens 4");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  r = test::run_molt("quantize --model " + tiny_s() + " --out " + (dir / "i8").string() +
                     " --int8 --group-size 0");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = test::run_molt("generate --model " + (dir / "i8").string() +
                     " --ids \"1 2 3\" --max-tokens 4");
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

TEST(CliQuantize, InterleavedCheckpointGeneratesAsTheMlxOne) {
  if (!fs::exists(fs::path(tiny_s()) / "model.safetensors")) GTEST_SKIP();
  test::TempDir dir;
  auto r = test::run_molt("quantize --model " + tiny_s() + " --out " + (dir / "r8").string() +
                          " --bits 4 --interleave");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("rows interleaved by 8"), std::string::npos) << r.output;
  const auto cfg = nlohmann::json::parse(test::read_file(dir / "r8" / "config.json"));
  EXPECT_EQ(cfg["quantization"]["layout"], "rows8");
  r = test::run_molt("quantize --model " + tiny_s() + " --out " + (dir / "q4").string() +
                     " --bits 4");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // Greedy: the same tokens from the file's interleaved rows and from interleaving at load.
  auto a = test::run_molt("generate --model " + (dir / "r8").string() +
                          " --ids \"314 3728 3859 82 261\" --max-tokens 8");
  auto b = test::run_molt("generate --model " + (dir / "q4").string() +
                          " --ids \"314 3728 3859 82 261\" --max-tokens 8 --layout memory");
  ASSERT_EQ(a.exit_code, 0) << a.output;
  ASSERT_EQ(b.exit_code, 0) << b.output;
  EXPECT_EQ(a.output.substr(0, a.output.find('\n')), b.output.substr(0, b.output.find('\n')));
  r = test::run_molt("quantize --model " + tiny_s() + " --out " + (dir / "x").string() +
                     " --int8 --interleave");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("--interleave is for MLX affine weights"), std::string::npos) << r.output;
}

TEST(CliQuantize, MlxCheckpointsAreInterleavedWithoutRequantising) {
  if (!fs::exists(fs::path(tiny_s()) / "model.safetensors")) GTEST_SKIP();
  test::TempDir dir;
  const std::string q4 = (dir / "q4").string(), re = (dir / "re").string(),
                    r8 = (dir / "r8").string();
  ASSERT_EQ(test::run_molt("quantize --model " + tiny_s() + " --out " + q4 + " --bits 4").exit_code,
            0);
  auto r = test::run_molt("quantize --model " + q4 + " --out " + re + " --interleave");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("rows interleaved by 8"), std::string::npos) << r.output;
  // The same file as interleaving while quantising from the dense checkpoint, byte for byte.
  ASSERT_EQ(test::run_molt("quantize --model " + tiny_s() + " --out " + r8 + " --bits 4 " +
                           "--interleave")
                .exit_code,
            0);
  EXPECT_EQ(test::read_file(dir / "re" / "model.safetensors"),
            test::read_file(dir / "r8" / "model.safetensors"));
  EXPECT_EQ(nlohmann::json::parse(test::read_file(dir / "re" / "config.json")),
            nlohmann::json::parse(test::read_file(dir / "r8" / "config.json")));
  EXPECT_TRUE(fs::exists(dir / "re" / "tokenizer.json"));
  // What re-laying out cannot do is refused, naming the reason.
  auto expect_error = [&](const std::string& args, const std::string& needle) {
    auto e = test::run_molt("quantize " + args + " --out " + (dir / "x").string());
    EXPECT_EQ(e.exit_code, 1) << args;
    EXPECT_NE(e.output.find(needle), std::string::npos) << e.output;
  };
  expect_error("--model " + q4 + " --interleave --bits 8", "--bits does not apply");
  expect_error("--model " + q4 + " --interleave --group-size 32", "--group-size does not apply");
  expect_error("--model " + re + " --interleave", "already interleaved");
  expect_error("--model " + q4, "already quantised");
  ASSERT_EQ(
      test::run_molt("quantize --model " + tiny_s() + " --out " + (dir / "i8").string() + " --int8")
          .exit_code,
      0);
  expect_error("--model " + (dir / "i8").string() + " --interleave", "int8-quantised");
}

TEST(CliQuantize, BadArgumentsAreNamed) {
  test::TempDir dir;
  auto r = test::run_molt("quantize --model " + tiny_s() + " --out " + (dir / "x").string() +
                          " --bits 3");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("--bits 3 is not 4 or 8"), std::string::npos) << r.output;
  r = test::run_molt("quantize --model " + tiny_s() + " --out " + (dir / "x").string() +
                     " --group-size 48");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("--group-size 48"), std::string::npos) << r.output;
  r = test::run_molt("generate --model " + tiny_s() + " --ids \"1\" --precision int4");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("precision 'int4'"), std::string::npos) << r.output;
}

TEST(CliQuantize, BenchDecodeReportsTheBoundAtEveryPrecision) {
  if (!fs::exists(fs::path(tiny_s()) / "model.safetensors")) GTEST_SKIP();
  for (const char* p : {"native", "int8", "q8", "q4"}) {
    auto r = test::run_molt("bench decode --model " + tiny_s() +
                            " --threads 1 --prompt-tokens 8 "
                            "--tokens 2 --json --bandwidth --precision " +
                            std::string(p));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const auto j = nlohmann::json::parse(r.output);
    EXPECT_EQ(j.at("precision"), p);
    EXPECT_GT(j.at("triad_gb_s").get<double>(), 0.0);
    EXPECT_GT(j.at("x_bound").get<double>(), 0.0);
    EXPECT_GT(j.at("prefill_gflop_s").get<double>(), 0.0);
    // Two tokens: two rounds (of the default five), each paired with the triad pass after its
    // step; the reported x bound is their median.
    const auto& rounds = j.at("rounds");
    ASSERT_EQ(rounds.size(), 2u);
    const double mid =
        0.5 * (rounds[0].at("x_bound").get<double>() + rounds[1].at("x_bound").get<double>());
    EXPECT_NEAR(j.at("x_bound").get<double>(), mid, 1e-9 * mid);
    // The fastest single pass is at least every round's rate over its passes, and the decode
    // is also compared with it.
    const double best = j.at("triad_best_gb_s").get<double>();
    for (const auto& round : rounds) EXPECT_GE(best, round.at("triad_gb_s").get<double>());
    EXPECT_NEAR(j.at("x_bound_best_triad").get<double>(), j.at("decode_gb_s").get<double>() / best,
                1e-9 * best);
  }
  auto bad =
      test::run_molt("bench decode --model " + tiny_s() + " --tokens 2 --rounds 0 --bandwidth");
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.output.find("--rounds"), std::string::npos) << bad.output;
}

TEST(CliQuantize, BenchSgemmReportsAPeak) {
  auto r = test::run_molt("bench sgemm --tokens 8 --repeats 1 --threads 1 --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto j = nlohmann::json::parse(r.output);
  EXPECT_GT(j.at("peak_gflop_s").get<double>(), 0.0);
  EXPECT_EQ(j.at("runs").size(), 6u);
}

}  // namespace
}  // namespace molt
