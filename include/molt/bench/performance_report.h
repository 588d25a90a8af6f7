// The evidence behind docs/PERFORMANCE.md: the files a speed figure was measured on, and the page
// generated from the JSON that scripts/performance.sh writes (no number typed by hand;
// tests/cli/performance_trace_test.cc regenerates it and compares).
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

namespace molt {

// {file name: SHA-256 hex} of what Model::load reads from checkpoint folder `dir`: config.json,
// every *.safetensors and the shard index when there is one.
nlohmann::json checkpoint_sha256(const std::filesystem::path& dir);

// docs/PERFORMANCE.md from `dir` (docs/figures/performance): run.json (commit, machine, load,
// standalone STREAM triad at start and end, how each checkpoint was made, SHA-256 of the tiny
// ladder files), sgemm.json (`molt bench sgemm --json`), decode.jsonl (`molt bench decode
// --bandwidth --json`, each beside a standalone triad just before and after it), nll.jsonl
// (`molt eval nll --json`) and, from a full run, the microbenchmarks' quant_bench.json,
// kernels_bench.json and quant_hot.json.
std::string performance_report(const std::filesystem::path& dir);

}  // namespace molt
