// docs/PERFORMANCE.md traces to its JSON, and the JSON to the committed tiny ladder and to the
// one FLOP count (issue 24): the page is what docs/figures/performance generates, byte for byte;
// every SHA-256 recorded for the tiny ladder is the committed file's; every prefill GFLOP/s is
// runtime/metrics' count for the recorded geometry over the recorded seconds (an inflated count,
// e.g. the lm_head over every position, fails here). MOLT_TRACE_ROOT stands in for the source
// tree (a broken copy, to see these fail).
#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <sstream>

#include "molt/model/synth.h"
#include "molt/runtime/metrics.h"
#include "molt/transfer/map_file.h"
#include "test_util.h"

namespace molt {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

fs::path root() {
  return test::trace_root();
}
fs::path figures() {
  return root() / "docs" / "figures" / "performance";
}

std::vector<json> read_jsonl(const fs::path& p) {
  std::vector<json> out;
  std::istringstream in(test::read_file(p));
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) out.push_back(json::parse(line));
  }
  return out;
}

// The cells of column `column` in the table under heading `section` of a Markdown page.
std::vector<std::string> table_column(const std::string& page, const std::string& section,
                                      const std::string& column) {
  std::istringstream in(page);
  std::string line;
  auto skip_to = [&](const std::string& prefix) {
    while (std::getline(in, line)) {
      if (line.starts_with(prefix)) return true;
    }
    return false;
  };
  if (!skip_to(section) || !skip_to("|")) return {};
  auto cells = [](const std::string& row) {
    std::vector<std::string> out;
    std::istringstream r(row.substr(1));
    for (std::string c; std::getline(r, c, '|');) {
      const size_t a = c.find_first_not_of(' '), b = c.find_last_not_of(' ');
      out.push_back(a == std::string::npos ? "" : c.substr(a, b - a + 1));
    }
    return out;
  };
  const std::vector<std::string> head = cells(line);
  const auto at = std::find(head.begin(), head.end(), column);
  if (at == head.end()) return {};
  std::vector<std::string> out;
  std::getline(in, line);  // |---|
  while (std::getline(in, line) && line.starts_with("|")) {
    out.push_back(cells(line).at(static_cast<size_t>(at - head.begin())));
  }
  return out;
}

TEST(DocsTrace, PerformancePageIsGeneratedFromItsJson) {
  test::TempDir t;
  const auto r = test::run_molt("bench perf-report --in " + figures().string() + " --out " +
                                (t / "PERFORMANCE.md").string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string want = test::read_file(t / "PERFORMANCE.md"),
                    have = test::read_file(root() / "docs/PERFORMANCE.md");
  // Line by line, so that a failure names the first line that differs.
  std::istringstream ws(want), hs(have);
  std::string w, h;
  for (int line = 1; want != have; ++line) {
    const bool more_w = static_cast<bool>(std::getline(ws, w));
    const bool more_h = static_cast<bool>(std::getline(hs, h));
    ASSERT_EQ(h, w) << "docs/PERFORMANCE.md line " << line
                    << " is not what docs/figures/performance generates: run "
                       "scripts/performance.sh (or molt bench perf-report) and commit both";
    ASSERT_TRUE(more_w || more_h)
        << "docs/PERFORMANCE.md differs from what its JSON generates in its line ends";
  }
}

TEST(DocsTrace, PerformanceNllRecordsTheCommittedTinyLadder) {
  const json run = json::parse(test::read_file(figures() / "run.json"));
  const json& files = run.at("tiny_ladder");
  ASSERT_FALSE(files.empty());
  for (const auto& [name, sha] : files.items()) {
    SCOPED_TRACE(name);
    ASSERT_TRUE(fs::path(name).is_relative()) << "not a committed file";
    const fs::path p = root() / name;
    ASSERT_TRUE(fs::exists(p)) << p;
    EXPECT_EQ(sha256_file(p), sha.get<std::string>()) << name << " changed since measured";
  }
  // Every row read a recorded text, and every committed-weights row recorded rung files.
  const std::vector<json> nll = read_jsonl(figures() / "nll.jsonl");
  ASSERT_FALSE(nll.empty());
  for (const json& d : nll) {
    EXPECT_TRUE(files.contains(d.at("file").get<std::string>())) << d.at("file");
    if (!d.at("quantization").is_null()) continue;
    const std::string model = d.at("model").get<std::string>();
    for (const char* f : {"config.json", "model.safetensors"}) {
      EXPECT_TRUE(files.contains(model + "/" + f)) << model << "/" << f << " not recorded";
    }
  }
}

TEST(DocsTrace, PrefillGflopsAreTheMetricsCountOverTheRecordedTime) {
  const json run = json::parse(test::read_file(figures() / "run.json"));
  const std::vector<json> dec = read_jsonl(figures() / "decode.jsonl");
  ASSERT_FALSE(dec.empty());
  const std::vector<std::string> cells =
      table_column(test::read_file(root() / "docs/PERFORMANCE.md"), "## Prefill", "GFLOP/s");
  ASSERT_EQ(cells.size(), dec.size()) << "the page's prefill table has one row per decode line";
  for (size_t i = 0; i < dec.size(); ++i) {
    const json& d = dec[i];
    const std::string geometry = d.at("geometry").get<std::string>();
    SCOPED_TRACE(fmt::format("decode.jsonl line {} ({})", i + 1, d.at("checkpoint").dump()));
    // The geometry measured is the named one, and the checkpoint is one run.json says it made.
    const ModelConfig c = qwen25_geometry(geometry);
    const json& g = d.at("config");
    EXPECT_EQ(g.at("hidden_size").get<int64_t>(), c.hidden_size);
    EXPECT_EQ(g.at("intermediate_size").get<int64_t>(), c.intermediate_size);
    EXPECT_EQ(g.at("num_hidden_layers").get<int64_t>(), c.num_hidden_layers);
    EXPECT_EQ(g.at("num_attention_heads").get<int64_t>(), c.num_attention_heads);
    EXPECT_EQ(g.at("num_key_value_heads").get<int64_t>(), c.num_key_value_heads);
    EXPECT_EQ(g.at("head_dim").get<int64_t>(), c.head_dim);
    EXPECT_EQ(g.at("vocab_size").get<int64_t>(), c.vocab_size);
    const json& made = run.at("checkpoints").at(d.at("checkpoint").get<std::string>());
    EXPECT_EQ(made.at("geometry").get<std::string>(), geometry);
    EXPECT_TRUE(d.at("sha256").contains("config.json")) << "no checksum of what was loaded";

    const FlopCount want = prefill_flop_count(c, d.at("prompt_tokens").get<int64_t>());
    const double flops = d.at("prefill_flops").get<double>(), s = d.at("prefill_s").get<double>();
    EXPECT_NEAR(flops, want.total(), 1e-9 * want.total()) << "not runtime/metrics' count";
    EXPECT_NEAR(d.at("prefill_flops_lm_head").get<double>(), want.lm_head, 1e-9 * want.lm_head)
        << "the lm_head counts once, for the last position";
    const double gflop_s = want.total() / s / 1e9;
    EXPECT_NEAR(d.at("prefill_gflop_s").get<double>(), gflop_s, 1e-9 * gflop_s);
    EXPECT_EQ(cells[i], fmt::format("**{:.1f}**", gflop_s)) << "the page's GFLOP/s cell";
  }
}

}  // namespace
}  // namespace molt
