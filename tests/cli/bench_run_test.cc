// molt bench run --quick end to end: results.json, and a page whose every number is one of the
// JSON's (issue "molt bench run": no number typed by hand), regenerated from the JSON alone.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cctype>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "molt/transfer/map_file.h"
#include "test_util.h"

namespace molt {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using test::run_molt;

const std::string kSrc = MOLT_SOURCE_DIR;

// The numbers written in `text`: digit runs (with a fraction) that are not part of a word, a
// hex hash, a date's later fields or a file name; signs are ignored.
std::vector<std::string> numbers_in(const std::string& text) {
  std::vector<std::string> out;
  auto word = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; };
  for (size_t i = 0; i < text.size();) {
    const char prev = i == 0 ? ' ' : text[i - 1];
    // A '-' right after a word joins (a date, "SHA-256"); after anything else it is a sign.
    const bool joined = prev == '-' && i >= 2 && word(text[i - 2]);
    if (!std::isdigit(static_cast<unsigned char>(text[i])) || word(prev) || prev == '.' || joined) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < text.size() && std::isdigit(static_cast<unsigned char>(text[j]))) ++j;
    if (j + 1 < text.size() && text[j] == '.' &&
        std::isdigit(static_cast<unsigned char>(text[j + 1]))) {
      ++j;
      while (j < text.size() && std::isdigit(static_cast<unsigned char>(text[j]))) ++j;
    }
    if (j == text.size() || !word(text[j])) out.push_back(text.substr(i, j - i));
    i = j;
  }
  return out;
}

// Every number the JSON holds, as it would print with 0..4 decimals (numbers inside strings
// such as trace descriptions, too).
std::set<std::string> printed_forms(const json& j) {
  std::set<std::string> out;
  std::vector<const json*> todo = {&j};
  while (!todo.empty()) {
    const json* v = todo.back();
    todo.pop_back();
    if (v->is_structured()) {
      for (const json& c : *v) todo.push_back(&c);
    } else if (v->is_number()) {
      const double x = std::abs(v->get<double>());
      for (int d = 0; d <= 4; ++d) out.insert(fmt::format("{:.{}f}", x, d));
    } else if (v->is_string()) {
      for (const std::string& n : numbers_in(v->get<std::string>())) out.insert(n);
    }
  }
  return out;
}

// The text a reader sees in the HTML: no style, no SVG (its coordinates), no tags.
std::string visible_text(std::string h) {
  for (const auto& [open, close] : {std::pair{"<style", "</style>"}, std::pair{"<svg", "</svg>"}}) {
    for (size_t a; (a = h.find(open)) != std::string::npos;) {
      const size_t b = h.find(close, a);
      h.erase(a, b == std::string::npos ? std::string::npos : b - a + std::string(close).size());
    }
  }
  std::string out;
  bool tag = false;
  for (char c : h) {
    if (c == '<') {
      tag = true;
      out += ' ';
    } else if (c == '>') {
      tag = false;
    } else if (!tag) {
      out += c;
    }
  }
  return out;
}

// `molt bench run FLAGS` on the tiny ladder, its prompts and the traces folder, into `out`.
test::CommandResult run_on_tiny_ladder(const std::string& flags, const fs::path& out) {
  return run_molt(fmt::format(
      "bench run {2} --ladder {0}/models/tiny-ladder/ladder.json --text "
      "{0}/models/tiny-ladder/data/test.txt --needles {0}/models/tiny-ladder/data/needles.jsonl "
      "--traces-dir {0}/traces --threads 1 --out {1}",
      kSrc, out.string(), flags));
}

