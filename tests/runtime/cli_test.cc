// The CLI end to end: `molt generate --ladder` (text and JSON lines), `molt demo --synthetic`,
// `molt pressure`, `molt ladder show`, `molt bench switch`, and their error messages.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <sstream>

#include "runtime_fixture.h"

namespace molt {
namespace {

using test::run_molt;

std::string ladder() {
  return test::runtime_ladder().with_maps.string();
}
std::string spike() {
  return std::string(MOLT_SOURCE_DIR) + "/traces/spike_mid_answer.json";
}

std::vector<nlohmann::json> json_lines(const std::string& out) {
  std::vector<nlohmann::json> v;
  std::istringstream in(out);
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty() && line[0] == '{') v.push_back(nlohmann::json::parse(line));
  }
  return v;
}

TEST(Cli, GenerateOnALadderStreamsJsonEvents) {
  const auto r =
      run_molt("generate --ladder " + ladder() + " --prompt 'the quick brown fox' --trace " +
               spike() + " --policy molt --json --max-tokens 48 --threads 1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto events = json_lines(r.output);
  ASSERT_FALSE(events.empty());
  int64_t next = 0, migrations = 0;
  for (const auto& e : events) {
    ASSERT_TRUE(e.contains("event")) << e;
    if (e["event"] == "token") {
      EXPECT_EQ(e["index"], next++);  // contiguous, no duplicate at any seam
      for (const char* k : {"text", "token_id", "rung"}) EXPECT_TRUE(e.contains(k)) << e;
    } else if (e["event"] == "migration") {
      ++migrations;
      for (const char* k : {"from", "to", "policy", "ms", "flops_saved", "pressure"})
        EXPECT_TRUE(e.contains(k)) << e;
      EXPECT_EQ(e["policy"], "molt") << e;
      EXPECT_LE(e["peak_mib"].get<double>(), e["budget_mib"].get<double>())
          << e;  // never co-resident
    } else if (e["event"] == "budget") {
      EXPECT_TRUE(e["mib"].is_number());
    }
  }
  EXPECT_EQ(next, 48);
  EXPECT_EQ(migrations, 3);  // l → m, m → s, then back up
  const auto& done = events.back();
  EXPECT_EQ(done["event"], "done");
  EXPECT_EQ(done["tokens"], 48);
  EXPECT_EQ(done["killed"], false);
  EXPECT_EQ(done["migrations"], 3);
  EXPECT_EQ(done["rungs_used"], nlohmann::json({"l", "m", "s"}));
}

TEST(Cli, GenerateTextShowsRungsSwitchesAndASummary) {
  const auto r =
      run_molt("generate --ladder " + ladder() + " --prompt 'the quick brown fox' --trace " +
               spike() + " --policy reprefill --max-tokens 48 --threads 1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("[l] "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("⇆ l → m  (reprefill, "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("⇆ m → s  (reprefill, "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("── budget "), std::string::npos);
  EXPECT_NE(r.output.find("done: 48 tokens · rungs l, m, s · 3 migrations"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("killed=false"), std::string::npos);
}

TEST(Cli, HoldIsKilledOnSpikeMidAnswer) {
  const auto r =
      run_molt("generate --ladder " + ladder() + " --prompt 'the quick brown fox' --trace " +
               spike() + " --policy hold --json --max-tokens 48 --threads 1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto done = json_lines(r.output).back();
  EXPECT_EQ(done["killed"], true);
  EXPECT_LT(done["tokens"].get<int>(), 48);
  for (const char* p : {"small", "reprefill", "release-reprefill", "heal", "auto"}) {
    const auto ok =
        run_molt("generate --ladder " + ladder() + " --prompt 'the quick brown fox' --trace " +
                 spike() + " --policy " + p + " --json --max-tokens 48 --threads 1");
    ASSERT_EQ(ok.exit_code, 0) << ok.output;
    const auto d = json_lines(ok.output).back();
    EXPECT_EQ(d["killed"], false) << p;
    EXPECT_EQ(d["tokens"], 48) << p;
  }
}

TEST(Cli, GenerateErrorsSayWhatIsWrong) {
  auto r = run_molt("generate --ladder /nonexistent/ladder.json --prompt hi");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("/nonexistent/ladder.json: ladder manifest not found"), std::string::npos)
      << r.output;
  r = run_molt("generate --ladder " + ladder() + " --prompt hi --policy yolo");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("--policy"), std::string::npos) << r.output;
  r = run_molt("generate --ladder " + ladder() + " --prompt hi --trace /nonexistent/t.json");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("/nonexistent/t.json: pressure trace not found"), std::string::npos)
      << r.output;
  r = run_molt("generate --ladder " + ladder() + " --prompt hi --chat");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("--chat: the ladder's tokenizer has no <|im_start|>"), std::string::npos)
      << r.output;
  r = run_molt("generate --ladder " + ladder());
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("give the prompt with --prompt TEXT"), std::string::npos) << r.output;
  r = run_molt("generate --ids '1 2'");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("give --model DIR (one model) or --ladder FILE"), std::string::npos)
      << r.output;
  // A flag of the other mode is refused, naming it.
  for (const char* flag : {"--precision int8", "--precision bogus", "--layout memory"}) {
    r = run_molt("generate --ladder " + ladder() + " --ids '1 2' " + flag);
    EXPECT_EQ(r.exit_code, 1) << flag;
    EXPECT_NE(r.output.find(std::string(flag).substr(0, std::string(flag).find(' ')) +
                            " applies to --model only"),
              std::string::npos)
        << flag << ": " << r.output;
  }
  // A single model is a one-rung ladder: the budget flags apply to it (and a bad trace is
  // refused like on a ladder, not ignored).
  const std::string s = (std::filesystem::path(ladder()).parent_path() / "s").string();
  r = run_molt("generate --model " + s + " --ids '1 2' --trace /nonexistent.json");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("/nonexistent.json: pressure trace not found"), std::string::npos)
      << r.output;
}

