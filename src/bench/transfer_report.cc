#include "molt/bench/transfer_report.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

#include "molt/bench/line_chart.h"
#include "molt/bench/performance_report.h"
#include "molt/common/error.h"
#include "molt/formats/hf_config.h"
#include "molt/transfer/map_file.h"

namespace fs = std::filesystem;
using nlohmann::json;
using nlohmann::ordered_json;

namespace molt {
namespace {

constexpr const char* kInt8 = "-int8";  // a precision rung's name: its parent's plus this

double num(const json& j, const char* key) {
  return j.at(key).get<double>();
}

// 38400 → "38,400", as the page has always printed counts.
std::string grouped(int64_t n) {
  std::string s = std::to_string(n);
  for (int i = static_cast<int>(s.size()) - 3; i > (n < 0 ? 1 : 0); i -= 3) s.insert(i, ",");
  return s;
}

// The run files of a route, by kind; a run that routes.sh stubbed ({"conditions": []}) counts
// as none.
struct Runs {
  json transfer, depth, reference;
  json embed;  // the route's map with the embeddings as token features (no native layer)
  std::vector<std::pair<int64_t, json>> needles;  // by context
  std::vector<std::pair<int64_t, json>> heal;     // `molt transfer heal` runs, by context
};

// maps/eval/<name>.<kind>-<context>.json, by context.
std::vector<std::pair<int64_t, json>> runs_by_context(const fs::path& eval,
                                                      const std::string& prefix) {
  std::vector<std::pair<int64_t, json>> out;
  for (const auto& e : fs::directory_iterator(eval)) {
    const std::string f = e.path().filename().string();
    if (!f.starts_with(prefix) || e.path().extension() != ".json") continue;
    const std::string ctx = f.substr(prefix.size(), f.size() - prefix.size() - 5);
    if (ctx.empty() ||
        !std::all_of(ctx.begin(), ctx.end(), [](char c) { return c >= '0' && c <= '9'; }))
      continue;  // not <name>.<kind>-<context>.json: no run of routes.sh
    out.emplace_back(std::stoll(ctx), read_json_file(e.path()));
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  return out;
}

Runs read_runs(const fs::path& eval, const std::string& name) {
  Runs r{read_json_file(eval / (name + ".transfer.json")), json(), json(), json(), {}, {}};
  const fs::path depth = eval / (name + ".depth-remap.json");
  if (fs::exists(depth)) r.depth = read_json_file(depth);
  const fs::path reference = eval / (name + ".reference-ridge.json");
  if (fs::exists(reference)) r.reference = read_json_file(reference);
  const fs::path embed = eval / (name + ".embedding-features.json");
  if (fs::exists(embed)) r.embed = read_json_file(embed);
  const std::string prefix = name + ".needle-";
  r.needles = runs_by_context(eval, prefix);
  r.heal = runs_by_context(eval, name + ".heal-");
  if (r.needles.empty()) fail("transfer-report: {} has no {}*.json", eval.string(), prefix);
  return r;
}

// A paragraph broken into lines of at most 92 columns (code points), at spaces.
std::string wrapped(const std::string& text) {
  constexpr size_t kWidth = 92;
  auto width = [](const std::string& s) {
    return static_cast<size_t>(std::count_if(
        s.begin(), s.end(), [](char c) { return (static_cast<unsigned char>(c) & 0xC0) != 0x80; }));
  };
  std::istringstream in(text);
  std::string out, line;
  for (std::string word; in >> word;) {
    if (!line.empty() && width(line) + 1 + width(word) > kWidth) {
      out += line + "\n";
      line.clear();
    }
    line += (line.empty() ? "" : " ") + word;
  }
  return out + line + "\n";
}

bool is_run(const json& j) {
  return j.is_object() && j.contains("conditions") && !j.at("conditions").empty();
}

// Where the token-identity floor's means came from (never the evaluation text).
std::string floor_line(const json& ev, const std::string& run) {
  if (!ev.contains("token_identity_floor") || !ev.at("token_identity_floor").is_object()) {
    fail(
        "transfer-report: {} does not say where its token-identity floor came from (re-run "
        "molt transfer eval)",
        run);
  }
  const json& f = ev.at("token_identity_floor");
  const json& c = f.at("calibration");
  const std::string where =
      f.contains("file") && !f.at("file").is_null()
          ? fmt::format("`{}` SHA-256 {}…",
                        fs::path(f.at("file").get<std::string>()).filename().string(),
                        f.at("sha256").get<std::string>().substr(0, 12))
          : std::string("fitted in memory");
  return fmt::format(
      "- token-identity floor: the receiver's mean K/V per token id over `{}` ({} windows × {} "
      "tokens, a row every {} positions: {} rows, {} ids; {}), not over the evaluation text\n",
      f.at("corpus").get<std::string>(), c.at("windows").get<int64_t>(),
      c.at("seq_len").get<int64_t>(), c.at("stride").get<int64_t>(),
      grouped(c.at("rows").get<int64_t>()), grouped(c.at("distinct_tokens").get<int64_t>()), where);
}

std::string map_lines(const fs::path& dir) {
  const MapData map = read_map_dir(dir);
  const json& i = map.info;
  const json& cal = i.at("calibration");
  std::string md =
      fmt::format("- map: {}, k = {} ({}), λ = {}; calibration {} windows of {} tokens\n",
                  map.method, i.at("k").dump(), i.at("k_chosen_by").get<std::string>(),
                  i.at("lambda").dump(), cal.at("train_windows").dump(), cal.at("seq_len").dump());
  if (map.features.native_layers > 0) {
    md += fmt::format(
        "- native layers: the receiver's first {} layer(s) run natively over the carried tokens "
        "(their K/V are its own; {:.0f}% of a re-read's layers)\n",
        map.features.native_layers,
        100.0 * static_cast<double>(map.features.native_layers) /
            static_cast<double>(map.receiver.geometry.n_layers));
  }
  if (map.features.embed_tokens > 0) {
    md += fmt::format(
        "- token features: the receiver's RMS-normalised {} of the token and the {} before it, "
        "{} more inputs per layer map\n",
        map.features.native_layers > 0
            ? fmt::format("hidden states entering layer {}", map.features.native_layers)
            : std::string("embeddings"),
        map.features.embed_tokens - 1,
        grouped(map.features.embed_tokens * map.receiver.geometry.hidden_size));
  }
  if (map.features.joint_kv) {
    md +=
        "- sender K and V together: each K and V map reads the keys and the values of its "
        "source layers\n";
  }
  if (!i.contains("residuals") || !i.at("residuals").contains("total")) return md;
  std::vector<std::string> parts;
  for (const auto& [k, v] : i.at("residuals").at("total").items()) {
    if (v.is_object() && v.contains("rel_rms")) {
      parts.push_back(
          fmt::format("{} {:.3f} (centred {:.3f})", k, num(v, "rel_rms"), num(v, "centred")));
    }
  }
  if (!parts.empty()) {
    md += fmt::format("- held-out relative RMS residual (keys un-rotated): {}\n",
                      fmt::join(parts, ", "));
  }
  return md;
}

// Which runs do not name the files they measured by checksum (the committed ones predate it).
std::string checksum_line(const Runs& r) {
  std::vector<std::string> without;
  auto check = [&](const json& run, const std::string& what) {
    if (is_run(run) && !run.contains("sha256")) without.push_back(what);
  };
  check(r.transfer, "transfer");
  check(r.depth, "depth remap");
  check(r.reference, "reference ridge");
  check(r.embed, "embedding features");
  for (const auto& [ctx, n] : r.needles) check(n, fmt::format("needle @{}", ctx));
  if (without.empty()) {
    return "- every run records the SHA-256 of the rungs, the map folder and the text it read\n";
  }
  return fmt::format(
      "- runs without the rungs' and the map's SHA-256 (measured before `molt transfer "
      "eval|needle --json` recorded them): {}\n",
      fmt::join(without, ", "));
}

// The depth-remap map is fitted for comparison only: committed under maps/ablations/, never a
// route. Say where it is, and say so when a run read one that is not committed.
std::string depth_line(const json& depth, const std::string& name) {
  if (!is_run(depth)) return "";
  const fs::path maps = depth.at("maps").get<std::string>();
  if (maps.filename() == name && maps.parent_path().filename() == "maps") return "";
  if (maps.filename() == name + "-depth" && maps.parent_path().filename() == "ablations") {
    return fmt::format(
        "- depth remap: map `maps/ablations/{}-depth` (k = 1, the proportional sender layer), "
        "fitted on the same calibration windows for this comparison only\n",
        name);
  }
  return fmt::format(
      "- depth remap: map `{}`, fitted by routes.sh outside the ladder for this comparison and "
      "not committed\n",
      maps.filename().string());
}

// The map's per-window NLL gaps against another condition's on the same windows: mean ± s.e.
// of the paired difference, and the ratio of the mean gaps. Empty when a run lacks them.
std::string paired(const json& map, const json& other, const std::string& what) {
  if (!map.contains("window_nll_gaps") || !other.contains("window_nll_gaps")) return "";
  const auto a = map.at("window_nll_gaps").get<std::vector<double>>();
  const auto b = other.at("window_nll_gaps").get<std::vector<double>>();
  if (a.size() != b.size() || a.size() < 2) return "";
  const double n = static_cast<double>(a.size());
  double mean = 0, ss = 0;
  for (size_t w = 0; w < a.size(); ++w) mean += (a[w] - b[w]) / n;
  for (size_t w = 0; w < a.size(); ++w) ss += (a[w] - b[w] - mean) * (a[w] - b[w] - mean);
  return fmt::format("map − {} {:+.4f} ± {:.4f} (gap ratio {:.2f}×)", what, mean,
                     std::sqrt(ss / (n - 1) / n), num(map, "nll_gap") / num(other, "nll_gap"));
}

// The first condition whose name starts with `prefix`, or null.
const json* condition(const json& run, const std::string& prefix) {
  if (!is_run(run)) return nullptr;
  for (const json& c : run.at("conditions")) {
    if (c.at("condition").get<std::string>().starts_with(prefix)) return &c;
  }
  return nullptr;
}

// Heal, measured: accuracy against h per context, and what each chunk schedule costs.
std::string heal_section(const std::string& name,
                         const std::vector<std::pair<int64_t, json>>& runs) {
  const json& first = runs.front().second;
  std::string md = fmt::format(
      "\n### Heal: the question h tokens after the switch\n\n"
      "![needle accuracy against h](maps/eval/{}.heal.svg)\n\n",
      name);
  md += wrapped(fmt::format(
            "`molt transfer heal`: the switch right after each needle's body (the fact is in the "
            "carried cache); the receiver then reads h tokens of held-out prose (`data/{}`) and "
            "the question, one decode step each, while heal re-prefills the carried positions "
            "natively, {} positions of one layer before each step, from layer {} of {} on (the "
            "map ran the layers before it natively at the seam). \"receiver reads all\" is the "
            "receiver reading the same prompt itself; \"healed first\" counts the needles whose "
            "cache was native before the answer; \"same\" the answers equal to the receiver's "
            "own.",
            fs::path(first.at("filler").get<std::string>()).filename().string(),
            first.at("chunk").get<int64_t>(), first.value("native_layers", int64_t{0}),
            first.at("layers").get<int64_t>())) +
        "\n| needles at | h | tokens | receiver reads all | molt | heal | healed first | heal "
        "same |\n|---|---|---|---|---|---|---|---|\n";
  auto acc = [](const json& c, int64_t n) {
    return fmt::format("{:.3f} ({}/{})", num(c, "accuracy"), c.at("correct").get<int64_t>(), n);
  };
  for (const auto& [ctx, run] : runs) {
    const int64_t n = run.at("count").get<int64_t>();
    for (const json& row : run.at("rows")) {
      md += fmt::format("| ~{} | {} | {:.0f} | {} | {} | {} | {}/{} | {}/{} |\n", ctx,
                        row.at("h").get<int64_t>(), num(row, "mean_prompt_tokens"),
                        acc(row.at("native"), n), acc(row.at("molt"), n), acc(row.at("heal"), n),
                        row.at("healed_before_answer").get<int64_t>(), n,
                        row.at("heal").at("same_answer_as_native").get<int64_t>(), n);
    }
  }
  md +=
      "\n| needles at | heal chunk | decode steps to native | heal ms per step | decode ms "
      "per step | heal ms in all |\n|---|---|---|---|---|---|\n";
  for (const auto& [ctx, run] : runs) {
    for (const json& c : run.at("cost")) {
      md += fmt::format("| ~{} | {} | {:.1f} | {:.2f} | {:.2f} | {:.1f} |\n", ctx,
                        c.at("chunk").get<int64_t>(), num(c, "steps_to_native"),
                        num(c, "heal_ms_per_step"), num(c, "decode_ms_per_step"),
                        num(c, "heal_ms_total"));
    }
  }
  md +=
      "\n" + wrapped(fmt::format(
                 "Costs timed on the first {} needles of each context, heal interleaved with "
                 "the receiver's decode steps on a machine that was not quiet: read the ms as "
                 "ratios within a row.",
                 first.at("cost").empty() ? 0 : first.at("cost")[0].at("needles").get<int64_t>()));
  return md;
}

LineChart heal_chart(const std::string& name, const std::vector<std::pair<int64_t, json>>& runs) {
  LineChart c;
  c.title = fmt::format("{}: needle accuracy, question h tokens after the switch", name);
  c.x_label = "h (tokens read after the switch, log scale)";
  c.y_label = "accuracy";
  c.x_scale = XScale::kLogPlusOne;
  const char* colors[] = {"#bbbbbb", "#d95f02", "#1b9e77"};
  const char* kinds[] = {"native", "molt", "heal"};
  const char* labels[] = {"receiver reads all", "molt", "heal"};
  for (size_t i = 0; i < runs.size(); ++i) {
    for (size_t k = 0; k < 3; ++k) {
      ChartSeries s;
      s.name = fmt::format("{} ~{}", labels[k], runs[i].first);
      s.color = colors[k];
      s.dashed = i > 0;
      s.width = k == 0 ? 5 : 2;  // the receiver's own line shows where heal lands on it
      for (const json& row : runs[i].second.at("rows")) {
        s.points.emplace_back(static_cast<double>(row.at("h").get<int64_t>()),
                              num(row.at(kinds[k]), "accuracy"));
      }
      c.series.push_back(std::move(s));
    }
  }
  return c;
}

std::string route_section(const fs::path& ladder, const TransferRoute& route) {
  const std::string name = route.name();
  const fs::path eval = ladder / "maps" / "eval";
  const Runs r = read_runs(eval, name);
  const json& ev = r.transfer;
  std::string md = fmt::format("## {} → {}\n\n", route.from, route.to);
  md += map_lines(ladder / "maps" / name);
  md += floor_line(ev, (eval / (name + ".transfer.json")).string());
  md += depth_line(r.depth, name);
  if (is_run(r.reference)) {
    md += fmt::format(
        "- reference ridge: map `maps/ablations/{}-ridge`, the route's ridge map before token "
        "features (k = {}), evaluated on the same windows\n",
        name, r.reference.at("k").dump());
  }
  if (is_run(r.embed)) {
    md += fmt::format(
        "- embedding features: map `maps/ablations/{}-embed`, the route's ridge map with the "
        "receiver's embeddings as token features and no native layer (k = {}, features chosen "
        "by held-out prefix NLL), fitted on the same calibration windows with statistics of its "
        "own\n",
        name, r.embed.at("k").dump());
  }
  md += checksum_line(r);
  md += fmt::format(
      "- receiver native NLL {:.4f}, sender {:.4f}; {} windows, {} tokens scored\n\n"
      "| condition | NLL | NLL gap | transfer KL | seam KL |\n|---|---|---|---|---|\n"
      "| native re-prefill | {:.4f} | 0 | 0 | {:.4f} |\n",
      num(ev, "native_nll"), num(ev, "sender_nll"), ev.at("windows").get<int64_t>(),
      ev.at("scored_tokens").get<int64_t>(), num(ev, "native_nll"), num(ev, "native_seam_kl"));
  auto row = [](const std::string& condition, const json& c) {
    return fmt::format("| {} | {:.4f} | {:+.4f} | {:.4f} | {:.4f} |\n", condition, num(c, "nll"),
                       num(c, "nll_gap"), num(c, "transfer_kl"), num(c, "seam_kl"));
  };
  for (const json& c : ev.at("conditions")) md += row(c.at("condition").get<std::string>(), c);
  // A comparison map's rows: its map row as `name` + `map_note`, any other as "name, condition".
  const auto comparison = [&](const json& run, const std::string& name, const char* map_note) {
    if (!run.is_object() || !run.contains("conditions")) return;
    for (const json& c : run.at("conditions")) {
      const std::string cond = c.at("condition").get<std::string>();
      std::string label = name;
      if (cond.starts_with("map")) {
        label += map_note;
      } else {
        label += ", ";
        label += cond;
      }
      md += row(label, c);
    }
  };
  comparison(r.reference, "reference ridge", " (no token features)");
  comparison(r.embed, "embedding features", " (no native layer)");
  comparison(r.depth, "depth remap", "");
  // The shipped map against the floor and the reference, window by window.
  std::vector<std::string> pairs;
  if (const json* m = condition(ev, "map (")) {
    if (const json* f = condition(ev, "token-identity")) {
      const std::string p = paired(*m, *f, "token-identity floor");
      if (!p.empty()) pairs.push_back(p);
    }
    if (const json* ref = condition(r.reference, "map (")) {
      const std::string p = paired(*m, *ref, "reference ridge");
      if (!p.empty()) pairs.push_back(p);
    }
    if (const json* e = condition(r.embed, "map (")) {
      const std::string p = paired(*m, *e, "embedding features");
      if (!p.empty()) pairs.push_back(p);
    }
  }
  if (!pairs.empty()) {
    md += "\n" +
          wrapped(fmt::format("NLL gap, paired over the {} windows (mean ± s.e. of the per-window "
                              "difference): {}.",
                              ev.at("windows").get<int64_t>(), fmt::join(pairs, "; ")));
  }
  md += "\n| needle accuracy |";
  for (const auto& [ctx, n] : r.needles)
    md += fmt::format(" ~{:.0f} tokens |", num(n, "mean_prompt_tokens"));
  md += "\n|---|";
  for (size_t i = 0; i < r.needles.size(); ++i) md += "---|";
  md += "\n";
  const json& first = r.needles.front().second.at("conditions");
  for (size_t i = 0; i < first.size(); ++i) {
    const std::string cond = first[i].at("condition").get<std::string>();
    md += "| " + cond + " |";
    for (const auto& [ctx, n] : r.needles) {
      const json& cs = n.at("conditions");
      if (i >= cs.size() || cs[i].at("condition") != cond) {
        fail("transfer-report: {}'s needle runs list other conditions at {} tokens than at {}",
             name, ctx, r.needles.front().first);
      }
      md += fmt::format(" {:.3f} ({}/{}) |", num(cs[i], "accuracy"),
                        cs[i].at("correct").get<int64_t>(), n.at("count").get<int64_t>());
    }
    md += "\n";
  }
  if (!r.heal.empty()) md += heal_section(name, r.heal);
  return md + "\n";
}

}  // namespace

std::vector<TransferRoute> parse_transfer_routes(const std::string& text) {
  std::vector<TransferRoute> out;
  std::istringstream in(text);
  for (std::string item; in >> item;) {
    const size_t colon = item.find(':');
    if (colon == std::string::npos || colon == 0 || colon + 1 == item.size() ||
        item.find(':', colon + 1) != std::string::npos) {
      fail("--routes: '{}' is not FROM:TO", item);
    }
    out.push_back({item.substr(0, colon), item.substr(colon + 1)});
  }
  if (out.empty()) fail("--routes: no routes");
  return out;
}

std::vector<TransferRoute> fitted_routes(const fs::path& ladder) {
  std::vector<TransferRoute> out;
  const json m = read_json_file(ladder / "ladder.json");
  for (const json& r : m.value("routes", json::array())) {
    TransferRoute t{r.at("from").get<std::string>(), r.at("to").get<std::string>()};
    if (r.value("maps", "") == "maps/" + t.name()) out.push_back(t);
  }
  if (out.empty())
    fail("transfer-report: {} has no route with its own maps/<from>-<to>", ladder.string());
  return out;
}

std::vector<std::pair<std::string, std::string>> transfer_figures(
    const fs::path& ladder, const std::vector<TransferRoute>& routes) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const TransferRoute& r : routes) {
    const auto heal = runs_by_context(ladder / "maps" / "eval", r.name() + ".heal-");
    if (heal.empty()) continue;
    out.emplace_back("maps/eval/" + r.name() + ".heal.svg",
                     line_chart_svg(heal_chart(r.name(), heal)));
  }
  return out;
}

