// The transfer commands end to end on tiny synthetic rungs: molt fit (one run and shards +
// merge), fit report, transfer eval, bench transfer, and their errors.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "molt/transfer/map_file.h"
#include "route_fixture.h"

namespace molt {
namespace {

class CliTransfer : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new test::TempDir();
    const std::string common =
        " --geometry qwen2.5-0.5b --vocab 200 --dtype f32 --intermediate 128 ";
    ASSERT_EQ(test::run_molt("synth" + common +
                             "--layers 3 --hidden 64 --heads 4 --kv-heads 2 --seed 1 --out " +
                             (*dir_ / "big").string())
                  .exit_code,
              0);
    ASSERT_EQ(test::run_molt("synth" + common +
                             "--layers 2 --hidden 48 --heads 2 --kv-heads 1 --seed 2 "
                             "--rope-theta 10000 --out " +
                             (*dir_ / "small").string())
                  .exit_code,
              0);
    test::write_ids_file(*dir_ / "ids.txt", 3000, 200, 7);
  }
  static void TearDownTestSuite() { delete dir_; }
  static std::string path(const char* name) { return (*dir_ / name).string(); }
  static std::string route() { return " --from " + path("big") + " --to " + path("small"); }
  static std::string fit_args() {
    return "fit" + route() + " --corpus-ids " + path("ids.txt") +
           " --sequences 10 --seq-len 64 --stride 2 --heldout-every 5 --threads 1";
  }
  static test::TempDir* dir_;
};
test::TempDir* CliTransfer::dir_ = nullptr;

