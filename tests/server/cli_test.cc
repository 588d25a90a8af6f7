// `molt serve` and `molt bench serve` as commands: flags refused with their names, a short
// benchmark run end to end.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "test_util.h"

namespace molt {
namespace {

const std::string kTiny = std::string(MOLT_SOURCE_DIR) + "/models/tiny-ladder/ladder.json";

TEST(ServeCli, RefusesConflictingOrMissingFlags) {
  auto r = test::run_molt("serve");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("--ladder"), std::string::npos) << r.output;
  r = test::run_molt("serve --ladder " + kTiny + " --live --budget-mib 10");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("--budget-mib"), std::string::npos) << r.output;
  r = test::run_molt("serve --ladder " + kTiny + " --port 70000");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("--port"), std::string::npos) << r.output;
  r = test::run_molt("serve --ladder " + kTiny + " --policy hold --port 0");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("policy"), std::string::npos) << r.output;
  r = test::run_molt("serve --ladder /nonexistent/ladder.json");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("/nonexistent/ladder.json"), std::string::npos) << r.output;
}

TEST(BenchServeCli, ShortRunWithACutHasNoErrors) {
  const auto r = test::run_molt("bench serve --ladder " + kTiny +
                                " --streams 3 --seconds 3 --max-tokens 24 --threads 1 --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json j = nlohmann::json::parse(r.output);
  EXPECT_EQ(j["errors"], 0) << j.dump(1);
  EXPECT_GT(j["requests"].get<int64_t>(), 0);
  EXPECT_GT(j["tokens"].get<int64_t>(), 0);
  EXPECT_EQ(j["killed"].get<double>(), 0);
  EXPECT_LE(j["max_overshoot_mib"].get<double>(), 0);
  for (const char* k : {"req_s", "tok_s", "ttft_ms", "migrations", "rss_mib", "rss_drift"})
    EXPECT_TRUE(j.contains(k)) << k;
}

}  // namespace
}  // namespace molt
