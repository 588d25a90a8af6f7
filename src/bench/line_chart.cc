#include "molt/bench/line_chart.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <vector>

#include "molt/common/error.h"

namespace molt {
namespace {

constexpr double kWidth = 720, kHeight = 300, kLeft = 56, kRight = 230, kTop = 34, kBottom = 46;

double scaled(XScale s, double x) {
  switch (s) {
    case XScale::kLog:
      return std::log10(x);
    case XScale::kLogPlusOne:
      return std::log10(x + 1);
    default:
      return x;
  }
}

std::string label(double v) {
  if (v == std::floor(v) && std::abs(v) < 1e9) return fmt::format("{:.0f}", v);
  return fmt::format("{:g}", v);
}

}  // namespace

std::string markup_escaped(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '<') {
      out += "&lt;";
    } else if (c == '>') {
      out += "&gt;";
    } else if (c == '&') {
      out += "&amp;";
    } else if (c == '"') {
      out += "&quot;";
    } else {
      out += c;
    }
  }
  return out;
}

std::string line_chart_svg(const LineChart& c) {
  std::set<double> xs(c.x_ticks.begin(), c.x_ticks.end());
  const bool auto_ticks = xs.empty();
  double x_lo = xs.empty() ? INFINITY : *xs.begin(), x_hi = xs.empty() ? -INFINITY : *xs.rbegin();
  for (const ChartSeries& s : c.series) {
    for (const auto& [x, y] : s.points) {
      const bool ok = std::isfinite(x) && std::isfinite(y) &&
                      (c.x_scale != XScale::kLog || x > 0) &&
                      (c.x_scale != XScale::kLogPlusOne || x >= 0);
      if (!ok)
        fail("chart '{}': series '{}' has a point ({}, {}) off its axes", c.title, s.name, x, y);
      if (auto_ticks) xs.insert(x);
      x_lo = std::min(x_lo, x);  // the axis spans every point, labelled or not
      x_hi = std::max(x_hi, x);
    }
  }
  if (xs.empty()) fail("chart '{}': no points", c.title);
  if (!(c.y_max > c.y_min))
    fail("chart '{}': y range [{}, {}] is empty", c.title, c.y_min, c.y_max);
  if (c.y_log && !(c.y_min > 0)) fail("chart '{}': a log y axis needs y_min > 0", c.title);
  double lo = scaled(c.x_scale, x_lo), hi = scaled(c.x_scale, x_hi);
  if (hi <= lo) hi = lo + 1;
  // y grid: five even steps, or on a log axis 1 and 3 of every decade in range.
  std::vector<double> grid;
  if (c.y_log) {
    const int first = static_cast<int>(std::floor(std::log10(c.y_min)));
    for (int e = first; std::pow(10.0, e) <= c.y_max * 1.0001; ++e) {
      const double d = std::pow(10.0, e);
      for (const double y : {d, 3 * d}) {
        if (y >= c.y_min * 0.9999 && y <= c.y_max * 1.0001) grid.push_back(y);
      }
    }
  } else {
    for (int i = 0; i <= 4; ++i) grid.push_back(c.y_min + (c.y_max - c.y_min) * i / 4.0);
  }
  // The plot moves right of its widest y tick label (about 7 px a character at 12 px), so the
  // axis title beside them never overlaps one.
  size_t widest = 0;
  for (const double y : grid) widest = std::max(widest, label(std::round(y * 100) / 100).size());
  const double left = std::max(kLeft, 28.0 + 7.0 * static_cast<double>(widest));
  const double pw = kWidth - left - kRight, ph = kHeight - kTop - kBottom;
  auto px = [&](double x) { return left + (scaled(c.x_scale, x) - lo) / (hi - lo) * pw; };
  auto yv = [&](double y) { return c.y_log ? std::log10(std::max(y, c.y_min)) : y; };
  auto py = [&](double y) {
    const double lo_y = yv(c.y_min), hi_y = yv(c.y_max);
    return kTop + (1 - (std::clamp(yv(y), lo_y, hi_y) - lo_y) / (hi_y - lo_y)) * ph;
  };
  std::string svg = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} "
      "{1}\" font-family=\"sans-serif\" font-size=\"12\">\n"
      "<rect width=\"{0}\" height=\"{1}\" fill=\"white\"/>\n"
      "<text x=\"{2}\" y=\"20\" font-size=\"14\" font-weight=\"bold\">{3}</text>\n",
      kWidth, kHeight, left, markup_escaped(c.title));
  for (const double y : grid) {
    const double Y = py(y);
    svg += fmt::format(
        "<line x1=\"{0}\" y1=\"{1:.1f}\" x2=\"{2}\" y2=\"{1:.1f}\" stroke=\"#dddddd\"/>\n"
        "<text x=\"{3}\" y=\"{4:.1f}\" text-anchor=\"end\">{5}</text>\n",
        left, Y, left + pw, left - 6, Y + 4, label(std::round(y * 100) / 100));
  }
  for (double x : xs) {
    const double X = px(x);
    svg += fmt::format(
        "<line x1=\"{0:.1f}\" y1=\"{1}\" x2=\"{0:.1f}\" y2=\"{2}\" stroke=\"#eeeeee\"/>\n"
        "<text x=\"{0:.1f}\" y=\"{3}\" text-anchor=\"middle\">{4}</text>\n",
        X, kTop, kTop + ph, kTop + ph + 16, label(x));
  }
  svg += fmt::format(
      "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#888888\"/>\n"
      "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n"
      "<text transform=\"translate(16 {}) rotate(-90)\" text-anchor=\"middle\">{}</text>\n",
      left, kTop, pw, ph, left + pw / 2, kHeight - 10, markup_escaped(c.x_label), kTop + ph / 2,
      markup_escaped(c.y_label));
  for (size_t i = 0; i < c.series.size(); ++i) {
    const ChartSeries& s = c.series[i];
    std::string pts;
    for (const auto& [x, y] : s.points) pts += fmt::format("{:.1f},{:.1f} ", px(x), py(y));
    if (!pts.empty()) pts.pop_back();
    const std::string dash = s.dashed ? " stroke-dasharray=\"6 4\"" : "";
    svg += fmt::format(
        "<polyline points=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"{:g}\"{}/>\n", pts,
        s.color, s.width, dash);
    for (const auto& [x, y] : s.points) {
      svg += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"3\" fill=\"{}\"/>\n", px(x),
                         py(y), s.color);
    }
    const double ly = kTop + 8 + 18 * static_cast<double>(i), lx = left + pw + 12;
    svg += fmt::format(
        "<line x1=\"{0}\" y1=\"{1}\" x2=\"{2}\" y2=\"{1}\" stroke=\"{3}\" "
        "stroke-width=\"{4:g}\"{5}/>\n"
        "<text x=\"{6}\" y=\"{7}\">{8}</text>\n",
        lx, ly, lx + 24, s.color, s.width, dash, lx + 30, ly + 4, markup_escaped(s.name));
  }
  return svg + "</svg>\n";
}

}  // namespace molt
