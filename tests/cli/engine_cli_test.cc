// End-to-end tests of the engine's subcommands: synth, generate, bench decode.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "molt/formats/hf_config.h"
#include "molt/runtime/metrics.h"
#include "test_util.h"

namespace molt {
namespace {

const char* kSmall =
    "synth --geometry qwen2.5-0.5b --layers 2 --hidden 64 --heads 4 --kv-heads 2 "
    "--intermediate 96 --vocab 300 --seed 1 --dtype f32 --out ";

TEST(CliEngine, SynthThenGenerateIsDeterministic) {
  test::TempDir dir;
  auto r = test::run_molt(std::string(kSmall) + (dir / "m").string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* f : {"config.json", "generation_config.json", "model.safetensors"}) {
    EXPECT_TRUE(std::filesystem::exists(dir / "m" / f)) << f;
  }
  const std::string gen = "generate --model " + (dir / "m").string() +
                          " --ids \"1 2 3\" --max-tokens 8 --temperature 0.9 --seed 4 --ignore-eos";
  auto a = test::run_molt(gen), b = test::run_molt(gen);
  ASSERT_EQ(a.exit_code, 0) << a.output;
  const std::string first_line_a = a.output.substr(0, a.output.find('\n'));
  const std::string first_line_b = b.output.substr(0, b.output.find('\n'));
  EXPECT_EQ(first_line_a, first_line_b);
  // Eight ids were streamed.
  std::istringstream ids(first_line_a);
  int n = 0, id;
  while (ids >> id) {
    EXPECT_GE(id, 0);
    EXPECT_LT(id, 300);
    ++n;
  }
  EXPECT_EQ(n, 8) << a.output;
}

TEST(CliEngine, BenchDecodeJsonHasTheKeys) {
  test::TempDir dir;
  ASSERT_EQ(test::run_molt(std::string(kSmall) + (dir / "m").string()).exit_code, 0);
  auto r = test::run_molt("bench decode --model " + (dir / "m").string() +
                          " --threads 1 --prompt-tokens 8 --tokens 4 --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto j = nlohmann::json::parse(r.output);
  for (const char* k : {"prefill_tok_s", "decode_tok_s", "peak_rss_mib"}) {
    ASSERT_TRUE(j.contains(k)) << k;
    EXPECT_GT(j[k].get<double>(), 0) << k;
  }
  // The prefill GFLOP/s count the work a prefill does: the one count of runtime/metrics, with
  // the lm_head once (a doubled count or an lm_head per prompt token fails here).
  const ModelConfig c = load_model_config(dir / "m");
  const FlopCount f = prefill_flop_count(c, 8);
  EXPECT_EQ(j["prefill_flops"].get<double>(), f.total());
  EXPECT_EQ(j["prefill_flops_lm_head"].get<double>(), 2.0 * c.hidden_size * c.vocab_size);
  EXPECT_NEAR(j["prefill_gflop_s"].get<double>() / j["prefill_tok_s"].get<double>(),
              f.total() / 8 / 1e9, 1e-9 * f.total());
}

TEST(CliEngine, BadInputsGiveClearErrors) {
  test::TempDir dir;
  ASSERT_EQ(test::run_molt(std::string(kSmall) + (dir / "m").string()).exit_code, 0);
  const std::string m = (dir / "m").string();
  auto r = test::run_molt("generate --model " + m + " --ids \"1 x 3\"");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("--ids: 'x'"), std::string::npos) << r.output;

  r = test::run_molt("generate --model " + m + " --ids \"1 300\"");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("300"), std::string::npos) << r.output;

  r = test::run_molt("logits --model " + (dir / "absent").string() + " --ids 1 --out " +
                     (dir / "l.f32").string());
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("config.json"), std::string::npos) << r.output;

  r = test::run_molt("synth --geometry qwen2.5-9b --out " + (dir / "x").string());
  EXPECT_NE(r.exit_code, 0);

  // A truncated weights file names the file.
  std::filesystem::resize_file(dir / "m" / "model.safetensors", 100);
  r = test::run_molt("generate --model " + m + " --ids 1");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("model.safetensors"), std::string::npos) << r.output;
}

TEST(CliEngine, EveryCommandHasHelp) {
  for (const char* c : {"synth", "logits", "generate", "bench decode"}) {
    auto r = test::run_molt(std::string(c) + " --help");
    EXPECT_EQ(r.exit_code, 0) << c;
    EXPECT_NE(r.output.find("--"), std::string::npos) << c;
  }
}

}  // namespace
}  // namespace molt
