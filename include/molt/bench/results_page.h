// The results page (issue "molt bench run"): RESULTS.md and results.html generated from
// results.json alone (bench_run.h), the same blocks in both — tables, and SVG plots that the
// Markdown links (results/<name>.svg, written beside it) and the HTML carries inline, so that
// results.html is one self-contained file.
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <string>
#include <utility>
#include <vector>

namespace molt {

struct ResultsPage {
  std::string markdown, html;
  std::vector<std::pair<std::string, std::string>> figures;  // (path beside RESULTS.md, SVG)
};

// Errors name the field of `results` that is missing or of the wrong kind.
ResultsPage results_page(const nlohmann::json& results);

}  // namespace molt