std::string transfer_report(const fs::path& ladder, const std::vector<TransferRoute>& routes) {
  // The carried prefix, as the runs recorded it (one figure when every route shares it).
  std::vector<int64_t> prefixes;
  prefixes.reserve(routes.size());
  for (const TransferRoute& r : routes) {
    prefixes.push_back(read_json_file(ladder / "maps" / "eval" / (r.name() + ".transfer.json"))
                           .at("prefix")
                           .get<int64_t>());
  }
  const bool one_prefix = std::all_of(prefixes.begin(), prefixes.end(),
                                      [&](int64_t p) { return p == prefixes.front(); });
  const std::string intro =
      "Generated by `tools/tiny-ladder/routes.sh` (→ `molt bench transfer-report`) from the JSON "
      "in `maps/eval/` and the maps' metadata; nothing here is typed by hand, and "
      "`tests/cli/transfer_trace_test.cc` fails when the page, its JSON and the committed files "
      "disagree (it re-measures one cell, too). Evaluation text: `data/test.txt` (held out); "
      "needles: `data/needles.jsonl`; the switch is forced right before the answer. NLL gap = "
      "receiver's mean NLL on the tokens after a " +
      (one_prefix ? fmt::format("{}-token ", prefixes.front()) : std::string()) +
      "carried prefix minus after re-reading it (nats/token; 0 is perfect). The token-identity "
      "floor's means are fitted on the calibration text and stored beside each map "
      "(`floor.safetensors`), never taken from the evaluation windows.";
  std::string md = "# Tiny ladder: KV transfer per route\n\n" + wrapped(intro) + "\n";
  for (const TransferRoute& r : routes) md += route_section(ladder, r);
  md.pop_back();  // one newline at the end
  return md;
}