TEST(BenchRun, QuickRunPageNumbersAreTheJsons) {
  test::TempDir t;
  // Under qemu (every float operation emulated) the real geometries' 0.5B checkpoints alone would
  // take most of an hour, and the quick run's tiny-ladder sections more than another: there the
  // smoke run (2 prompts, 1 window, 1 needle per set) under one trace, without them.
  const bool emulated = test::under_emulation();
  const size_t traces = emulated ? 1 : 2, prompts = emulated ? 2 : 4;
  const int needles = emulated ? 1 : 4;
  const auto r = run_on_tiny_ladder(
      emulated ? fmt::format("--smoke --no-real --trace {}/traces/spike_mid_answer.json", kSrc)
               : fmt::format("--quick --real-dir {}/real", t.path().string()),
      t.path());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const json results = json::parse(test::read_file(t / "results.json"));
  const json& cond = results.at("conditions");
  ASSERT_EQ(cond.at("prompts").size(), prompts);
  EXPECT_EQ(results.at("smoke").get<bool>(), emulated);
  ASSERT_EQ(cond.at("traces").size(), traces);
  // 7 policies and the ablations (4, and the RoPE sandwich's and the diagonal re-alignment's
  // where their maps are committed), 2 traces, 4 prompts (emulated: 1 trace, 2 prompts).
  const size_t ablations = cond.at("ablations").size();
  ASSERT_GE(ablations, 4u);
  ASSERT_EQ(cond.at("runs").size(), (7 + ablations) * traces * prompts);
  int ablation_seams = 0;
  for (const json& run : cond.at("runs")) {
    SCOPED_TRACE(run.at("condition").get<std::string>() + " " + run.at("trace").get<std::string>());
    // An ablation's maps are really carried (a refused map would re-read and hide it).
    if (run.at("condition") != run.at("policy")) {
      for (const json& seam : run.at("seams")) {
        if (seam.at("to") == "m" || seam.at("to") == "s") {
          EXPECT_EQ(seam.at("policy"), "molt") << seam.at("note");
          ++ablation_seams;
        }
      }
    }
    EXPECT_EQ(run.at("lost"), 0);        // no token lost ...
    EXPECT_EQ(run.at("duplicated"), 0);  // ... or repeated at a seam
    // hold is the only condition the OS kills; every other finishes its answer.
    EXPECT_EQ(run.at("killed").get<bool>(), run.at("policy") == "hold");
    if (run.at("policy") != "hold") {
      EXPECT_EQ(run.at("tokens"), cond.at("max_tokens"));
    }
  }
  EXPECT_GT(ablation_seams, 0);
  // Tenants: the scheduler's standard scenario ends with everyone finished, nobody killed.
  EXPECT_EQ(results.at("tenants").at("summary").at("killed"), 0);
  EXPECT_TRUE(results.at("tenants").at("summary").at("all_finished").get<bool>());
  // Switch cost: one route, one context, every policy warm and cold, through migrate().
  const json& sw = results.at("switch");
  ASSERT_EQ(sw.at("rows").size(), 4u * 2);
  for (const json& row : sw.at("rows")) {
    SCOPED_TRACE(row.dump());
    EXPECT_EQ(row.at("ran"), row.at("policy"));  // the route's map carried it, nothing fell back
    EXPECT_GT(row.at("ms").get<double>(), 0.0);
    if (row.at("policy") == "molt") {
      EXPECT_GT(row.at("flops_saved").get<double>(), 0.0);
    } else {
      EXPECT_EQ(row.at("flops_saved").get<double>(), 0.0);
    }
  }
  // KV cache precision: every rung, every row type; f16 is half the bytes of f32 and reads the
  // text within two tenths of a percent of its NLL.
  const json& kv = results.at("kv");
  ASSERT_EQ(kv.at("rungs").size(), 4u);
  for (const json& row : kv.at("rungs")) {
    SCOPED_TRACE(row.dump());
    EXPECT_EQ(row.at("bytes_ratio").at("f16").get<double>(), 0.5);
    EXPECT_LT(row.at("bytes_ratio").at("int8").get<double>(), 0.3);
    EXPECT_LE(std::abs(row.at("nll_change_pct").at("f16").get<double>()), 0.2);
  }
  ASSERT_EQ(kv.at("needles").size(), 1u);
  EXPECT_EQ(kv.at("needles")[0].at("count"), needles);
  EXPECT_FALSE(results.at("inputs").at("sha256").empty());
  // Transfer per route: every route with a map of its own, the map beside both floors, and
  // needles with the switch right before the answer.
  const json& tr = results.at("transfer");
  ASSERT_EQ(tr.at("routes").size(), 4u);
  for (const json& route : tr.at("routes")) {
    SCOPED_TRACE(route.at("from").get<std::string>() + " → " + route.at("to").get<std::string>());
    std::set<std::string> names;
    for (const json& c : route.at("eval").at("conditions")) names.insert(c.at("condition"));
    EXPECT_TRUE(names.count("zero cache"));
    EXPECT_TRUE(names.count("token-identity cache"));
    const json& first = route.at("eval").at("conditions").at(0);
    EXPECT_EQ(first.at("condition").get<std::string>().rfind("map (", 0), 0u) << first.dump();
    EXPECT_TRUE(first.contains("gap_vs_token_identity"));
    EXPECT_TRUE(route.at("residuals").contains("layers"));
    ASSERT_EQ(route.at("needles").size(), 1u);
    EXPECT_EQ(route.at("needles")[0].at("count"), needles);
    EXPECT_EQ(route.at("needles")[0].at("context"), 700);
  }
  // The real geometries at --quick: Qwen2.5-0.5B at bf16, int8, 4-bit and 4-bit by 8 rows,
  // each beside its triad.
  if (!emulated) {
    const json& real = results.at("real");
    ASSERT_EQ(real.at("speed").size(), 4u);
    for (const json& s : real.at("speed")) {
      SCOPED_TRACE(s.dump());
      EXPECT_GT(s.at("decode_tok_s").get<double>(), 0.0);
      EXPECT_GT(s.at("x_standalone_triad").get<double>(), 0.0);
      // 24 layers × K and V × 2 KV heads × 64 × 2 bytes (the default f16 cache).
      EXPECT_EQ(s.at("footprint").at("kv_bytes_per_token"), 24 * 2 * 2 * 64 * 2);
    }
    const auto bytes = [&](int i) {
      return real.at("speed")[i].at("weight_bytes_per_token").get<double>();
    };
    EXPECT_LT(bytes(1), bytes(0) * 0.55);  // int8: one byte a weight and a scale per row
    EXPECT_LT(bytes(2), bytes(0) / 3);     // 4-bit
    EXPECT_EQ(bytes(3), bytes(2));         // the same weights, rows interleaved
    EXPECT_EQ(real.at("checkpoints").size(), 4u);
  }

  const std::set<std::string> known = printed_forms(results);
  const std::string md = test::read_file(t / "RESULTS.md");
  const std::string html = visible_text(test::read_file(t / "results.html"));
  int checked = 0;
  for (const auto& [page, text] : {std::pair{"RESULTS.md", md}, std::pair{"results.html", html}}) {
    for (const std::string& n : numbers_in(text)) {
      EXPECT_TRUE(known.count(n)) << page << ": " << n << " is no number of results.json";
      ++checked;
    }
  }
  EXPECT_GT(checked, 300);  // the tables are there

  // The page links its plots, which exist, and comes from the JSON alone.
  for (const json& tr : cond.at("traces")) {
    const std::string svg = "results/conditions-" + tr.at("name").get<std::string>() + ".svg";
    EXPECT_NE(md.find("](" + svg + ")"), std::string::npos) << svg;
    EXPECT_TRUE(fs::exists(t / svg)) << svg;
  }
  test::TempDir again;
  fs::copy_file(t / "results.json", again / "results.json");
  ASSERT_EQ(run_molt("bench results --in " + again.path().string()).exit_code, 0);
  EXPECT_EQ(test::read_file(again / "RESULTS.md"), md);
  EXPECT_EQ(test::read_file(again / "results.html"), test::read_file(t / "results.html"));
}