TEST_F(CliTransfer, FitReportEvalBench) {
  auto r = test::run_molt(fit_args() + " --recompute-layers 1 --out " + path("maps"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("held-out prefix-KV NLL"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("wrote"), std::string::npos) << r.output;

  r = test::run_molt("fit report " + path("maps"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* s :
       {"SHA-256 verified", "λ         0.01", "held-out rows", "boundary r = 1", "floor K"}) {
    EXPECT_NE(r.output.find(s), std::string::npos) << s << "\n" << r.output;
  }
  r = test::run_molt("fit report --json " + path("maps"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto rep = nlohmann::json::parse(r.output);
  EXPECT_EQ(rep["method"], "ridge");
  EXPECT_EQ(rep["calibration"]["stride"], 2);
  EXPECT_EQ(rep["calibration"]["train_windows"], 8);
  EXPECT_EQ(rep["sources"]["k"].size(), 2u);
  EXPECT_EQ(rep["corpus"], "ids.txt");
  EXPECT_EQ(rep["corpus_sha256"].get<std::string>().size(), 64u);

  r = test::run_molt("transfer eval" + route() + " --maps " + path("maps") + " --ids-file " +
                     path("ids.txt") +
                     " --prefix 40 --continuation 16 --windows 2 --recompute-layers 1 "
                     "--anchors 4 --threads 1 --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto ev = nlohmann::json::parse(r.output);
  EXPECT_EQ(ev["windows"], 2);
  EXPECT_EQ(ev["scored_tokens"], 2 * 15);
  std::vector<std::string> names;
  for (const auto& c : ev["conditions"]) {
    names.push_back(c["condition"]);
    EXPECT_GE(c["transfer_kl"].get<double>(), 0.0);
  }
  EXPECT_EQ(names,
            (std::vector<std::string>{"map (ridge)", "map + recompute r=1", "map + anchors a=4",
                                      "zero cache", "token-identity cache"}));

  r = test::run_molt("bench transfer" + route() + " --maps " + path("maps") +
                     " --context 48 --threads 1 --repeat 2 --recompute-layers 1 --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto b = nlohmann::json::parse(r.output);
  for (const char* k : {"apply_ms", "reprefill_ms", "ratio", "map_gflop", "reprefill_gflop"}) {
    EXPECT_GT(b[k].get<double>(), 0.0) << k;
  }
}

TEST_F(CliTransfer, ShardsMergedEqualOneRun) {
  auto r = test::run_molt(fit_args() + " --k 2 --out " + path("one"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (int s = 1; s <= 3; ++s) {
    r = test::run_molt(fit_args() + " --k 2 --shard " + std::to_string(s) + "/3 --out " +
                       path("sharded"));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("stats-" + std::to_string(s) + "-of-3"), std::string::npos) << r.output;
  }
  EXPECT_FALSE(std::filesystem::exists(*dir_ / "sharded" / "map.safetensors"));
  r = test::run_molt("fit merge " + path("sharded"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("shards 1, 2, 3 of 3"), std::string::npos) << r.output;
  const MapData a = read_map_dir(*dir_ / "one"), m = read_map_dir(*dir_ / "sharded");
  ASSERT_EQ(a.layers.size(), m.layers.size());
  for (size_t j = 0; j < a.layers.size(); ++j) {
    EXPECT_EQ(a.layers[j].k_sources, m.layers[j].k_sources);
    for (size_t i = 0; i < a.layers[j].v_weight.size(); ++i) {
      ASSERT_NEAR(a.layers[j].v_weight[i], m.layers[j].v_weight[i], 1e-4);
    }
  }
  // A missing shard is named.
  test::TempDir partial;
  std::filesystem::copy(*dir_ / "sharded" / "stats-1-of-3.molt-stats", partial.path());
  r = test::run_molt("fit merge " + partial.path().string());
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("shards 2, 3 of 3 are missing"), std::string::npos) << r.output;
}

TEST_F(CliTransfer, KeptStatisticsSolveAblations) {
  auto r = test::run_molt(fit_args() + " --k 2 --keep-stats --out " + path("kept"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  ASSERT_TRUE(std::filesystem::exists(*dir_ / "kept" / "stats-1-of-1.molt-stats"));
  r = test::run_molt("fit merge " + path("kept") + " --method depth-remap --out " + path("remap"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = test::run_molt("fit report --json " + path("remap"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto j = nlohmann::json::parse(r.output);
  EXPECT_EQ(j["method"], "depth-remap");
  EXPECT_EQ(j["k"], 1);
  EXPECT_EQ(j["sources"]["k"], nlohmann::json::parse("[[0], [2]]"));
  // These statistics cannot give a diagonal map (and the route could not have one).
  r = test::run_molt("fit merge " + path("kept") + " --method diagonal --out " + path("nope"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("--method diagonal"), std::string::npos) << r.output;
}

TEST_F(CliTransfer, ErrorsAreClear) {
  auto r = test::run_molt("fit --to " + path("small") + " --out x");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("needs --from, --to and --out"), std::string::npos) << r.output;
  r = test::run_molt(fit_args() + " --k seven --out " + path("bad"));
  EXPECT_NE(r.output.find("--k: 'seven'"), std::string::npos) << r.output;
  r = test::run_molt(fit_args() + " --method diagonal --out " + path("bad"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("geometries differ"), std::string::npos) << r.output;
  // Flags the method does not read are refused, naming the flag (not silently dropped).
  r = test::run_molt(fit_args() + " --method diagonal --k 3 --out " + path("bad"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("--k does not apply to --method diagonal"), std::string::npos)
      << r.output;
  r = test::run_molt(fit_args() + " --method diagonal --lambda 5 --out " + path("bad"));
  EXPECT_NE(r.output.find("--lambda does not apply"), std::string::npos) << r.output;
  r = test::run_molt(fit_args() + " --method depth-remap --k 2 --out " + path("bad"));
  EXPECT_NE(r.output.find("--k does not apply to --method depth-remap"), std::string::npos)
      << r.output;
  r = test::run_molt("fit" + route() + " --corpus " + path("ids.txt") + " --out " + path("bad"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("--corpus-ids"), std::string::npos) << r.output;  // no tokenizer
  r = test::run_molt(fit_args() + " --shard 4/3 --out " + path("bad"));
  EXPECT_NE(r.output.find("--shard 4/3"), std::string::npos) << r.output;
  for (const char* bad : {"2", "2/", "/3", "a/3", "2/3x", "-1/3", "1/+3"}) {
    r = test::run_molt(fit_args() + " --shard " + bad + " --out " + path("bad"));
    EXPECT_EQ(r.exit_code, 1) << bad;
    EXPECT_NE(r.output.find("is not I/N"), std::string::npos) << bad << ": " << r.output;
  }
  // A map used for the reverse route.
  ASSERT_EQ(test::run_molt(fit_args() + " --k 1 --out " + path("rev")).exit_code, 0);
  r = test::run_molt("bench transfer --from " + path("small") + " --to " + path("big") +
                     " --maps " + path("rev") + " --context 8");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("sender n_layers is 3 in the map but 2"), std::string::npos) << r.output;
  r = test::run_molt("fit report " + path("nothing"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("index.json: missing"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace molt

namespace molt {
namespace {

// On the trained tiny ladder (skipped where it is absent): a text corpus through the rung's
// tokenizer, and needles with the switch right before the answer. A route from s to itself
// with an (almost) exact map answers exactly as s reading the prompt itself.
TEST(CliTransferLadder, SelfRouteNeedlesMatchTheNativeReceiver) {
  const std::filesystem::path ladder =
      std::filesystem::path(MOLT_SOURCE_DIR) / "models" / "tiny-ladder";
  const std::filesystem::path s = ladder / "s";
  if (!std::filesystem::exists(s / "model.safetensors") ||
      !std::filesystem::exists(s / "tokenizer.json")) {
    GTEST_SKIP() << "models/tiny-ladder/s is absent";
  }
  test::TempDir d;
  const std::string route = " --from " + s.string() + " --to " + s.string();
  auto r = test::run_molt("fit" + route + " --corpus " + (ladder / "data" / "test.txt").string() +
                          " --sequences 12 --seq-len 128 --stride 1 --heldout-every 4 --k all "
                          "--lambda 1e-7 --threads 1 --out " +
                          (d / "maps").string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = test::run_molt("transfer needle" + route + " --maps " + (d / "maps").string() +
                     " --needles " + (ladder / "data" / "needles.jsonl").string() +
                     " --context 256 --count 4 --threads 1 --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto j = nlohmann::json::parse(r.output);
  EXPECT_EQ(j["count"], 4);
  std::map<std::string, int64_t> correct;
  for (const auto& c : j["conditions"]) correct[c["condition"]] = c["correct"];
  EXPECT_EQ(correct.at("map (ridge)"), correct.at("receiver reads the prompt")) << r.output;
  EXPECT_EQ(correct.at("sender reads the prompt"), correct.at("receiver reads the prompt"));
  EXPECT_TRUE(correct.count("token-identity cache"));
}

}  // namespace
}  // namespace molt