ordered_json route_evidence(const fs::path& ladder, const TransferRoute& route) {
  const fs::path eval = ladder / "maps" / "eval";
  if (!fs::exists(eval / (route.name() + ".transfer.json"))) return nullptr;
  const Runs r = read_runs(eval, route.name());
  const json* map = condition(r.transfer, "map (");
  const json* floor = condition(r.transfer, "token-identity");
  if (map == nullptr || floor == nullptr) {
    fail("transfer-routes: {}.transfer.json has no map or token-identity row", route.name());
  }
  auto r4 = [](double v) { return std::round(v * 1e4) / 1e4; };
  ordered_json needles = ordered_json::array();
  for (const auto& [ctx, n] : r.needles) {
    double receiver = -1, mapped = -1;
    for (const json& c : n.at("conditions")) {
      const std::string name = c.at("condition").get<std::string>();
      if (name == "receiver reads the prompt") receiver = num(c, "accuracy");
      if (name.starts_with("map (")) mapped = num(c, "accuracy");
    }
    if (receiver < 0 || mapped < 0) {
      fail("transfer-routes: {}.needle-{}.json has no receiver or map row", route.name(), ctx);
    }
    needles.push_back({{"tokens", std::llround(num(n, "mean_prompt_tokens"))},
                       {"receiver", r4(receiver)},
                       {"map", r4(mapped)}});
  }
  return {{"nll_gap", r4(num(*map, "nll_gap"))},
          {"token_identity_nll_gap", r4(num(*floor, "nll_gap"))},
          {"prefix", r.transfer.at("prefix")},
          {"needles", needles}};
}