TEST(BenchRun, SmokeRunIsTheQuickRunAtItsSmallestAndSaysSo) {
  // Under emulation QuickRunPageNumbersAreTheJsons runs exactly this.
  if (test::under_emulation()) GTEST_SKIP() << "the quick run's test is the smoke run here";
  test::TempDir t;
  const auto r = run_on_tiny_ladder(
      fmt::format("--smoke --no-real --trace {}/traces/spike_mid_answer.json", kSrc), t.path());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const json results = json::parse(test::read_file(t / "results.json"));
  EXPECT_TRUE(results.at("smoke").get<bool>());
  EXPECT_TRUE(results.at("quick").get<bool>());
  EXPECT_EQ(results.at("conditions").at("prompts").size(), 2u);
  EXPECT_EQ(results.at("kv").at("windows"), 1);
  EXPECT_EQ(results.at("kv").at("needles")[0].at("count"), 1);
  const json& tr = results.at("transfer");
  EXPECT_EQ(tr.at("windows"), 1);
  EXPECT_EQ(tr.at("prefix").get<int64_t>() + tr.at("continuation").get<int64_t>(), 512);
  for (const json& route : tr.at("routes")) {
    EXPECT_EQ(route.at("eval").at("windows"), 1);
    EXPECT_EQ(route.at("needles")[0].at("count"), 1);
  }
  // The page names the run's kind and warns that its figures check the pipeline only.
  const std::string md = test::read_file(t / "RESULTS.md");
  EXPECT_NE(md.find("smoke"), std::string::npos);
  EXPECT_NE(md.find("not the method"), std::string::npos);
}

