// docs/SWITCHING.md traces to its JSON, and the JSON to the committed tiny ladder (issue 24):
// every SHA-256 it records is the committed file's; FLOPs saved and peak MiB re-measured now
// at 256 tokens are the recorded ones; the page is what the JSON generates, byte for byte.
// MOLT_TRACE_ROOT stands in for the source tree (a broken copy, to see these fail).
#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <sstream>

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
fs::path figures() {
  return root() / "docs" / "figures" / "switch";
}

struct Figures {
  std::string file;
  json provenance;
  std::vector<json> cells;
};

// The JSON lines of `text` (other lines, e.g. stderr merged in, are skipped).
Figures parse(const std::string& file, const std::string& text) {
  Figures f{file, {}, {}};
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] != '{') continue;
    json j = json::parse(line);
    if (j.value("event", "") == "provenance") {
      f.provenance = std::move(j);
    } else {
      f.cells.push_back(std::move(j));
    }
  }
  return f;
}

// The figures measured on the committed tiny ladder.
std::vector<Figures> tiny_figures() {
  std::vector<Figures> out;
  for (const auto& e : fs::directory_iterator(figures())) {
    const std::string name = e.path().filename().string();
    if (name.starts_with("tiny-") && e.path().extension() == ".jsonl") {
      out.push_back(parse(name, test::read_file(e.path())));
    }
  }
  return out;
}

TEST(DocsTrace, SwitchFiguresRecordTheCommittedFiles) {
  const std::vector<Figures> all = tiny_figures();
  ASSERT_FALSE(all.empty());
  for (const Figures& f : all) {
    SCOPED_TRACE(f.file);
    ASSERT_TRUE(f.provenance.is_object()) << "no provenance line";
    const fs::path manifest = f.provenance.at("manifest").get<std::string>();
    ASSERT_TRUE(manifest.is_relative()) << manifest << " is not a committed file";
    const json& files = f.provenance.at("sha256");
    // ladder.json, both rungs' config.json and safetensors, the map's index and tensors.
    EXPECT_GE(files.size(), 7u);
    for (const auto& [name, sha] : files.items()) {
      const fs::path p = root() / manifest.parent_path() / name;
      ASSERT_TRUE(fs::exists(p)) << p;
      EXPECT_EQ(sha256_file(p), sha.get<std::string>()) << name << " changed since measured";
    }
  }
}

TEST(DocsTrace, SwitchFlopsAndPeaksReproduce) {
  for (const Figures& f : tiny_figures()) {
    SCOPED_TRACE(f.file);
    ASSERT_TRUE(f.provenance.is_object()) << "no provenance line";
    ASSERT_FALSE(f.cells.empty());
    // At the threads the figures were measured with: the peak holds per-thread scratch (a
    // machine with other cores, or OMP_NUM_THREADS=1 under emulation, would budget another).
    const auto r = run_molt(fmt::format(
        "bench switch --ladder {} --from {} --to {} --contexts 256 --policies molt reprefill "
        "--repeat 1 --threads {} --json",
        (root() / f.provenance.at("manifest").get<std::string>()).string(),
        f.provenance.at("from").get<std::string>(), f.provenance.at("to").get<std::string>(),
        f.cells.front().at("threads").get<int>()));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const Figures now = parse("now", r.output);
    ASSERT_EQ(now.cells.size(), 2u) << r.output;
    for (const json& c : now.cells) {
      const auto was = std::find_if(f.cells.begin(), f.cells.end(), [&](const json& w) {
        return w.at("context") == c.at("context") && w.at("requested") == c.at("requested");
      });
      ASSERT_NE(was, f.cells.end()) << c.dump();
      EXPECT_EQ(c.at("policy"), was->at("policy"));
      EXPECT_NEAR(c.at("flops_saved").get<double>(), was->at("flops_saved").get<double>(), 2e-3)
          << c.at("requested");
      EXPECT_NEAR(c.at("peak_mib").get<double>(), was->at("peak_mib").get<double>(), 2e-3)
          << c.at("requested");
    }
  }
}

TEST(DocsTrace, SwitchingPageIsGeneratedFromItsJson) {
  test::TempDir t;
  const auto r = run_molt("bench switch-report --in " + figures().string() + " --out " +
                          (t / "SWITCHING.md").string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string want = test::read_file(t / "SWITCHING.md"),
                    have = test::read_file(root() / "docs/SWITCHING.md");
  // Line by line, so that a failure names the first line that differs.
  std::istringstream ws(want), hs(have);
  std::string w, h;
  for (int line = 1; want != have; ++line) {
    const bool more_w = static_cast<bool>(std::getline(ws, w));
    const bool more_h = static_cast<bool>(std::getline(hs, h));
    ASSERT_EQ(h, w) << "docs/SWITCHING.md line " << line
                    << " is not what docs/figures/switch generates: run scripts/switch-figures.sh "
                       "(or molt bench switch-report) and commit both";
    ASSERT_TRUE(more_w || more_h)
        << "docs/SWITCHING.md differs from what its JSON generates in its line ends";
  }
}

}  // namespace
}  // namespace molt