ordered_json transfer_routes(const ordered_json& manifest, const std::vector<TransferRoute>& routes,
                             const std::map<std::string, ordered_json>& evidence) {
  std::vector<std::string> order;
  for (const auto& r : manifest.at("rungs")) order.push_back(r.at("name").get<std::string>());
  auto is_rung = [&](const std::string& n) {
    return std::find(order.begin(), order.end(), n) != order.end();
  };
  auto parent_of = [&](const std::string& n) -> std::string {
    if (!n.ends_with(kInt8)) return "";
    const std::string p = n.substr(0, n.size() - std::string_view(kInt8).size());
    return is_rung(p) ? p : "";
  };
  auto fitted = [&](const std::string& from, const std::string& to) {
    return std::any_of(routes.begin(), routes.end(),
                       [&](const TransferRoute& r) { return r.from == from && r.to == to; });
  };
  for (const TransferRoute& r : routes) {
    if (!is_rung(r.from) || !is_rung(r.to))
      fail("--routes: {} → {} names a rung not in ladder.json", r.from, r.to);
  }
  ordered_json out = ordered_json::array();
  for (const TransferRoute& r : routes) {
    ordered_json route = {{"from", r.from}, {"to", r.to}, {"maps", "maps/" + r.name()}};
    const auto e = evidence.find(r.name());
    if (e != evidence.end() && !e->second.is_null()) route["evidence"] = e->second;
    out.push_back(route);
  }
  // Hand-written routes survive; derived and re-prefill ones are derived again below.
  for (const auto& r : manifest.value("routes", ordered_json::array())) {
    const std::string from = r.at("from").get<std::string>(), to = r.at("to").get<std::string>();
    if (fitted(from, to) || r.value("method", "") == "reprefill") continue;
    if (!parent_of(from).empty() && r.contains("maps")) continue;
    out.push_back(r);
  }
  auto has = [&](const std::string& from, const std::string& to) {
    return std::any_of(out.begin(), out.end(), [&](const ordered_json& r) {
      return r.at("from") == from && r.at("to") == to;
    });
  };
  // A precision rung leaves by its parent's maps: its cache differs from the parent's by the
  // diagonal fit's residual (well under 1% RMS on the tiny ladder), far below any map's.
  for (const std::string& rung : order) {
    const std::string parent = parent_of(rung);
    if (parent.empty()) continue;
    const ordered_json before = out;
    for (const auto& r : before) {
      const std::string to = r.at("to").get<std::string>();
      if (r.at("from") == parent && r.contains("maps") && to != rung && !has(rung, to)) {
        // Its evidence is the parent's map's, measured from the parent's cache.
        ordered_json derived = {{"from", rung}, {"to", to}, {"maps", r.at("maps")}};
        if (r.contains("evidence")) derived["evidence"] = r.at("evidence");
        out.push_back(derived);
      }
    }
  }
  // Upward moves (budget returns) re-read the context on the larger rung.
  for (size_t i = 0; i < order.size(); ++i) {
    for (size_t j = 0; j < i; ++j) {
      if (!has(order[i], order[j])) {
        out.push_back({{"from", order[i]}, {"to", order[j]}, {"method", "reprefill"}});
      }
    }
  }
  ordered_json m = manifest;
  m["routes"] = out;
  return m;
}

json transfer_run_sha256(const fs::path& from, const fs::path& to, const fs::path& maps,
                         const fs::path& input) {
  json f = checkpoint_sha256(from);
  if (fs::exists(from / "tokenizer.json"))
    f["tokenizer.json"] = sha256_file(from / "tokenizer.json");
  json m = json::object();
  for (const auto& e : fs::directory_iterator(maps)) {
    if (e.is_regular_file()) m[e.path().filename().string()] = sha256_file(e.path());
  }
  return {{"from", f},
          {"to", checkpoint_sha256(to)},
          {"maps", m},
          {"input", {{input.filename().string(), sha256_file(input)}}}};
}

}  // namespace molt
