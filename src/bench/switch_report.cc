#include "molt/bench/switch_report.h"

#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <vector>

#include "molt/common/error.h"
#include "molt/formats/hf_config.h"
#include "molt/transfer/map_file.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace molt {
namespace {

// The files of `dir` a load reads (all of them for a map folder), by name relative to `base`.
void add_files(json& out, const fs::path& base, const fs::path& dir, bool all) {
  for (const auto& e : fs::directory_iterator(dir)) {
    const fs::path& p = e.path();
    if (!e.is_regular_file()) continue;
    if (!all && p.filename() != "config.json" && p.extension() != ".safetensors") continue;
    const fs::path name = base.empty() ? p : p.lexically_relative(base);
    out[name.generic_string()] = sha256_file(p);
  }
}

struct Figures {
  json provenance;
  std::vector<json> cells;  // switch_cost records, in file order
};

Figures read_jsonl(const fs::path& p) {
  std::ifstream f(p);
  if (!f) fail("switch-report: cannot read {}", p.string());
  Figures out;
  for (std::string line; std::getline(f, line);) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    json j = json::parse(line);
    if (j.value("event", "") == "provenance") {
      out.provenance = std::move(j);
    } else {
      out.cells.push_back(std::move(j));
    }
  }
  if (out.cells.empty()) fail("switch-report: {} has no switch_cost records", p.string());
  return out;
}

double num(const json& j, const char* key) {
  return j.at(key).get<double>();
}

std::string ratio_lines(const std::vector<json>& cells) {
  std::map<int64_t, std::map<std::string, double>> ms;  // context → policy → ms
  for (const json& c : cells)
    ms[c.at("context").get<int64_t>()][c.at("requested").get<std::string>()] = num(c, "ms");
  std::string out;
  for (const auto& [ctx, by] : ms) {
    if (!by.contains("molt") || !by.contains("reprefill")) continue;
    const double m = by.at("molt"), r = by.at("reprefill");
    out += fmt::format("- {} tokens: molt {:.1f} ms vs re-prefill {:.1f} ms ({:.2f}× {})\n", ctx, m,
                       r, r / m, m < r ? "faster" : "slower");
  }
  return out;
}

std::string table(const std::vector<json>& cells) {
  std::string out =
      "| context | policy | switch ms | load ms | carry ms | first decode ms | FLOPs saved | "
      "FLOPs deferred | peak MiB |\n|---|---|---|---|---|---|---|---|---|\n";
  for (const json& c : cells) {
    std::string policy = c.at("policy");
    if (c.at("requested") != c.at("policy"))
      policy += fmt::format(" (asked {})", c.at("requested").get<std::string>());
    const double deferred = c.value("deferred_flops", 0.0);
    out += fmt::format("| {} | {} | {:.1f} | {:.1f} | {:.1f} | {:.1f} | {:.1f}% | {} | {:.1f} |\n",
                       c.at("context").get<int64_t>(), policy, num(c, "ms"), num(c, "load_ms"),
                       num(c, "carry_ms"), num(c, "first_decode_ms"), 100 * num(c, "flops_saved"),
                       deferred > 0 ? fmt::format("{:.2f} GFLOP", deferred / 1e9) : "—",
                       num(c, "peak_mib"));
  }
  return out;
}

std::string provenance_line(const json& p) {
  if (p.is_null()) return "Measured on: no provenance recorded.\n";
  return fmt::format("Measured on `{}`: {} files, SHA-256 in the JSON's provenance line.\n",
                     p.at("manifest").get<std::string>(), p.at("sha256").size());
}

std::string section(const std::string& title, const Figures& f) {
  return fmt::format("## {}\n\n{}\n{}\n{}\n", title, provenance_line(f.provenance),
                     ratio_lines(f.cells), table(f.cells));
}

