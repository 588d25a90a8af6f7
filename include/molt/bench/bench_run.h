// molt bench run: the whole evidence in one command (DESIGN.md §4 "bench", §6). It measures
// into one results.json — every raw figure with the machine, commit, ladder checksums, traces
// and seeds — and the results page (RESULTS.md, results.html, results_page.h) is generated from
// that JSON alone.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

namespace molt {

struct BenchRunOptions {
  std::filesystem::path ladder = "models/tiny-ladder/ladder.json";
  std::filesystem::path text = "models/tiny-ladder/data/test.txt";          // held-out prose
  std::filesystem::path needles = "models/tiny-ladder/data/needles.jsonl";  // chat questions
  std::filesystem::path traces_dir = "traces";  // the five traces of the evaluation
  std::vector<std::filesystem::path> traces;    // instead of them, when given
  bool quick = false;  // 4 prompts × 2 traces (a test's run) instead of 20 × 5
  int threads = 2;
};

// The traces of the evaluation, from the folder holding them: spike_mid_answer, slow_squeeze,
// flapping, cut_below_smallest, cut_and_recovery (quick: the first and the fourth).
std::vector<std::filesystem::path> evaluation_traces(const std::filesystem::path& dir, bool quick);

// Where and on what it ran: {"commit", "dirty", "cpu", "cores", "simd", "threads", "molt",
// "started"} (commit "unknown" outside a git checkout).
nlohmann::json run_provenance(const std::filesystem::path& source_dir, int threads);

// Every measured section; `progress(section, done, total)`.
nlohmann::json bench_run(
    const BenchRunOptions& o,
    const std::function<void(const std::string&, int64_t, int64_t)>& progress = {});

}  // namespace molt
