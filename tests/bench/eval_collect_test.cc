// eval.json from evaluate.sh's runs: the runs' figures, the SHA-256 of the committed files they
// read, training records kept; runs that read other files than the committed ones are refused.
#include <gtest/gtest.h>

#include "molt/bench/eval_report.h"
#include "molt/common/error.h"
#include "molt/transfer/map_file.h"
#include "test_util.h"

namespace molt {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// A one-rung ladder folder with its data files, and the runs evaluate.sh would write for it.
struct Fixture {
  test::TempDir t;
  fs::path dir = t / "ladder", runs = t / "runs";
  Fixture() {
    fs::create_directories(dir / "a");
    fs::create_directories(dir / "data");
    fs::create_directories(runs);
    test::write_file(dir / "ladder.json",
                     R"({"name": "t", "rungs": [{"name": "a", "path": "a", "precision": "bf16"}],
                         "routes": []})");
    test::write_file(dir / "a" / "config.json", "{}");
    test::write_file(dir / "a" / "model.safetensors", "weights");
    test::write_file(dir / "data" / "test.txt", "text");
    test::write_file(dir / "data" / "needles.jsonl", "{}\n");
    test::write_file(t / "validation.txt", "held out");
    write(runs / "run.json", {{"commit", "abc"},
                              {"dirty", false},
                              {"date", "2026-12-03T09:00Z"},
                              {"machine", "test"},
                              {"threads", 2}});
    write(runs / "a.test.json",
          {{"model", (dir / "a").string()},
           {"file", (dir / "data" / "test.txt").string()},
           {"context", 512},
           {"windows", 3},
           {"scored_tokens", 1533},
           {"nll", 4.5},
           {"after_prefix",
            {{"prefix", 256},
             {"own_cache_nll", 4.4},
             {"token_identity_cache_nll", 4.6},
             {"zero_cache_nll", 4.8},
             {"token_identity_floor",
              {{"means", "the receiver's mean K/V per token id over calibration text"},
               {"corpus", "/somewhere/calibration.txt"},
               {"calibration", {{"windows", 150}, {"seq_len", 1024}}}}}}}});
    write(
        runs / "a.validation.json",
        {{"model", (dir / "a").string()}, {"file", (t / "validation.txt").string()}, {"nll", 4.7}});
    write(runs / "a.needle-256.json", needle(256, 0.5));
    write(runs / "a.needle-1024.json", needle(1024, 0.25));
  }
  json needle(int context, double accuracy) const {
    return {{"model", (dir / "a").string()},
            {"source", (dir / "data" / "needles.jsonl").string()},
            {"context", context},
            {"count", 4},
            {"correct", static_cast<int>(accuracy * 4)},
            {"mean_prompt_tokens", context - 3.5},
            {"accuracy", accuracy}};
  }
  static void write(const fs::path& p, const json& j) { test::write_file(p, j.dump()); }
};

TEST(EvalCollect, GathersRunsWithTheirProvenance) {
  Fixture f;
  const json ev = eval_collect(f.runs, f.dir / "ladder.json", {}, json());
  const json& a = ev.at("a");
  EXPECT_EQ(a.at("test_nll"), 4.5);
  EXPECT_EQ(a.at("test_context"), 512);
  EXPECT_EQ(a.at("validation_nll"), 4.7);
  EXPECT_EQ(a.at("after_prefix").at("prefix"), 256);
  EXPECT_EQ(a.at("needle_accuracy").at("1024").at("accuracy"), 0.25);
  EXPECT_EQ(a.at("needle_accuracy").at("256").at("correct"), 2);
  EXPECT_FALSE(a.contains("training"));

  const json& p = ev.at("provenance");
  EXPECT_EQ(p.at("commit"), "abc");
  const json& sha = p.at("sha256");
  EXPECT_EQ(sha.size(), 5u) << sha.dump();
  EXPECT_EQ(sha.at("a/model.safetensors"), sha256_file(f.dir / "a" / "model.safetensors"));
  EXPECT_EQ(sha.at("data/test.txt"), sha256_file(f.dir / "data" / "test.txt"));
  EXPECT_TRUE(sha.contains("ladder.json") && sha.contains("a/config.json") &&
              sha.contains("data/needles.jsonl"));
  EXPECT_EQ(p.at("not_committed").at("validation.txt"), sha256_file(f.t / "validation.txt"));
}

