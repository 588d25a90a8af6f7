#include "molt/bench/results_page.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <string_view>
#include <tuple>

#include "molt/bench/line_chart.h"
#include "molt/common/error.h"
#include "molt/scheduler/bench.h"

namespace molt {
namespace {

using json = nlohmann::json;

// One block of the page, rendered to Markdown and to HTML alike.
struct Block {
  enum Kind { kHeading, kParagraph, kList, kTable, kFigure } kind = kParagraph;
  int level = 2;
  std::string text;                            // heading, paragraph, figure caption
  std::vector<std::string> items;              // list items
  std::vector<std::vector<std::string>> rows;  // table: header first
  std::string figure, svg;                     // figure path and its SVG
};

const json& at(const json& j, const std::string& key, const std::string& where) {
  if (!j.is_object() || !j.contains(key)) fail("results.json: {}: missing field '{}'", where, key);
  return j.at(key);
}

// `code` spans become <code>; everything else is escaped.
std::string inline_html(const std::string& s) {
  std::string out;
  bool code = false;
  size_t from = 0;
  for (size_t i = 0; i <= s.size(); ++i) {
    if (i == s.size() || s[i] == '`') {
      out += markup_escaped(s.substr(from, i - from));
      if (i < s.size()) out += code ? "</code>" : "<code>";
      code = i < s.size() ? !code : code;
      from = i + 1;
    }
  }
  return out;
}

std::string markdown(const std::vector<Block>& blocks) {
  std::string md;
  for (const Block& b : blocks) {
    switch (b.kind) {
      case Block::kHeading:
        md += std::string(static_cast<size_t>(b.level), '#') + " " + b.text + "\n\n";
        break;
      case Block::kParagraph:
        md += b.text + "\n\n";
        break;
      case Block::kList:
        for (const std::string& i : b.items) md += "- " + i + "\n";
        md += "\n";
        break;
      case Block::kTable:
        for (size_t r = 0; r < b.rows.size(); ++r) {
          md += "| " + fmt::format("{}", fmt::join(b.rows[r], " | ")) + " |\n";
          if (r == 0) {
            md += "|";
            for (size_t c = 0; c < b.rows[0].size(); ++c) md += "---|";
            md += "\n";
          }
        }
        md += "\n";
        break;
      case Block::kFigure:
        md += fmt::format("![{}]({})\n\n", b.text, b.figure);
        break;
    }
  }
  while (md.size() > 1 && md[md.size() - 2] == '\n') md.pop_back();
  return md;
}

std::string html(const std::vector<Block>& blocks, const std::string& title) {
  std::string h = fmt::format(
      "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
      "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
      "<title>{}</title>\n<style>\n"
      "body {{ font-family: sans-serif; max-width: 1200px; margin: 2em auto; padding: 0 1em; "
      "line-height: 1.45; color: #222; }}\n"
      "table {{ border-collapse: collapse; margin: 1em 0; font-size: 0.85em; display: block; "
      "overflow-x: auto; }}\n"
      "th, td {{ border: 1px solid #ccc; padding: 0.25em 0.5em; text-align: right; }}\n"
      "td {{ white-space: nowrap; }} td small {{ color: #666; }}\n"
      "th {{ vertical-align: bottom; }}\n"
      "th:first-child, td:first-child {{ text-align: left; }}\n"
      "th {{ background: #f3f3f3; }}\n"
      "figure {{ margin: 1em 0; }} figure svg {{ max-width: 100%; height: auto; }}\n"
      "code {{ background: #f3f3f3; padding: 0 0.2em; }}\n"
      "</style>\n</head>\n<body>\n",
      markup_escaped(title));
  for (const Block& b : blocks) {
    switch (b.kind) {
      case Block::kHeading:
        h += fmt::format("<h{0}>{1}</h{0}>\n", b.level, inline_html(b.text));
        break;
      case Block::kParagraph:
        h += "<p>" + inline_html(b.text) + "</p>\n";
        break;
      case Block::kList:
        h += "<ul>\n";
        for (const std::string& i : b.items) h += "<li>" + inline_html(i) + "</li>\n";
        h += "</ul>\n";
        break;
      case Block::kTable:
        h += "<table>\n";
        for (size_t r = 0; r < b.rows.size(); ++r) {
          const char* cell = r == 0 ? "th" : "td";
          h += "<tr>";
          for (const std::string& c : b.rows[r]) {
            // "median [lo, hi]": the interval on a line of its own, smaller.
            std::string v = inline_html(c);
            const size_t ci = v.find(" [");
            if (r > 0 && ci != std::string::npos && v.ends_with("]")) {
              v = v.substr(0, ci) + "<br><small>" + v.substr(ci + 1) + "</small>";
            }
            h += fmt::format("<{0}>{1}</{0}>", cell, v);
          }
          h += "</tr>\n";
        }
        h += "</table>\n";
        break;
      case Block::kFigure:
        h += "<figure>\n" + b.svg + "<figcaption>" + inline_html(b.text) +
             "</figcaption>\n</figure>\n";
        break;
    }
  }
  return h + "</body>\n</html>\n";
}

// "12.3 [10.1, 14.2]" from a spread {median, lo, hi}; "—" when nothing was measured.
std::string spread(const json& s, int decimals) {
  if (s.is_null()) return "—";
  const auto f = [&](const char* k) {
    return fmt::format("{:.{}f}", s.at(k).get<double>(), decimals);
  };
  return fmt::format("{} [{}, {}]", f("median"), f("lo"), f("hi"));
}

std::vector<std::string> condition_row(const json& s) {
  const int64_t over = s.at("overshooting_runs").get<int64_t>();
  return {fmt::format("`{}`", s.at("condition").get<std::string>()),
          fmt::format("{}", s.at("runs").get<int64_t>()),
          fmt::format("{}", s.at("killed").get<int64_t>()),
          fmt::format("{} / {}", s.at("lost").get<int64_t>(), s.at("duplicated").get<int64_t>()),
          spread(s.at("max_stall_ms"), 1),
          spread(s.at("max_stall_steps"), 1),
          spread(s.at("seam_kl"), 3),
          spread(s.at("transfer_kl"), 3),
          spread(s.at("nll_after_pressure"), 3),
          spread(s.at("agreement"), 2),
          spread(s.at("peak_mib"), 1),
          over == 0
              ? "0"
              : fmt::format("{} (worst {:.1f})", over, s.at("worst_overshoot_mib").get<double>())};
}

const std::vector<std::string> kConditionHeader = {"policy",
                                                   "runs",
                                                   "killed",
                                                   "lost / duplicated",
                                                   "seam stall ms",
                                                   "stall (receiver decode steps)",
                                                   "seam KL",
                                                   "transfer KL",
                                                   "NLL after pressure (top rung)",
                                                   "agreement with no pressure",
                                                   "peak MiB",
                                                   "runs over budget (worst MiB)"};

// Budget and accounted usage over the session's steps, one line per policy, for one prompt.
LineChart usage_chart(const json& conditions, const std::string& trace, const std::string& prompt) {
  LineChart c;
  c.title = fmt::format("{} · {}: budget and what each policy holds", trace, prompt);
  c.x_label = "session step (tokens, and checks while parked)";
  c.y_label = "MiB";
  c.y_min = 0;
  c.y_max = 0;
  const char* colors[] = {"#e41a1c", "#377eb8", "#4daf4a", "#984ea3",
                          "#ff7f00", "#a65628", "#f781bf", "#999999"};
  ChartSeries budget{"budget", "#000000", true, 1.5, {}};
  const json* longest = nullptr;  // the budget as the longest run saw it
  size_t k = 0;
  for (const json& r : conditions.at("runs")) {
    if (r.at("trace") != trace || r.at("prompt") != prompt || r.at("condition") != r.at("policy")) {
      continue;  // the conditions only, not the ablations
    }
    if (longest == nullptr || r.at("series").size() > longest->at("series").size()) longest = &r;
    ChartSeries s{r.at("policy").get<std::string>(), colors[k++ % 8], false, 2, {}};
    for (const json& p : r.at("series")) {
      const double used = p.at(2).get<double>();
      s.points.emplace_back(p.at(0).get<double>(), used);
      c.y_max = std::max(c.y_max, used);
    }
    c.series.push_back(std::move(s));
  }
  if (longest != nullptr) {
    for (const json& p : longest->at("series")) {
      if (!p.at(1).is_number()) continue;
      budget.points.emplace_back(p.at(0).get<double>(), p.at(1).get<double>());
      c.y_max = std::max(c.y_max, p.at(1).get<double>());
    }
  }
  if (!budget.points.empty()) c.series.insert(c.series.begin(), std::move(budget));
  c.y_max = std::max(4.0, std::ceil(c.y_max * 1.05 / 4) * 4);  // whole MiB at every grid line
  // x ticks every 8 steps up to the longest series.
  double last = 0;
  for (const ChartSeries& s : c.series) {
    if (!s.points.empty()) last = std::max(last, s.points.back().first);
  }
  for (int64_t i = 0; 8.0 * static_cast<double>(i) <= last; ++i) {
    c.x_ticks.push_back(8.0 * static_cast<double>(i));
  }
  return c;
}

// A plot of the page: its SVG under `file` (relative to the page) and a figure block.
void add_figure(const std::string& file, const std::string& caption, const LineChart& chart,
                std::vector<Block>& b, ResultsPage& page) {
  const std::string svg = line_chart_svg(chart);
  page.figures.emplace_back(file, svg);
  b.push_back({Block::kFigure, 2, caption, {}, {}, file, svg});
}

// What every switch-cost table means (the tiny ladder's and the real geometries').
std::string switch_cost_terms(int64_t repeats) {
  return fmt::format(
      "One migration through the runtime's own migrate(), from the budget cut to the receiver's "
      "first logits: {} per cell (every run is in the JSON). Warm: the "
      "receiver's files in the page cache; cold: evicted with posix_fadvise just before the "
      "switch (the sender stays warm). FLOPs saved: the share of the receiver's re-prefill not "
      "spent before it resumes (heal defers it to the decode steps after the seam). Peak MiB: "
      "weights and caches resident at the seam, by the runtime's accounting.",
      repeats == 1 ? std::string("one run") : fmt::format("median of {} runs", repeats));
}

// Switch cost against context: one plot (log-log) and one table per route; `file_prefix`
// names the plots (results/<prefix>-<from>-<to>.svg).
void switch_section(const json& sw, const std::string& heading, const std::string& intro,
                    const std::string& file_prefix, std::vector<Block>& b, ResultsPage& page) {
  b.push_back({Block::kHeading, 2, heading, {}, {}, "", ""});
  b.push_back({Block::kParagraph, 2, intro, {}, {}, "", ""});
  std::vector<std::pair<std::string, std::string>> routes;
  for (const json& row : sw.at("rows")) {
    const std::pair<std::string, std::string> rt{row.at("from"), row.at("to")};
    if (std::find(routes.begin(), routes.end(), rt) == routes.end()) routes.push_back(rt);
  }
  const char* colors[] = {"#1b9e77", "#d95f02", "#7570b3", "#e7298a"};
  for (const auto& [from, to] : routes) {
    b.push_back({Block::kHeading, 3, fmt::format("`{}` → `{}`", from, to), {}, {}, "", ""});
    LineChart c;
    c.title = fmt::format("{} → {}: switch ms against context (log-log)", from, to);
    c.x_label = "tokens of context carried";
    c.y_label = "ms";
    c.x_scale = XScale::kLog;
    c.y_log = true;
    c.y_min = 1e9;
    c.y_max = 0;
    Block t{Block::kTable,
            2,
            "",
            {},
            {{"context", "policy", "ran", "warm ms", "cold ms", "cold load ms", "FLOPs saved",
              "peak MiB"}},
            "",
            ""};
    size_t k = 0;
    for (const json& p : sw.at("policies")) {
      for (const char* cache : {"warm", "cold"}) {
        ChartSeries s{fmt::format("{} ({})", p.get<std::string>(), cache),
                      colors[k % 4],
                      std::string(cache) == "cold",
                      2,
                      {}};
        for (const json& row : sw.at("rows")) {
          if (row.at("from") != from || row.at("to") != to || row.at("policy") != p ||
              row.at("cache") != cache) {
            continue;
          }
          const double ms = row.at("ms").get<double>();
          s.points.emplace_back(row.at("context").get<double>(), ms);
          c.y_min = std::min(c.y_min, ms);
          c.y_max = std::max(c.y_max, ms);
        }
        c.series.push_back(std::move(s));
      }
      ++k;
    }
    for (const json& n : sw.at("contexts")) {
      for (const json& p : sw.at("policies")) {
        const json* warm = nullptr;
        const json* cold = nullptr;
        for (const json& row : sw.at("rows")) {
          if (row.at("from") == from && row.at("to") == to && row.at("context") == n &&
              row.at("policy") == p) {
            (row.at("cache") == "warm" ? warm : cold) = &row;
          }
        }
        if (warm == nullptr || cold == nullptr) continue;
        t.rows.push_back({fmt::format("{}", n.get<int64_t>()),
                          fmt::format("`{}`", p.get<std::string>()),
                          fmt::format("`{}`", warm->at("ran").get<std::string>()),
                          fmt::format("{:.1f}", warm->at("ms").get<double>()),
                          fmt::format("{:.1f}", cold->at("ms").get<double>()),
                          fmt::format("{:.1f}", cold->at("load_ms").get<double>()),
                          fmt::format("{:.3f}", warm->at("flops_saved").get<double>()),
                          fmt::format("{:.1f}", warm->at("peak_mib").get<double>())});
      }
    }
    c.y_min = std::max(0.1, std::pow(10.0, std::floor(std::log10(std::max(c.y_min, 0.1)))));
    c.y_max = std::pow(10.0, std::ceil(std::log10(std::max(c.y_max, c.y_min * 10))));
    add_figure(fmt::format("results/{}-{}-{}.svg", file_prefix, from, to),
               fmt::format("Switch ms against context, {} → {}", from, to), c, b, page);
    b.push_back(std::move(t));
  }
}

// Tenants on one moving budget (the scheduler's standard scenario): the timeline and tables.
void tenants_section(const json& t, std::vector<Block>& b, ResultsPage& page) {
  const json& s = t.at("summary");
  b.push_back({Block::kHeading, 2, "Tenants", {}, {}, "", ""});
  b.push_back(
      {Block::kParagraph,
       2,
       fmt::format(
           "`molt bench tenants`: tenants `{}` (fg: a foreground chat, bg: background batch jobs; "
           "answer tokens, @ the round a tenant arrives) on one budget under `{}`, every "
           "migration by `{}`; the scheduler admits, defers, demotes, promotes, parks and sheds, "
           "and never kills. {} rounds; max overshoot {:.2f} MiB (≤ 0: never over the budget); "
           "rounds over a budget that fits: {}; killed: {}; accounted − measured RSS: mean {:.2f}, "
           "max |·| {:.2f} MiB.",
           t.at("tenants_spec").get<std::string>(), t.at("trace").get<std::string>(),
           t.at("policy").get<std::string>(), s.at("rounds").get<int64_t>(),
           s.at("max_overshoot_mib").get<double>(),
           s.at("rounds_over_budget_where_fits").get<int64_t>(), s.at("killed").get<int64_t>(),
           s.at("accounted_minus_rss_mib").at("mean").get<double>(),
           s.at("accounted_minus_rss_mib").at("max_abs").get<double>()),
       {},
       {},
       "",
       ""});
  const std::string file = "results/tenants.svg";
  const std::string svg = sched::timeline_svg(t);
  page.figures.emplace_back(file, svg);
  b.push_back({Block::kFigure,
               2,
               "Budget, prediction, accounting and RSS per round; each "
               "tenant's rung below",
               {},
               {},
               file,
               svg});
  Block levers{Block::kTable, 2, "", {}, {{"lever", "times used"}}, "", ""};
  for (const auto& [name, n] : s.at("levers").items()) {
    levers.rows.push_back({name, fmt::format("{}", n.get<int64_t>())});
  }
  b.push_back(std::move(levers));
  Block tab{Block::kTable,
            2,
            "",
            {},
            {{"tenant", "priority", "arrives", "admitted", "finished", "tokens", "migrations",
              "rungs", "rounds deferred", "tok/s"}},
            "",
            ""};
  for (const json& x : s.at("tenants")) {
    std::vector<std::string> rungs;
    for (const json& r : x.at("rungs_used")) rungs.push_back(r.get<std::string>());
    tab.rows.push_back({x.at("name").get<std::string>(), x.at("priority").get<std::string>(),
                        fmt::format("{}", x.at("arrival").get<int64_t>()),
                        fmt::format("{}", x.at("admitted_round").get<int64_t>()),
                        x.at("finished").get<bool>()
                            ? fmt::format("{} ({})", x.at("finished_round").get<int64_t>(),
                                          x.at("done").get<std::string>())
                            : "no",
                        fmt::format("{}", x.at("tokens").get<int64_t>()),
                        fmt::format("{}", x.at("migrations").get<int64_t>()),
                        fmt::format("{}", fmt::join(rungs, ", ")),
                        fmt::format("{}", x.at("rounds_deferred").get<int64_t>()),
                        fmt::format("{:.0f}", x.at("tok_s").get<double>())});
  }
  b.push_back(std::move(tab));
}

// The KV cache's precision: bytes per cached token, prefix NLL and needles per row type.
void kv_section(const json& kv, std::vector<Block>& b) {
  const json& types = kv.at("types");
  b.push_back({Block::kHeading, 2, "KV cache precision", {}, {}, "", ""});
  b.push_back(
      {Block::kParagraph,
       2,
       fmt::format(
           "Each rung with its K and V rows stored as {}: bytes per cached token (all layers, K "
           "and V; int8 carries one f32 scale per position and KV head), and the mean "
           "next-token NLL over {} consecutive windows of {} tokens of `test.txt`, each read "
           "from an empty cache of that type (every position attends over the stored rows); "
           "change against the f32 cache. Then the needles answered greedily on the top rung "
           "with the prompt read into a cache of each type. Hidden states and maps stay f32.",
           fmt::join(types.begin(), types.end(), ", "), kv.at("windows").get<int64_t>(),
           kv.at("context").get<int64_t>()),
       {},
       {},
       "",
       ""});
  Block t{Block::kTable, 2, "", {}, {{"rung"}}, "", ""};
  for (const json& ty : types)
    t.rows[0].push_back(fmt::format("bytes/token {}", ty.get<std::string>()));
  for (const json& ty : types) t.rows[0].push_back(fmt::format("NLL {}", ty.get<std::string>()));
  for (const json& row : kv.at("rungs")) {
    std::vector<std::string> cells = {fmt::format("`{}`", row.at("rung").get<std::string>())};
    for (const json& ty : types) {
      const std::string n = ty.get<std::string>();
      const double bytes = row.at("bytes_per_token").at(n).get<double>();
      cells.push_back(n == "f32" ? fmt::format("{:.0f}", bytes)
                                 : fmt::format("{:.0f} (×{:.3f})", bytes,
                                               row.at("bytes_ratio").at(n).get<double>()));
    }
    for (const json& ty : types) {
      const std::string n = ty.get<std::string>();
      const double nll = row.at("nll").at(n).get<double>();
      cells.push_back(n == "f32" ? fmt::format("{:.4f}", nll)
                                 : fmt::format("{:.4f} ({:+.4f}%)", nll,
                                               row.at("nll_change_pct").at(n).get<double>()));
    }
    t.rows.push_back(std::move(cells));
  }
  b.push_back(std::move(t));
  Block nd{Block::kTable, 2, "", {}, {{"needles", "rung"}}, "", ""};
  for (const json& ty : types) nd.rows[0].push_back(ty.get<std::string>());
  for (const json& row : kv.at("needles")) {
    std::vector<std::string> cells = {
        fmt::format("{} at ~{} tokens", row.at("count").get<int64_t>(),
                    row.at("context").get<int64_t>()),
        fmt::format("`{}`", row.at("rung").get<std::string>())};
    for (const json& ty : types) {
      const std::string n = ty.get<std::string>();
      const int64_t c = row.at("correct").at(n).get<int64_t>();
      cells.push_back(n == "f32" ? fmt::format("{}", c)
                      : row.at("same_as_f32").at(n).get<bool>()
                          ? fmt::format("{} (the same needles)", c)
                          : fmt::format("{} (other needles)", c));
    }
    nd.rows.push_back(std::move(cells));
  }
  b.push_back(std::move(nd));
}

// Transfer per route: the map beside its floors and comparison maps, residuals per layer,
// needles with the switch right before the answer.
void transfer_section(const json& tr, std::vector<Block>& b, ResultsPage& page) {
  b.push_back({Block::kHeading, 2, "Transfer per route", {}, {}, "", ""});
  const std::string recompute =
      fmt::format("{}", fmt::join(tr.at("recompute").get<std::vector<int>>(), ", "));
  b.push_back(
      {Block::kParagraph,
       2,
       fmt::format(
           "Each route's shipped map on {} windows of held-out prose: the receiver's cache of a "
           "{}-token prefix filled by each condition, then {} tokens read and scored. NLL "
           "gap = mean NLL − the receiver's after re-reading the prefix itself (nats per "
           "token); transfer KL = KL(p_native ‖ p) and seam KL = KL(p_sender ‖ p) at the first "
           "position after the switch. The floors a map must beat: a zero cache, and a "
           "token-identity cache whose per-token means come from the calibration text the map "
           "was fitted on, never these windows. The reference ridge (no token features) and the "
           "depth remap are the comparison maps committed under maps/ablations/, solved from the "
           "same statistics. A map with native layers runs the receiver's first layers over the "
           "context itself and reads their output as token features: those layers hold the "
           "receiver's own rows (\"native\" in the residual tables). ÷ floor and ÷ ridge: the gap "
           "as a share of the token-identity "
           "floor's and of the reference ridge's. Recompute r re-runs the receiver's last r "
           "layers natively (r = {}, where the map holds the boundary map it needs); anchors "
           "re-run the last context tokens natively on the receiver. A precision rung's "
           "diagonal map has neither.",
           tr.at("windows").get<int64_t>(), tr.at("prefix").get<int64_t>(),
           tr.at("continuation").get<int64_t>(), recompute),
       {},
       {},
       "",
       ""});
  for (const json& r : tr.at("routes")) {
    const std::string from = r.at("from").get<std::string>(), to = r.at("to").get<std::string>();
    b.push_back({Block::kHeading, 3, fmt::format("`{}` → `{}`", from, to), {}, {}, "", ""});
    const json& ev = r.at("eval");
    std::string about = fmt::format(
        "Map `{}` ({}{}); receiver native NLL {:.4f}, sender {:.4f} over {} scored tokens; seam KL "
        "of the receiver reading natively {:.4f}.",
        r.at("maps").get<std::string>(), r.at("method").get<std::string>(),
        r.at("k").is_null() ? "" : fmt::format(", k = {}", r.at("k").dump()),
        ev.at("native_nll").get<double>(), ev.at("sender_nll").get<double>(),
        ev.at("scored_tokens").get<int64_t>(), ev.at("native_seam_kl").get<double>());
    if (r.at("floor").is_object() && r.at("floor").contains("corpus")) {
      about += fmt::format(" Token-identity means from `{}`.",
                           r.at("floor").at("corpus").get<std::string>());
    }
    b.push_back({Block::kParagraph, 2, about, {}, {}, "", ""});
    Block t{Block::kTable,
            2,
            "",
            {},
            {{"condition", "NLL", "NLL gap", "÷ floor", "÷ ridge", "transfer KL", "seam KL"}},
            "",
            ""};
    auto ratio = [](const json& c, const char* key) {
      return c.contains(key) ? fmt::format("{:.2f}", c.at(key).get<double>()) : std::string("—");
    };
    for (const json& c : ev.at("conditions")) {
      t.rows.push_back({c.at("condition").get<std::string>(),
                        fmt::format("{:.4f}", c.at("nll").get<double>()),
                        fmt::format("{:+.4f}", c.at("nll_gap").get<double>()),
                        ratio(c, "gap_vs_token_identity"), ratio(c, "gap_vs_reference_ridge"),
                        fmt::format("{:.4f}", c.at("transfer_kl").get<double>()),
                        fmt::format("{:.4f}", c.at("seam_kl").get<double>())});
    }
    b.push_back(std::move(t));
    // Residuals per receiver layer (held-out calibration windows, keys un-rotated).
    const json& res = r.at("residuals");
    if (res.is_object() && res.contains("layers")) {
      LineChart c;
      c.title = fmt::format("{} → {}: held-out relative RMS residual per receiver layer", from, to);
      c.x_label = "receiver layer";
      c.y_label = "relative RMS residual";
      c.y_min = 0;
      c.y_max = 0;
      const std::vector<std::tuple<const char*, const char*, const char*, bool>> kinds = {
          {"k", "K, map", "#1b9e77", false},
          {"v", "V, map", "#d95f02", false},
          {"k_token_identity", "K, token-identity floor", "#1b9e77", true},
          {"v_token_identity", "V, token-identity floor", "#d95f02", true}};
      Block rt{Block::kTable,
               2,
               "",
               {},
               {{"receiver layer", "K map", "V map", "K token-identity", "V token-identity"}},
               "",
               ""};
      // A native layer (the map's first ones, MapFeatures::native_layers) holds the receiver's
      // own rows: its map ("k", "v") is unused and has no residual.
      const auto native_map = [](const json& L, std::string_view key) {
        return (key == "k" || key == "v") && L.value("native", false);
      };
      for (const auto& [key, name, color, dashed] : kinds) {
        ChartSeries s{name, color, dashed, 2, {}};
        for (const json& L : res.at("layers")) {
          if (!L.contains(key)) continue;
          const double y = native_map(L, key) ? 0.0 : L.at(key).at("rel_rms").get<double>();
          s.points.emplace_back(L.at("layer").get<double>(), y);
          c.y_max = std::max(c.y_max, y);
        }
        if (!s.points.empty()) c.series.push_back(std::move(s));
      }
      for (const json& L : res.at("layers")) {
        std::vector<std::string> row = {fmt::format("{}", L.at("layer").get<int64_t>())};
        for (const auto& [key, name, color, dashed] : kinds) {
          row.push_back(!L.contains(key) ? std::string("—")
                        : native_map(L, key)
                            ? std::string("native")
                            : fmt::format("{:.3f}", L.at(key).at("rel_rms").get<double>()));
        }
        rt.rows.push_back(std::move(row));
      }
      c.y_max = std::ceil(std::max(c.y_max, 0.01) * 10) / 10;
      add_figure(fmt::format("results/residuals-{}-{}.svg", from, to),
                 fmt::format("Relative RMS residual per receiver layer, {} → {}", from, to), c, b,
                 page);
      b.push_back(std::move(rt));
    }
    // Needles: one column per context.
    const json& needles = r.at("needles");
    if (!needles.empty()) {
      Block nt{Block::kTable, 2, "", {}, {{"condition at the switch"}}, "", ""};
      for (const json& n : needles) {
        nt.rows[0].push_back(fmt::format("{} needles at ~{} tokens", n.at("count").get<int64_t>(),
                                         n.at("context").get<int64_t>()));
      }
      const json& first = needles.at(0).at("conditions");
      for (size_t i = 0; i < first.size(); ++i) {
        std::string name = first.at(i).at("condition").get<std::string>();
        if (name == "sender reads the prompt") name += " (A `hold`: no switch)";
        if (name == "receiver reads the prompt") name += " (B `small`, C `reprefill`)";
        if (name.starts_with("map (")) name += " (D `molt`)";
        std::vector<std::string> row = {name};
        for (const json& n : needles) {
          const json& c = n.at("conditions").at(i);
          row.push_back(fmt::format("{} ({:.2f})", c.at("correct").get<int64_t>(),
                                    c.at("accuracy").get<double>()));
        }
        nt.rows.push_back(std::move(row));
      }
      b.push_back({Block::kParagraph,
                   2,
                   "Needles answered greedily, the switch forced right before the answer: "
                   "correct answers (accuracy) per condition.",
                   {},
                   {},
                   "",
                   ""});
      b.push_back(std::move(nt));
      // Quality against context, one line per mechanism (and the floors), when there are
      // several contexts.
      if (needles.size() > 1) {
        LineChart c;
        c.title = fmt::format("{} → {}: needle accuracy against context", from, to);
        c.x_label = "tokens of context before the switch";
        c.y_label = "accuracy";
        c.x_scale = XScale::kLog;
        const char* colors[] = {"#333333", "#999999", "#1b9e77", "#d95f02", "#7570b3", "#e7298a"};
        for (size_t i = 0; i < first.size(); ++i) {
          ChartSeries sr{
              first.at(i).at("condition").get<std::string>(), colors[i % 6], i >= 4, 2, {}};
          for (const json& n : needles) {
            sr.points.emplace_back(n.at("context").get<double>(),
                                   n.at("conditions").at(i).at("accuracy").get<double>());
          }
          c.series.push_back(std::move(sr));
        }
        add_figure(fmt::format("results/needles-{}-{}.svg", from, to),
                   fmt::format("Needle accuracy against context per condition, {} → {}", from, to),
                   c, b, page);
      }
    }
  }
}

// Speed and memory per precision at the real geometries, then their switch cost.
void real_section(const json& real, std::vector<Block>& b, ResultsPage& page) {
  b.push_back({Block::kHeading, 2, "Speed and memory at the real geometries", {}, {}, "", ""});
  b.push_back(
      {Block::kParagraph,
       2,
       fmt::format(
           "Synthetic checkpoints at the real Qwen2.5 shapes (random weights: speed and memory do "
           "not depend on the values; how each was made is in the JSON), prefill of {} tokens "
           "and {} decode steps each. Bound: a decode step streams every weight once, so its "
           "GB/s is set beside a STREAM triad as STREAM states it, the best of {} standalone "
           "passes just before the run (× triad), and beside the median of triad passes "
           "interleaved with the decode steps (× paired; interleaved passes run slower, so this "
           "ratio flatters). Memory by the runtime's accounting: weights resident, the f16 KV "
           "cache per token, and the whole rung with a cache of 4096 positions.",
           real.at("prompt_tokens").get<int64_t>(), real.at("tokens").get<int64_t>(),
           real.at("triad_repeats").get<int64_t>()),
       {},
       {},
       "",
       ""});
  Block t{
      Block::kTable,
      2,
      "",
      {},
      {{"geometry", "precision", "weights MiB", "KV bytes/token", "MiB at 4096", "prefill tok/s",
        "decode tok/s", "decode GB/s", "triad GB/s", "× triad", "paired triad GB/s", "× paired"}},
      "",
      ""};
  for (const json& s : real.at("speed")) {
    const json& f = s.at("footprint");
    t.rows.push_back({fmt::format("`{}`", s.at("geometry").get<std::string>()),
                      fmt::format("`{}`", s.at("checkpoint_precision").get<std::string>()),
                      fmt::format("{:.0f}", f.at("weight_mib").get<double>()),
                      fmt::format("{}", f.at("kv_bytes_per_token").get<int64_t>()),
                      fmt::format("{:.0f}", f.at("total_mib_at").at("4096").get<double>()),
                      fmt::format("{:.1f}", s.at("prefill_tok_s").get<double>()),
                      fmt::format("{:.1f}", s.at("decode_tok_s").get<double>()),
                      fmt::format("{:.1f}", s.at("decode_gb_s").get<double>()),
                      fmt::format("{:.1f}", s.at("triad_standalone_gb_s").get<double>()),
                      fmt::format("{:.2f}", s.at("x_standalone_triad").get<double>()),
                      fmt::format("{:.1f}", s.at("triad_gb_s").get<double>()),
                      fmt::format("{:.2f}", s.at("x_bound").get<double>())});
  }
  b.push_back(std::move(t));
  const json& sw = real.at("switch");
  if (sw.at("rows").empty()) return;
  json policies = json::array();
  for (const json& row : sw.at("rows")) {
    if (std::find(policies.begin(), policies.end(), row.at("policy")) == policies.end()) {
      policies.push_back(row.at("policy"));
    }
  }
  json cells = sw;
  cells["policies"] = policies;
  switch_section(
      cells, "Switch cost at the real geometries",
      switch_cost_terms(sw.at("repeats").get<int64_t>()) +
          fmt::format(
              " Here the rungs are the synthetic bf16 checkpoints above, the map a shape map "
              "(random values, k = {} source layers per receiver layer, so it costs what a "
              "fitted map of that k costs), and the sender's cache is filled rather than "
              "prefilled (no policy's cost depends on its values).",
              sw.at("shape_map_k").get<int64_t>()),
      "switch-real", b, page);
}

}  // namespace

ResultsPage results_page(const json& r) {
  const json& prov = at(r, "provenance", "top level");
  const json& cond = at(r, "conditions", "top level");
  const json& inputs = at(r, "inputs", "top level");
  std::vector<Block> b;
  ResultsPage page;
  auto para = [&](std::string t) {
    b.push_back({Block::kParagraph, 2, std::move(t), {}, {}, "", ""});
  };
  auto head = [&](int level, std::string t) {
    b.push_back({Block::kHeading, level, std::move(t), {}, {}, "", ""});
  };
  head(1, "molt: results");
  para(
      "Generated by `molt bench run` from `results.json` alone; nothing here is typed by hand, and "
      "`tests/cli/bench_run_test.cc` checks every number on this page against the JSON.");
  para(fmt::format(
      "Commit `{}`{} · {}, {} cores, SIMD {}, {} threads · started {} · {:.0f} s · {} run · "
      "ladder `{}` ({} files, SHA-256 in the JSON).",
      at(prov, "commit", "provenance").get<std::string>(),
      at(prov, "dirty", "provenance").get<bool>() ? " (with uncommitted changes)" : " (clean tree)",
      at(prov, "cpu", "provenance").get<std::string>(),
      at(prov, "cores", "provenance").get<int64_t>(),
      at(prov, "simd", "provenance").get<std::string>(),
      at(prov, "threads", "provenance").get<int64_t>(),
      at(prov, "started", "provenance").get<std::string>(),
      at(r, "seconds", "top level").get<double>(),
      r.value("smoke", false)                   ? "smoke"
      : at(r, "quick", "top level").get<bool>() ? "quick"
                                                : "full",
      at(inputs, "ladder", "inputs").get<std::string>(), at(inputs, "sha256", "inputs").size()));

  head(2, "What this page does not show");
  Block missing{Block::kList, 2, "", {}, {}, "", ""};
  for (const json& m : at(r, "not_measured", "top level")) {
    missing.items.push_back("Not measured by this run: " + m.get<std::string>() + ".");
  }
  missing.items.emplace_back(
      "Wall-clock figures (seam stall ms) come from this one machine, shared with other work "
      "while it ran; compare policies within a table, not with another machine.");
  missing.items.emplace_back(
      "The tiny ladder's text is plain rather than fluent: NLL and agreement compare policies, "
      "they do not rate the answers.");
  if (r.contains("switch")) {
    missing.items.emplace_back(
        "Switch cost on the tiny ladder stops at the longest context its rungs were trained "
        "for (max_position_embeddings); longer contexts are measured at the real geometries.");
  }
  if (r.contains("real")) {
    missing.items.emplace_back(
        "The real geometries carry random weights: their speed, memory and switch cost are "
        "real, their text and transfer quality mean nothing (transfer quality is the tiny "
        "ladder's). Their switch cost is one run per cell.");
  }
  if (r.contains("transfer")) {
    missing.items.emplace_back(
        "The pressure traces move l → m → s, so the precision route's ablation (a cross-size "
        "map in place of the diagonal re-alignment) shows in the transfer table of l → l-int8, "
        "hardly in the conditions.");
  }
  b.push_back(std::move(missing));

  head(2, "Conditions");
  const json& prompts = at(cond, "prompts", "conditions");
  int64_t prose = 0, chat = 0;
  for (const json& p : prompts) (p.at("kind") == "chat" ? chat : prose) += 1;
  const json& boot = at(cond, "bootstrap", "conditions");
  para(fmt::format(
      "Every policy on the same {} prompts ({} of held-out prose from `{}`, {} ChatML questions "
      "from `{}`), {} answer tokens each, greedy, under each trace below: A `hold`, B `small`, C "
      "`reprefill`, C′ `release-reprefill`, D `molt`, `heal`, `auto`. Each cell is the median over "
      "prompts with its {:.2f} bootstrap interval ({} resamples, seed {}). Seam stall: the longest "
      "downward switch of a run, in ms and in the receiver's decode steps; seam KL = KL(p_sender ‖ "
      "p_receiver) and transfer KL = KL(p_receiver,native ‖ p_receiver) at those seams; NLL after "
      "pressure: the top rung's NLL (read natively) of the answer from the trace's "
      "first cut on; agreement: the share of those tokens equal to the answer given without "
      "pressure; lost / duplicated: tokens missing from or repeated in the stream (must be 0).",
      prompts.size(), prose, at(inputs, "text", "inputs").get<std::string>(), chat,
      at(inputs, "needles", "inputs").get<std::string>(),
      at(cond, "max_tokens", "conditions").get<int64_t>(), boot.at("interval").get<double>(),
      boot.at("resamples").get<int64_t>(), boot.at("seed").get<int64_t>()));
  const json& policies = at(cond, "policies", "conditions");
  auto is_policy = [&](const json& name) {
    return std::find(policies.begin(), policies.end(), name) != policies.end();
  };
  auto table_for = [&](const std::string& trace) {
    Block t{Block::kTable, 2, "", {}, {kConditionHeader}, "", ""};
    for (const json& s : at(cond, "summary", "conditions")) {
      if (s.at("trace") == trace && is_policy(s.at("condition")))
        t.rows.push_back(condition_row(s));
    }
    return t;
  };
  head(3, "All traces together");
  b.push_back(table_for("all"));
  const std::string first_prompt = prompts.at(0).at("name").get<std::string>();
  for (const json& t : at(cond, "traces", "conditions")) {
    const std::string name = t.at("name").get<std::string>();
    head(3, fmt::format("Trace `{}`", name));
    para(t.at("description").get<std::string>());
    add_figure(fmt::format("results/conditions-{}.svg", name),
               fmt::format("Budget and accounted usage per session step, prompt {}", first_prompt),
               usage_chart(cond, name, first_prompt), b, page);
    b.push_back(table_for(name));
  }
  const json& ablations = at(cond, "ablations", "conditions");
  if (!ablations.empty()) {
    head(2, "Ablations");
    para(
        "Each mechanism removed or changed on its own, on the same prompts and traces, compared "
        "run "
        "by run with the condition it changes (Δ = ablation − baseline on the same trace and "
        "prompt: median and interval of the differences; a negative Δ of stall, transfer KL or NLL "
        "is the ablation doing better). Reported as measured, including where a mechanism does not "
        "pay for itself. heal against molt and auto against each fixed policy are the Conditions "
        "above.");
    Block list{Block::kList, 2, "", {}, {}, "", ""};
    for (const json& a : ablations) {
      list.items.push_back(fmt::format("`{}`: {} (against `{}`)", a.at("name").get<std::string>(),
                                       a.at("description").get<std::string>(),
                                       a.at("baseline").get<std::string>()));
    }
    b.push_back(std::move(list));
    Block t{Block::kTable,
            2,
            "",
            {},
            {{"ablation", "runs", "seam stall ms", "transfer KL", "NLL after pressure", "agreement",
              "Δ stall ms", "Δ transfer KL", "Δ NLL", "Δ agreement"}},
            "",
            ""};
    for (const json& s : at(cond, "summary", "conditions")) {
      if (s.at("trace") != "all" || !s.contains("paired")) continue;
      const json& d = s.at("paired");
      t.rows.push_back({fmt::format("`{}`", s.at("condition").get<std::string>()),
                        fmt::format("{}", s.at("runs").get<int64_t>()),
                        spread(s.at("max_stall_ms"), 1), spread(s.at("transfer_kl"), 3),
                        spread(s.at("nll_after_pressure"), 3), spread(s.at("agreement"), 2),
                        spread(d.at("max_stall_ms"), 1), spread(d.at("transfer_kl"), 3),
                        spread(d.at("nll_after_pressure"), 3), spread(d.at("agreement"), 2)});
    }
    b.push_back(std::move(t));
  }
  if (r.contains("switch")) {
    switch_section(r.at("switch"), "Switch cost against context",
                   switch_cost_terms(r.at("switch").at("repeats").get<int64_t>()), "switch", b,
                   page);
  }
  if (r.contains("transfer")) transfer_section(r.at("transfer"), b, page);
  if (r.contains("real")) real_section(r.at("real"), b, page);
  if (r.contains("kv")) kv_section(r.at("kv"), b);
  if (r.contains("tenants")) tenants_section(r.at("tenants"), b, page);
  page.markdown = markdown(b);
  page.html = html(b, "molt: results");
  return page;
}

}  // namespace molt
