// `molt serve` and `molt bench serve` as commands: flags refused with their names, a short
// benchmark run end to end.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "molt/server/bench_serve.h"
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
  // Under qemu the first answers' prefill outlasted a 3-second run's cut (no round ran under
  // it, and the overshoot had no value): there the run is long enough for the cut to bite.
  const int seconds = test::under_emulation() ? 20 : 3;
  const auto r = test::run_molt(fmt::format(
      "bench serve --ladder {} --streams 3 --seconds {} --max-tokens 24 --threads 1 --json", kTiny,
      seconds));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json j = nlohmann::json::parse(r.output);
  EXPECT_EQ(j["errors"], 0) << j.dump(1);
  EXPECT_GT(j["requests"].get<int64_t>(), 0);
  EXPECT_GT(j["tokens"].get<int64_t>(), 0);
  EXPECT_EQ(j["killed"].get<double>(), 0);
  EXPECT_GT(j["cut_rounds"].get<double>(), 0) << "the squeeze went unmeasured";
  ASSERT_TRUE(j["max_overshoot_mib"].is_number()) << j["max_overshoot_mib"];
  EXPECT_LE(j["max_overshoot_mib"].get<double>(), 0);
  for (const char* k : {"req_s", "tok_s", "ttft_ms", "migrations", "rss_mib", "rss_drift"})
    EXPECT_TRUE(j.contains(k)) << k;
}

TEST(BenchServeTable, AnUnmeasuredSqueezeIsSaidNotThrown) {
  // What a run too short for its cut returns (seen under qemu): no round under the cut, so no
  // overshoot either.
  nlohmann::json r = {{"streams", 3},
                      {"seconds", 5.2},
                      {"cut_to", "m"},
                      {"requests", 3},
                      {"req_s", 0.58},
                      {"tokens", 47},
                      {"tok_s", 9.1},
                      {"errors", 0},
                      {"migrations", 0},
                      {"rounds", 23.0},
                      {"cut_rounds", 0.0},
                      {"killed", 0.0},
                      {"max_overshoot_mib", nullptr},
                      {"rss_drift", 0.04},
                      {"rss_drift_from", "first sample"}};
  r["ttft_ms"] = {{"p50", 3726.5}, {"p99", 3734.4}, {"max", 3734.4}};
  r["rss_mib"] = {{"start", 49.4}, {"end", 75.6}};
  std::string table;
  ASSERT_NO_THROW(table = server::serve_bench_table(r));
  EXPECT_NE(table.find("no scheduler round ran under the cut"), std::string::npos) << table;
  EXPECT_NE(table.find("max overshoot none"), std::string::npos) << table;
  r["cut_rounds"] = 41.0;
  r["max_overshoot_mib"] = -3.25;
  table = server::serve_bench_table(r);
  EXPECT_NE(table.find("(41 scheduler rounds under the cut)"), std::string::npos) << table;
  EXPECT_NE(table.find("max overshoot -3.25 MiB"), std::string::npos) << table;
}

}  // namespace
}  // namespace molt
