// models/tiny-ladder/EVAL.md and the README blocks that quote the tiny ladder trace to eval.json
// and the committed files (issue 24): the page and every generated block are what `molt bench
// eval-report` makes of them now, byte for byte; eval.json's provenance names the committed
// files by SHA-256; and the cheapest cell of eval.json, re-measured now, is the recorded one.
// MOLT_TRACE_ROOT stands in for the source tree (a broken copy, to see these fail).
#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <sstream>

#include "molt/bench/ladder_card.h"
#include "molt/ladder/manifest.h"
#include "molt/transfer/map_file.h"
#include "test_util.h"

namespace molt {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using test::run_molt;

fs::path root() {
  return test::trace_root();
}
fs::path ladder() {
  return root() / "models" / "tiny-ladder";
}

// Line by line, so that a failure names the first line that differs.
void expect_same_text(const std::string& have, const std::string& want, const std::string& page) {
  std::istringstream ws(want), hs(have);
  std::string w, h;
  for (int line = 1; want != have; ++line) {
    const bool more_w = static_cast<bool>(std::getline(ws, w));
    const bool more_h = static_cast<bool>(std::getline(hs, h));
    ASSERT_EQ(h, w) << page << " line " << line
                    << " is not what eval.json and the committed ladder generate: run "
                       "tools/tiny-ladder/evaluate.sh (or molt bench eval-report --in "
                       "models/tiny-ladder/eval.json --out models/tiny-ladder/EVAL.md --fill "
                       "README.md --fill models/tiny-ladder/README.md) and commit the result";
    ASSERT_TRUE(more_w || more_h) << page << " differs from what generates it in its line ends";
  }
}

TEST(EvalTrace, PageIsGeneratedFromItsJson) {
  test::TempDir t;
  const auto r = run_molt("bench eval-report --in " + (ladder() / "eval.json").string() +
                          " --out " + (t / "EVAL.md").string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  expect_same_text(test::read_file(ladder() / "EVAL.md"), test::read_file(t / "EVAL.md"),
                   "models/tiny-ladder/EVAL.md");
}

TEST(EvalTrace, ReadmeBlocksAreGenerated) {
  // The generator rewrites copies; the committed pages must already be what it writes.
  test::TempDir t;
  const std::vector<std::pair<fs::path, std::string>> pages = {
      {root() / "README.md", "README.md"},
      {ladder() / "README.md", "models/tiny-ladder/README.md"}};
  std::string fill;
  for (size_t i = 0; i < pages.size(); ++i) {
    const fs::path copy = t / fmt::format("{}.md", i);
    fs::copy_file(pages[i].first, copy);
    fill += " --fill " + copy.string();
  }
  const auto r = run_molt("bench eval-report --in " + (ladder() / "eval.json").string() +
                          " --out " + (t / "EVAL.md").string() + fill);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (size_t i = 0; i < pages.size(); ++i) {
    SCOPED_TRACE(pages[i].second);
    expect_same_text(test::read_file(pages[i].first), test::read_file(t / fmt::format("{}.md", i)),
                     pages[i].second);
  }
}

TEST(EvalTrace, JsonRecordsTheCommittedFiles) {
  const json ev = json::parse(test::read_file(ladder() / "eval.json"));
  if (!ev.contains("provenance")) {
    // An eval.json from before provenance; EVAL.md says so (checked above) and
    // NeedlesOfTheSmallestRungReproduce re-measures it instead.
    GTEST_SKIP() << "models/tiny-ladder/eval.json predates provenance: re-run "
                    "tools/tiny-ladder/evaluate.sh to record it";
  }
  const json& files = ev.at("provenance").at("sha256");
  // Every rung's folder (config, weights, tokenizer files) was recorded, and what the runs read.
  for (const ManifestRung& r : LadderManifest::load(ladder() / "ladder.json").rungs) {
    for (const char* f : {"config.json", "model.safetensors", "tokenizer.json"}) {
      const std::string name = r.path.lexically_relative(ladder()).generic_string() + "/" + f;
      EXPECT_TRUE(files.contains(name)) << name << " not recorded";
    }
  }
  for (const char* f : {"ladder.json", "data/test.txt", "data/needles.jsonl"}) {
    EXPECT_TRUE(files.contains(f)) << f << " not recorded";
  }
  for (const auto& [name, sha] : files.items()) {
    SCOPED_TRACE(name);
    ASSERT_TRUE(fs::path(name).is_relative()) << "not a committed file";
    const fs::path p = ladder() / name;
    ASSERT_TRUE(fs::exists(p)) << p;
    EXPECT_EQ(sha256_file(p), sha.get<std::string>()) << name << " changed since measured";
  }
}

TEST(EvalTrace, NeedlesOfTheSmallestRungReproduce) {
  // The cheapest cell: the rung with the fewest parameters at its shortest needle context.
  const json ev = json::parse(test::read_file(ladder() / "eval.json"));
  const LadderManifest m = LadderManifest::load(ladder() / "ladder.json");
  const auto smallest = std::min_element(m.rungs.begin(), m.rungs.end(), [](auto& a, auto& b) {
    return parameter_count(a.path) < parameter_count(b.path);
  });
  ASSERT_NE(smallest, m.rungs.end());
  const json& acc = ev.at(smallest->name).at("needle_accuracy");
  std::string context;
  for (const auto& [c, _] : acc.items()) {
    if (context.empty() || std::stoll(c) < std::stoll(context)) context = c;
  }
  ASSERT_FALSE(context.empty());
  const json& was = acc.at(context);
  const auto r = run_molt(
      fmt::format("eval needle --model {} --needles {} --context {} --count {} --threads 2 --json",
                  smallest->path.string(), (ladder() / "data" / "needles.jsonl").string(), context,
                  was.at("count").get<int64_t>()));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  json now;
  std::istringstream lines(r.output);
  for (std::string line; std::getline(lines, line);) {
    if (line.starts_with("{")) now = json::parse(line);
  }
  ASSERT_TRUE(now.is_object()) << r.output;
  SCOPED_TRACE(fmt::format("rung {} at {} tokens", smallest->name, context));
  EXPECT_EQ(now.at("count"), was.at("count"));
  EXPECT_DOUBLE_EQ(now.at("accuracy").get<double>(), was.at("accuracy").get<double>())
      << "eval.json's needle accuracy is not what the committed rung scores now";
  EXPECT_NEAR(now.at("mean_prompt_tokens").get<double>(),
              was.at("mean_prompt_tokens").get<double>(), 1e-9)
      << "the committed needles or tokenizer are not the ones measured";
}

}  // namespace
}  // namespace molt
