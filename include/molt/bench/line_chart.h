// A line chart as a self-contained SVG string (the generated pages' plots): series of (x, y)
// points on a linear y axis and a linear, log or "h + 1" log x axis, with a legend. Plain text,
// deterministic: the same series always give the same bytes.
#pragma once

#include <string>
#include <vector>

namespace molt {

struct ChartSeries {
  std::string name;
  std::string color = "#333333";
  bool dashed = false;
  double width = 2;  // stroke: a wider series drawn first stays visible under one it meets
  std::vector<std::pair<double, double>> points;  // (x, y), drawn in the order given
};

enum class XScale {
  kLinear,
  kLog,         // x > 0
  kLogPlusOne,  // log(x + 1): x ≥ 0, so 0 has a place (tokens after an event)
};

struct LineChart {
  std::string title, x_label, y_label;
  XScale x_scale = XScale::kLinear;
  double y_min = 0, y_max = 1;  // fixed (accuracies) so charts side by side compare
  bool y_log = false;           // log10 y between y_min > 0 and y_max (costs over decades)
  std::vector<double> x_ticks;  // labelled x values (empty: the points' distinct x)
  std::vector<ChartSeries> series;
};

// Text for SVG or HTML: <, >, & and " as entities.
std::string markup_escaped(const std::string& s);

// Throws naming the series when a point is outside the axes' domain.
std::string line_chart_svg(const LineChart& chart);

}  // namespace molt
