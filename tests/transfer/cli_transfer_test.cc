// The transfer commands end to end on tiny synthetic rungs: molt fit (one run and shards +
// merge), fit report, fit floor, transfer eval, bench transfer, and their errors.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "molt/transfer/conditions.h"
#include "molt/transfer/corpus.h"
#include "molt/transfer/map_file.h"
#include "molt/transfer/token_floor.h"
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
  EXPECT_NE(r.output.find("floor.safetensors (token-identity floor: "), std::string::npos)
      << r.output;

  r = test::run_molt("fit report " + path("maps"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* s : {"SHA-256 verified", "λ         0.01", "held-out rows", "boundary r = 1",
                        "floor K", "floor     floor.safetensors: "}) {
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
  // The floor's means came from the calibration text `molt fit` read, stored beside the map.
  const auto& floor = ev["token_identity_floor"];
  EXPECT_EQ(floor["file"], path("maps") + "/floor.safetensors");
  EXPECT_EQ(floor["sha256"], sha256_file(*dir_ / "maps" / "floor.safetensors"));
  EXPECT_EQ(floor["corpus"], "ids.txt");
  EXPECT_EQ(floor["created_by"], "molt fit");
  EXPECT_EQ(floor["calibration"]["windows"], 10);
  // And the files it measured on, by role, checksummed after the measurement.
  EXPECT_EQ(ev["sha256"]["maps"]["map.safetensors"],
            sha256_file(*dir_ / "maps" / "map.safetensors"));
  EXPECT_EQ(ev["sha256"]["maps"]["floor.safetensors"], floor["sha256"]);
  EXPECT_EQ(ev["sha256"]["input"]["ids.txt"], sha256_file(*dir_ / "ids.txt"));
  EXPECT_TRUE(ev["sha256"]["from"].contains("config.json"));
  EXPECT_TRUE(ev["sha256"]["to"].contains("config.json"));

  r = test::run_molt("bench transfer" + route() + " --maps " + path("maps") +
                     " --context 48 --threads 1 --repeat 2 --recompute-layers 1 --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto b = nlohmann::json::parse(r.output);
  for (const char* k : {"apply_ms", "reprefill_ms", "ratio", "map_gflop", "reprefill_gflop"}) {
    EXPECT_GT(b[k].get<double>(), 0.0) << k;
  }
}

// What `transfer eval` shows as the token-identity cache is the stored floor's figure, computed
// here from the library: a floor taken from the evaluation windows instead differs.
TEST_F(CliTransfer, TransferEvalScoresTheStoredFloorNotTheWindows) {
  auto r = test::run_molt(fit_args() + " --k 2 --out " + path("tid"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = test::run_molt("transfer eval" + route() + " --maps " + path("tid") + " --ids-file " +
                     path("ids.txt") +
                     " --prefix 40 --continuation 16 --windows 3 --threads 1 --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto ev = nlohmann::json::parse(r.output);

  auto big = Model::load(path("big")), small = Model::load(path("small"));
  auto map = CacheMap::load(path("tid"), *big, *small);
  auto stream = TokenStream::ids(path("ids.txt"));
  std::vector<std::vector<int32_t>> windows(3);
  for (auto& w : windows) ASSERT_TRUE(stream->next_window(56, w));
  ConditionSet set = transfer_conditions(*map, *big, *small, {}, {});
  add_floors(set, *small, read_token_floor(*dir_ / "tid"));
  const TransferEval want = evaluate_transfer(*big, *small, windows, 40, set.conditions, false);
  ASSERT_EQ(ev["conditions"].size(), want.conditions.size());
  for (size_t c = 0; c < want.conditions.size(); ++c) {
    const auto& got = ev["conditions"][c];
    EXPECT_EQ(got["condition"], want.conditions[c].name);
    EXPECT_NEAR(got["nll"].get<double>(), want.conditions[c].nll, 1e-9) << got;
    EXPECT_NEAR(got["transfer_kl"].get<double>(), want.conditions[c].transfer_kl, 1e-9) << got;
  }
}

TEST_F(CliTransfer, FitFloorAddsTheFloorToAnOldMapDirectory) {
  auto r = test::run_molt(fit_args() + " --k 2 --out " + path("old"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const TokenFloor fitted = read_token_floor(*dir_ / "old");
  // As a map directory from before floors: the index lists the map alone.
  auto index = nlohmann::json::parse(test::read_file(*dir_ / "old" / "index.json"));
  index["files"].erase("floor.safetensors");
  test::write_file(*dir_ / "old" / "index.json", index.dump());
  std::filesystem::remove(*dir_ / "old" / "floor.safetensors");
  const std::string map_sha = sha256_file(*dir_ / "old" / "map.safetensors");

  const std::string eval = "transfer eval" + route() + " --maps " + path("old") + " --ids-file " +
                           path("ids.txt") +
                           " --prefix 40 --continuation 16 --windows 2 --threads 1 --json";
  r = test::run_molt(eval);  // no floor from the evaluation windows: refused, saying what to run
  EXPECT_EQ(r.exit_code, 1);
  for (const std::string& s :
       std::vector<std::string>{path("old") + ": no token-identity floor",
                                "molt fit floor " + path("old") + " --to " + path("small"),
                                "--floor-corpus FILE", "--no-floors"}) {
    EXPECT_NE(r.output.find(s), std::string::npos) << s << "\n" << r.output;
  }
  r = test::run_molt(eval + " --no-floors");  // the old directory itself still loads
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = test::run_molt(eval + " --no-floors --floor-corpus-ids " + path("ids.txt"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("--floor-corpus-ids does not apply with --no-floors"), std::string::npos)
      << r.output;
  // Fitted now from calibration ids, in memory.
  r = test::run_molt(eval + " --floor-corpus-ids " + path("ids.txt"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto in_memory = nlohmann::json::parse(r.output);
  EXPECT_TRUE(in_memory["token_identity_floor"]["file"].is_null());
  EXPECT_EQ(in_memory["token_identity_floor"]["corpus"], "ids.txt");

  // Flags `fit floor` does not read are refused, naming them.
  const std::string floor = "fit floor " + path("old") + " --to " + path("small") +
                            " --corpus-ids " + path("ids.txt") + " --threads 1";
  r = test::run_molt("fit --k 3 " + floor.substr(4));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("--k does not apply to molt fit floor"), std::string::npos) << r.output;
  r = test::run_molt(floor + " --lambda 3");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("--lambda"), std::string::npos) << r.output;
  r = test::run_molt("fit floor " + path("old") + " --to " + path("big") + " --corpus-ids " +
                     path("ids.txt"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("the map's receiver is"), std::string::npos) << r.output;

  r = test::run_molt(floor);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("map.safetensors is unchanged"), std::string::npos) << r.output;
  EXPECT_EQ(sha256_file(*dir_ / "old" / "map.safetensors"), map_sha);
  const TokenFloor added = read_token_floor(*dir_ / "old");
  EXPECT_EQ(added.info["created_by"], "molt fit floor");
  EXPECT_EQ(added.info["calibration"], fitted.info["calibration"]);  // the map's windows
  ASSERT_EQ(added.ids, fitted.ids);
  for (size_t l = 0; l < added.k.size(); ++l) {
    for (size_t i = 0; i < added.k[l].size(); ++i) {
      ASSERT_LE(std::abs(added.k[l][i] - fitted.k[l][i]),
                std::abs(fitted.k[l][i]) * 0x1p-10 + 0x1p-24);
    }
  }
  // The stored floor and the one fitted in memory from the same text give the same figures.
  r = test::run_molt(eval);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto stored = nlohmann::json::parse(r.output);
  EXPECT_EQ(stored["token_identity_floor"]["sha256"],
            sha256_file(*dir_ / "old" / "floor.safetensors"));
  EXPECT_EQ(stored["conditions"], in_memory["conditions"]);
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
  // Its means came from the fit's calibration text, not from the needle prompts.
  EXPECT_EQ(j["token_identity_floor"]["corpus"], "test.txt");
  EXPECT_EQ(j["token_identity_floor"]["sha256"], sha256_file(d / "maps" / "floor.safetensors"));
  // The files it measured on: the rung's weights and tokenizer, the map folder, the needles.
  EXPECT_EQ(j["sha256"]["from"]["model.safetensors"], sha256_file(s / "model.safetensors"));
  EXPECT_EQ(j["sha256"]["from"]["tokenizer.json"], sha256_file(s / "tokenizer.json"));
  EXPECT_EQ(j["sha256"]["maps"]["map.safetensors"], sha256_file(d / "maps" / "map.safetensors"));
  EXPECT_EQ(j["sha256"]["input"]["needles.jsonl"], sha256_file(ladder / "data" / "needles.jsonl"));
}

}  // namespace
}  // namespace molt