std::vector<fs::path> glob(const fs::path& dir, const std::string& prefix, const std::string& ext) {
  std::vector<fs::path> out;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name.starts_with(prefix) && e.path().extension() == ext) out.push_back(e.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

json switch_provenance(const Ladder& ladder, int from, int to) {
  const fs::path manifest = ladder.manifest().file, base = manifest.parent_path();
  json files = json::object();
  files[manifest.filename().string()] = sha256_file(manifest);
  add_files(files, base, ladder.rung(from).path(), false);
  add_files(files, base, ladder.rung(to).path(), false);
  const ManifestRoute* route = ladder.route(from, to);
  if (route != nullptr && route->maps_present()) add_files(files, base, route->maps, true);
  return {{"event", "provenance"},
          {"ladder", ladder.name()},
          {"manifest", manifest.generic_string()},
          {"from", ladder.rung(from).name()},
          {"to", ladder.rung(to).name()},
          {"sha256", files}};
}

std::string switch_report(const fs::path& dir) {
  const json run = read_json_file(dir / "run.json");
  const json &b0 = run.at("bandwidth_before"), &b1 = run.at("bandwidth_after");
  std::string md = fmt::format(
      "# Switch cost: molt vs re-prefill\n\n"
      "Generated by `scripts/switch-figures.sh` (`molt bench switch-report`) from\n"
      "`docs/figures/switch/*.json*`; nothing here is typed by hand, and\n"
      "`tests/cli/docs_trace_test.cc` fails when this page, its JSON and the committed ladder\n"
      "disagree. Switch ms = wall time from the budget cut to the receiver's first logits\n"
      "(load + carry + first decode), median of the runs; FLOPs saved = the share of the\n"
      "receiver's re-prefill not spent before it resumes. heal saves none: it carries the cache\n"
      "like molt, then re-runs every layer the map did not run natively over every carried\n"
      "position in the decode steps after the seam; FLOPs deferred is that share of the\n"
      "re-prefill. Peak MiB = weights + caches resident at the\n"
      "seam, by the runtime's accounting.\n\n"
      "FLOPs and peak MiB follow from the geometry and are the same on any machine; the ms are\n"
      "wall time on a machine that was not quiet: load average {:.2f} when the run started and\n"
      "{:.2f} when it ended ({} cores); STREAM triad {:.1f} GB/s before and {:.1f} GB/s after, on\n"
      "{} threads.\n\n"
      "Commit {}{}; {} {}; {}.\n\n",
      num(run, "load_before"), num(run, "load_after"), run.at("nproc").get<int>(),
      num(b0, "triad_gb_s"), num(b1, "triad_gb_s"), b0.at("threads").get<int>(),
      run.at("commit").get<std::string>(),
      run.at("dirty").get<bool>() ? " with uncommitted changes in the tree" : " (clean tree)",
      run.at("machine").get<std::string>(), run.at("cpu").get<std::string>(),
      run.at("molt").get<std::string>());
  for (const fs::path& p : glob(dir, "tiny-", ".jsonl")) {
    const Figures f = read_jsonl(p);
    const json& c = f.cells.front();
    md += section(fmt::format("Tiny ladder {} → {} ({} threads)", c.at("from").get<std::string>(),
                              c.at("to").get<std::string>(), c.at("threads").get<int>()),
                  f);
  }
  const fs::path transfer = dir / "real-transfer-1024.json";
  const json t = fs::exists(transfer) ? read_json_file(transfer) : json();
  const std::string k =
      t.is_null() ? "" : fmt::format(", k = {} shape-only map", t.at("k").get<int>());
  for (const fs::path& p : glob(dir, "real-", ".jsonl")) {
    md += section(fmt::format("Qwen2.5 1.5B → 0.5B geometry (synthetic bf16 weights{})", k),
                  read_jsonl(p));
  }
  if (!t.is_null()) {
    md += fmt::format(
        "## Map application alone (`molt bench transfer`, 1.5B → 0.5B, {} tokens)\n\n"
        "- k = {} map: {:.0f} ms ({:.1f} GFLOP) vs the receiver re-reading the tokens {:.0f} ms "
        "({:.1f} GFLOP): ratio {:.3f} (target ≤ 0.1)\n\n",
        t.at("context").get<int64_t>(), t.at("k").get<int>(), num(t, "apply_ms"),
        num(t, "map_gflop"), num(t, "reprefill_ms"), num(t, "reprefill_gflop"), num(t, "ratio"));
  }
  md.pop_back();  // one newline at the end
  return md;
}

}  // namespace molt
