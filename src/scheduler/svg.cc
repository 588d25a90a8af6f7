// The tenants bench's timeline as plain SVG text: budget, accounted usage and RSS over rounds,
// and one band per tenant coloured by the rung it is on.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "molt/scheduler/bench.h"

namespace molt::sched {
namespace {

using json = nlohmann::json;

constexpr double kWidth = 960, kLeft = 90, kRight = 20, kTop = 40, kChart = 220;
constexpr double kBand = 18, kGap = 6;
const char* const kPalette[] = {"#1b9e77", "#d95f02", "#7570b3", "#e7298a", "#66a61e", "#e6ab02"};

std::string escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '&':
        out += "&amp;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

double value(const json& j) {
  return j.is_number() ? j.get<double>() : NAN;
}

struct Frame {
  size_t n = 1;
  double ymax = 1;
  double x(double round) const { return kLeft + round * (kWidth - kLeft - kRight) / n; }
  double y(double mib) const { return kTop + kChart - std::min(mib, ymax) / ymax * kChart; }
};

// One series as a step line (a value holds for its whole round).
std::string series(const json& rounds, const char* key, const Frame& f, const char* style) {
  std::string pts;
  for (size_t i = 0; i < rounds.size(); ++i) {
    const double v = value(rounds[i][key]);
    if (!std::isfinite(v)) continue;
    pts += fmt::format("{:.1f},{:.1f} {:.1f},{:.1f} ", f.x(i), f.y(v), f.x(i + 1.0), f.y(v));
  }
  return fmt::format("<polyline class=\"{}\" fill=\"none\" {} points=\"{}\"/>\n", key, style, pts);
}

std::string axes(const Frame& f) {
  std::string s = fmt::format(
      "<line x1=\"{0}\" y1=\"{1}\" x2=\"{0}\" y2=\"{2}\" stroke=\"#888\"/>\n"
      "<line x1=\"{0}\" y1=\"{2}\" x2=\"{3}\" y2=\"{2}\" stroke=\"#888\"/>\n",
      kLeft, kTop, kTop + kChart, kWidth - kRight);
  for (int k = 0; k <= 4; ++k) {
    const double mib = f.ymax * k / 4;
    s += fmt::format(
        "<text x=\"{:.1f}\" y=\"{:.1f}\" font-size=\"10\" text-anchor=\"end\">{:.0f} "
        "MiB</text>\n",
        kLeft - 4, f.y(mib) + 3, mib);
  }
  size_t step = 1;  // about ten labels: 1, 2, 5, 10, 20, 50, ...
  for (size_t k = 0; step * 10 < f.n; ++k) step = (k % 3 == 1 ? step / 2 * 5 : step * 2);
  for (size_t r = 0; r <= f.n; r += step) {
    s += fmt::format(
        "<text x=\"{:.1f}\" y=\"{:.1f}\" font-size=\"10\" text-anchor=\"middle\">{}"
        "</text>\n",
        f.x(static_cast<double>(r)), kTop + kChart + 12, r);
  }
  return s;
}

// Colour of a tenant's round: its rung's, hatched while suspended, pale while waiting.
std::string fill(const json& t, const std::vector<std::string>& rungs, bool& draw) {
  const std::string state = t["state"].get<std::string>();
  draw = state != "finished";
  if (state == "waiting") return "#e8e8e8";
  const auto it = t["rung"].is_string()
                      ? std::find(rungs.begin(), rungs.end(), t["rung"].get<std::string>())
                      : rungs.end();
  const size_t r = static_cast<size_t>(it - rungs.begin());
  if (state == "suspended") return "url(#parked)";
  return it == rungs.end() ? "#bbbbbb" : kPalette[r % std::size(kPalette)];
}

std::string bands(const json& rounds, const std::vector<std::string>& rungs, const Frame& f,
                  size_t tenant, double y) {
  std::string s;
  bool draw = false;
  const auto colour = [&](size_t i) { return fill(rounds[i]["tenants"][tenant], rungs, draw); };
  size_t start = 0;
  for (size_t i = 1; i <= rounds.size(); ++i) {
    if (i < rounds.size() && colour(i) == colour(start)) continue;
    const std::string c = colour(start);  // sets `draw` for the run [start, i)
    if (draw) {
      s += fmt::format(
          "<rect class=\"band\" x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" "
          "height=\"{}\" fill=\"{}\"/>\n",
          f.x(static_cast<double>(start)), y,
          f.x(static_cast<double>(i)) - f.x(static_cast<double>(start)), kBand, c);
    }
    start = i;
  }
  return s;
}

std::string legend(const std::vector<std::string>& rungs, double y) {
  std::string s;
  double x = kLeft;
  const auto item = [&](const std::string& colour, const std::string& label) {
    s += fmt::format(
        "<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"12\" height=\"12\" fill=\"{}\"/>"
        "<text x=\"{:.1f}\" y=\"{:.1f}\" font-size=\"11\">{}</text>\n",
        x, y, colour, x + 16, y + 10, escape(label));
    x += 24 + 7.0 * static_cast<double>(label.size());
  };
  for (size_t r = 0; r < rungs.size(); ++r) item(kPalette[r % std::size(kPalette)], rungs[r]);
  item("url(#parked)", "suspended");
  item("#e8e8e8", "waiting");
  s += fmt::format(
      "<text x=\"{:.1f}\" y=\"{:.1f}\" font-size=\"11\">— budget  "
      "<tspan fill=\"#1f5fbf\">— accounted</tspan>  <tspan fill=\"#e08a00\">- - RSS"
      "</tspan></text>\n",
      x + 10, y + 10);
  return s;
}

}  // namespace

std::string timeline_svg(const json& result) {
  const json& rounds = result["rounds"];
  const std::vector<std::string> rungs = result["rungs"].get<std::vector<std::string>>();
  const size_t n_tenants = rounds.empty() ? 0 : rounds[0]["tenants"].size();
  Frame f;
  f.n = std::max<size_t>(1, rounds.size());
  double ymax = 0;
  for (const json& r : rounds) {
    for (const char* k : {"budget_mib", "accounted_mib", "rss_mib"}) {
      const double v = value(r[k]);
      if (std::isfinite(v)) ymax = std::max(ymax, v);
    }
  }
  f.ymax = ymax > 0 ? ymax * 1.1 : 1;
  const double bands_top = kTop + kChart + 30;
  const double height = bands_top + static_cast<double>(n_tenants) * (kBand + kGap) + 40;
  std::string s = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{:.0f}\" height=\"{:.0f}\" "
      "viewBox=\"0 0 {:.0f} {:.0f}\" font-family=\"sans-serif\">\n"
      "<defs><pattern id=\"parked\" width=\"6\" height=\"6\" patternUnits=\"userSpaceOnUse\" "
      "patternTransform=\"rotate(45)\"><rect width=\"6\" height=\"6\" fill=\"#f4f4f4\"/>"
      "<line x1=\"0\" y1=\"0\" x2=\"0\" y2=\"6\" stroke=\"#777\" stroke-width=\"2\"/></pattern>"
      "</defs>\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
      "<text x=\"{:.0f}\" y=\"22\" font-size=\"14\">{} · {} · {}</text>\n",
      kWidth, height, kWidth, height, kLeft, escape(result.value("tenants_spec", "")),
      escape(result.value("policy", "")), escape(result.value("trace", "")));
  s += axes(f);
  s += series(rounds, "budget_mib", f, "stroke=\"#000\" stroke-width=\"1.5\"");
  s += series(rounds, "accounted_mib", f, "stroke=\"#1f5fbf\" stroke-width=\"1.5\"");
  s += series(rounds, "rss_mib", f,
              "stroke=\"#e08a00\" stroke-width=\"1\" stroke-dasharray=\"4 3\"");
  for (size_t t = 0; t < n_tenants; ++t) {
    const double y = bands_top + static_cast<double>(t) * (kBand + kGap);
    const std::string name = rounds[0]["tenants"][t]["name"].get<std::string>();
    s += fmt::format(
        "<text x=\"{:.1f}\" y=\"{:.1f}\" font-size=\"11\" text-anchor=\"end\">{}"
        "</text>\n",
        kLeft - 4, y + 13, escape(name));
    s += bands(rounds, rungs, f, t, y);
  }
  s += legend(rungs, bands_top + static_cast<double>(n_tenants) * (kBand + kGap) + 8);
  s += "</svg>\n";
  return s;
}

}  // namespace molt::sched