TEST(Cli, GenerateWithALiveBudget) {
  const auto r =
      run_molt("generate --ladder " + ladder() +
               " --prompt 'the quick brown fox' --live --json --max-tokens 4 --threads 1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto events = json_lines(r.output);
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.front()["event"], "budget");
  EXPECT_GT(events.front()["mib"].get<double>(), 0.0);
  EXPECT_EQ(events.back()["tokens"], 4);
  EXPECT_NE(run_molt("generate --ladder " + ladder() + " --prompt hi --live --trace " + spike())
                .output.find("give --trace FILE or --live, not both"),
            std::string::npos);
}

TEST(Cli, DemoRunsEveryCondition) {
  test::TempDir dir;
  // Under qemu (every float operation emulated) fitting the synthetic ladder's six maps takes
  // minutes: the bundled tiny ladder there, whose maps are fitted (make demo runs the same).
  const std::string ladder =
      test::under_emulation()
          ? " --ladder " + std::string(MOLT_SOURCE_DIR) + "/models/tiny-ladder/ladder.json"
          : " --synthetic " + (dir.path() / "syn").string();
  const auto r = run_molt("demo" + ladder + " --max-tokens 48 --threads 1 --trace " + spike());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("⇆ l → m  (molt, "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("done: 48 tokens"), std::string::npos) << r.output;
  for (const char* line :
       {"A hold        killed=true", "B small       killed=false", "C reprefill   killed=false",
        "D molt        killed=false", "  heal        killed=false"}) {
    EXPECT_NE(r.output.find(line), std::string::npos) << line << "\n" << r.output;
  }
  EXPECT_NE(r.output.find("seam KL mean"), std::string::npos);
}

TEST(Cli, PressureCommands) {
  auto r = run_molt("pressure hog --mib 8 --hold-ms 1");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("hog: holding 8 MiB"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("hog: released"), std::string::npos);
  r = run_molt("pressure trace " + spike());
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("spike_mid_answer: 4 points, unit tokens"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("0.75 × the top rung's footprint"), std::string::npos) << r.output;
  r = run_molt("pressure probe");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("MemAvailable"), std::string::npos) << r.output;
}

TEST(Cli, LadderShowAndBenchSwitch) {
  auto r = run_molt("ladder show " + ladder() + " --context 256");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("tokenizer merges.txt shared by 3 rung(s)"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("route l → m: maps"), std::string::npos) << r.output;
  r = run_molt("bench switch --ladder " + ladder() +
               " --from l --to m --contexts 64 --repeat 1 --threads 1 --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto cells = json_lines(r.output);
  ASSERT_EQ(cells.size(), 4u);
  // First the provenance: the SHA-256 of every file measured on (the map's among them).
  EXPECT_EQ(cells[0]["event"], "provenance");
  EXPECT_EQ(cells[0]["sha256"]["maps/l-m/map.safetensors"].get<std::string>().size(), 64u)
      << cells[0];
  EXPECT_EQ(cells[1]["policy"], "molt");
  EXPECT_GT(cells[1]["flops_saved"].get<double>(), 0.0);
  EXPECT_EQ(cells[2]["policy"], "reprefill");
  EXPECT_EQ(cells[3]["policy"], "release-reprefill");
}

}  // namespace
}  // namespace molt