TEST(EvalCollect, KeepsTrainingRecords) {
  Fixture f;
  const json previous = {{"a", {{"training", {{"tokens", 7}}}}}};
  EXPECT_EQ(eval_collect(f.runs, f.dir / "ladder.json", {}, previous).at("a").at("training"),
            previous.at("a").at("training"));
  // train.py's own state wins where the runs are on this machine.
  fs::create_directories(f.t / "runs-train" / "a");
  test::write_file(f.t / "runs-train" / "a" / "state.json",
                   R"({"tokens": 9, "step": 3, "phase": "mix", "stage": 1, "wall_s": 60})");
  const json t = eval_collect(f.runs, f.dir / "ladder.json", f.t / "runs-train", previous)
                     .at("a")
                     .at("training");
  EXPECT_EQ(t.at("tokens"), 9);
  EXPECT_EQ(t.at("phase"), "mix");
}

TEST(EvalCollect, RefusesRunsOfOtherFiles) {
  Fixture f;
  test::write_file(f.t / "other.txt", "text");
  json run = json::parse(test::read_file(f.runs / "a.test.json"));
  run["file"] = (f.t / "other.txt").string();
  Fixture::write(f.runs / "a.test.json", run);
  try {
    eval_collect(f.runs, f.dir / "ladder.json", {}, json());
    FAIL() << "collected a run of another text";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("other.txt, not the committed"), std::string::npos)
        << e.what();
  }
}

TEST(EvalCollect, RefusesARungWithoutNeedles) {
  Fixture f;
  fs::remove(f.runs / "a.needle-256.json");
  fs::remove(f.runs / "a.needle-1024.json");
  try {
    eval_collect(f.runs, f.dir / "ladder.json", {}, json());
    FAIL() << "collected a rung without needle runs";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("a.needle-*.json"), std::string::npos) << e.what();
  }
}

TEST(EvalCollect, ThePageShowsWhatWasCollected) {
  Fixture f;
  test::write_file(f.dir / "eval.json",
                   eval_collect(f.runs, f.dir / "ladder.json", {}, json()).dump(1));
  const std::string md = eval_report(f.dir / "eval.json");
  for (const char* want :
       {"Measured at commit `abc` (clean tree) on 2026-12-03T09:00Z: test, 2 threads.",
        "SHA-256 of the 5 committed files", "outside the repository: `validation.txt`.",
        "windows of 512 tokens", "`data/needles.jsonl`, 4 per context",
        "| a | 4.7000 | 4.5000 | 4.4000 | 4.6000 | 4.8000 |",
        "over calibration text: `calibration.txt`, calibration: seq_len 1024, windows 150 (every "
        "rung).",
        "| rung | needle @256 | needle @1024 | ≥ 0.8 up to |", "| a | 0.50 | 0.25 | — |",
        "No training record: `a`."}) {
    EXPECT_NE(md.find(want), std::string::npos) << want << "\nnot in\n" << md;
  }
}

TEST(EvalCollect, NeedlesHoldTheBarOnlyUpToTheFirstDip) {
  Fixture f;
  json e = eval_collect(f.runs, f.dir / "ladder.json", {}, json());
  json& acc = e["a"]["needle_accuracy"];
  acc["256"]["accuracy"] = 0.9;
  acc["1024"]["accuracy"] = 0.8;
  test::write_file(f.dir / "eval.json", e.dump(1));
  EXPECT_NE(eval_report(f.dir / "eval.json").find("| a | 0.90 | 0.80 | 1024 |"), std::string::npos);
  // Below the bar at 256 and above it at 1,024: it does not hold up to 1,024.
  acc["256"]["accuracy"] = 0.5;
  test::write_file(f.dir / "eval.json", e.dump(1));
  EXPECT_NE(eval_report(f.dir / "eval.json").find("| a | 0.50 | 0.80 | — |"), std::string::npos);
}

}  // namespace
}  // namespace molt
