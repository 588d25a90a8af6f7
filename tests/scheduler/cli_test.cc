// `molt bench tenants` end to end on the bundled tiny ladder: the standard scenario (one
// foreground chat, two background batch jobs, a two-step squeeze mid-answer and a recovery)
// never exceeds the budget, kills nobody, finishes everyone, and writes an SVG timeline.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "test_util.h"

namespace molt {
namespace {

const std::string kTiny = std::string(MOLT_SOURCE_DIR) + "/models/tiny-ladder/ladder.json";
const std::string kTrace = std::string(MOLT_SOURCE_DIR) + "/traces/two_step_squeeze.json";

size_t count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
  return n;
}

TEST(BenchTenantsCli, StandardScenarioOnTheTinyLadder) {
  if (!std::filesystem::exists(kTiny)) GTEST_SKIP() << "no tiny ladder at " << kTiny;
  test::TempDir dir;
  const std::string out = (dir / "tenants.json").string();
  const auto r = test::run_molt("bench tenants --ladder " + kTiny + " --trace " + kTrace +
                                " --threads 1 --json --out " + out);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json j = nlohmann::json::parse(r.output);
  const nlohmann::json& s = j["summary"];
  EXPECT_LE(s["max_overshoot_mib"].get<double>(), 0) << s.dump(1);
  EXPECT_EQ(s["killed"], 0);
  EXPECT_TRUE(s["all_finished"].get<bool>());
  ASSERT_EQ(s["tenants"].size(), 3u);
  for (const auto& t : s["tenants"]) {
    EXPECT_TRUE(t["finished"].get<bool>()) << t;
    EXPECT_EQ(t["tokens"], t["max_tokens"]) << t;
    EXPECT_FALSE(t["killed"].get<bool>());
  }
  // The squeeze is felt: somebody moved down and later back up; the late batch job waited.
  EXPECT_GT(s["levers"]["demote"].get<int64_t>(), 0);
  EXPECT_GT(s["levers"]["promote"].get<int64_t>(), 0);
  // The timeline has a row per round, each with every tenant, and RSS beside the accounting.
  ASSERT_EQ(j["rounds"].size(), s["rounds"].get<size_t>());
  for (const auto& round : j["rounds"]) {
    ASSERT_EQ(round["tenants"].size(), 3u);
    EXPECT_TRUE(round["rss_mib"].is_number());
    EXPECT_LE(round["accounted_mib"].get<double>(), round["budget_mib"].get<double>()) << round;
  }
  // The JSON file and the SVG beside it.
  EXPECT_EQ(nlohmann::json::parse(test::read_file(out))["summary"], s);
  const std::string svg = test::read_file(dir / "tenants.svg");
  ASSERT_EQ(svg.rfind("<svg", 0), 0u) << svg.substr(0, 80);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
  EXPECT_GE(count(svg, "class=\"band\""), 3u);
  EXPECT_EQ(count(svg, "<rect"), count(svg, "/>") - count(svg, "<line") - count(svg, "<polyline"))
      << "every rect closes itself";
  EXPECT_EQ(count(svg, "<text"), count(svg, "</text>"));
}

TEST(BenchTenantsCli, TableAndBadSpecs) {
  if (!std::filesystem::exists(kTiny)) GTEST_SKIP() << "no tiny ladder at " << kTiny;
  const auto bad = test::run_molt("bench tenants --ladder " + kTiny + " --trace " + kTrace +
                                  " --tenants fg:8,xx:4");
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.output.find("priority 'xx' is not fg or bg"), std::string::npos) << bad.output;
  const auto r = test::run_molt("bench tenants --ladder " + kTiny + " --trace " + kTrace +
                                " --threads 1 --tenants fg:8,bg:8@2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("killed 0"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("chat0"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("batch0"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace molt
