// molt transfer heal end to end on the tiny ladder's l → m route.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "test_util.h"

namespace molt {
namespace {

using molt::test::run_molt;
const std::string kLadder = std::string(MOLT_SOURCE_DIR) + "/models/tiny-ladder";
const std::string kRoute = "transfer heal --from " + kLadder + "/l --to " + kLadder + "/m --maps " +
                           kLadder + "/maps/l-m --needles " + kLadder + "/data/needles.jsonl ";

TEST(HealCli, AHealedCacheAnswersAsTheReceiverItself) {
  const auto r = run_molt(kRoute + "--filler " + kLadder +
                          "/data/test.txt --context 256 --count 4 --after 0,96 --chunk 64 "
                          "--cost-chunks 32,1024 --cost-needles 1 --threads 1 --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto j = nlohmann::json::parse(r.output);
  ASSERT_EQ(j["rows"].size(), 2u);
  EXPECT_EQ(j["layers"], 5);
  // The map runs m's layer 0 natively at the seam, so heal re-runs the other 4.
  EXPECT_EQ(j["native_layers"], 1);
  const auto& at0 = j["rows"][0];
  const auto& at96 = j["rows"][1];
  EXPECT_EQ(at0["h"], 0);
  // ~230 carried positions: 4 layers × 4 chunks of 64 = 16 decode steps, more than most
  // questions alone (measured: 1 of the 4 is longer), fewer than 96 + the question.
  EXPECT_LT(at0["healed_before_answer"], 4);
  EXPECT_EQ(at96["healed_before_answer"], 4);
  EXPECT_EQ(at96["heal"]["same_answer_as_native"], 4) << r.output;
  EXPECT_EQ(at96["heal"]["correct"], at96["native"]["correct"]);
  EXPECT_GT(at96["mean_prompt_tokens"].get<double>(), at0["mean_prompt_tokens"].get<double>() + 95);
  ASSERT_EQ(j["cost"].size(), 2u);
  const double steps32 = j["cost"][0]["steps_to_native"];
  EXPECT_EQ(static_cast<int64_t>(steps32) % 4, 0);
  EXPECT_GE(steps32, 4 * 6);                      // ≥ 161 positions in chunks of 32
  EXPECT_EQ(j["cost"][1]["steps_to_native"], 4);  // one chunk per healed layer
  EXPECT_GT(j["cost"][1]["heal_ms_per_step"].get<double>(),
            j["cost"][0]["heal_ms_per_step"].get<double>());
  EXPECT_TRUE(j["sha256"]["filler"].contains("test.txt"));
}

TEST(HealCli, BadInputsAreClearErrors) {
  auto r = run_molt(kRoute + "--filler " + kLadder + "/data/test.txt --after 0,-4");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("--after"), std::string::npos) << r.output;
  const std::string tiny = testing::TempDir() + "/heal_filler.txt";
  std::ofstream(tiny) << "a few words only\n";
  r = run_molt(kRoute + "--filler " + tiny + " --context 256 --count 1 --after 0,64");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("filler has"), std::string::npos) << r.output;
  r = run_molt(kRoute + "--filler /nonexistent.txt --context 256 --count 1");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("/nonexistent.txt"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace molt
