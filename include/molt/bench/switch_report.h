// The evidence behind docs/SWITCHING.md: what `molt bench switch --json` was measured on, and
// the page generated from the JSON that scripts/switch-figures.sh writes (no number typed by
// hand; tests/cli/docs_trace_test.cc regenerates it and compares).
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "molt/ladder/ladder.h"

namespace molt {

// {"event": "provenance", "ladder", "manifest", "from", "to", "sha256": {file: hex}}: the
// SHA-256 of every file a switch from → to reads: the manifest, both rungs' config.json and
// *.safetensors, and every file of the route's map folder. File names are relative to the
// manifest's folder.
nlohmann::json switch_provenance(const Ladder& ladder, int from, int to);

// docs/SWITCHING.md from `dir` (docs/figures/switch): run.json (commit, machine, load, STREAM
// triad), tiny-*.jsonl and real-*.jsonl (`molt bench switch --json`) and
// real-transfer-*.json (`molt bench transfer --json`).
std::string switch_report(const std::filesystem::path& dir);

}  // namespace molt