TEST(BenchRun, CommittedPageIsGeneratedFromItsJsonAndTheCommittedFiles) {
  // docs/results: the full run's page, regenerated from its JSON, and the files it measured.
  const fs::path dir = test::trace_root() / "docs" / "results";
  const json results = json::parse(test::read_file(dir / "results.json"));
  EXPECT_FALSE(results.at("quick").get<bool>()) << "docs/results holds a --quick run";
  test::TempDir t;
  fs::copy_file(dir / "results.json", t / "results.json");
  ASSERT_EQ(run_molt("bench results --in " + t.path().string()).exit_code, 0);
  const std::string fix = "run molt bench run --out docs/results on a clean tree and commit it";
  EXPECT_EQ(test::read_file(t / "RESULTS.md"), test::read_file(dir / "RESULTS.md")) << fix;
  EXPECT_EQ(test::read_file(t / "results.html"), test::read_file(dir / "results.html")) << fix;
  for (const auto& e : fs::directory_iterator(t / "results")) {
    EXPECT_EQ(test::read_file(e.path()), test::read_file(dir / "results" / e.path().filename()))
        << e.path().filename() << ": " << fix;
  }
  // Every file it read, as committed now: the ladder's, the prompts' and the traces'.
  const json& in = results.at("inputs");
  const fs::path ladder = test::trace_root() / in.at("ladder").get<std::string>();
  int checked = 0;
  for (const auto& [name, sha] : in.at("sha256").items()) {
    fs::path p = ladder.parent_path() / name;
    if (!fs::exists(p)) p = ladder.parent_path() / "data" / name;
    if (!fs::exists(p)) p = test::trace_root() / "traces" / name;
    ASSERT_TRUE(fs::exists(p)) << name;
    EXPECT_EQ(sha256_file(p), sha.get<std::string>()) << name << " changed since measured: " << fix;
    ++checked;
  }
  EXPECT_GT(checked, 10);
}

TEST(BenchRun, BadInputsAreClearErrors) {
  auto r = run_molt("bench run --quick --ladder /nonexistent/ladder.json --out /tmp/x");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("/nonexistent/ladder.json"), std::string::npos) << r.output;
  r =
      run_molt(fmt::format("bench run --quick --ladder {0}/models/tiny-ladder/ladder.json "
                           "--trace /nonexistent/trace.json --out /tmp/x",
                           kSrc));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("/nonexistent/trace.json"), std::string::npos) << r.output;
  test::TempDir t;
  test::write_file(t / "results.json", "{\"provenance\": {}}");
  r = run_molt("bench results --in " + t.path().string());
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("missing field"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace molt
