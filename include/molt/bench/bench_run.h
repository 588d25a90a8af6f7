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
  // quick with every section at its smallest: 2 prompts, 1 evaluation window of 512 tokens, 1
  // needle per set. It checks the whole pipeline where compute is scarce (under emulation); its
  // figures mean little.
  bool smoke = false;
  int threads = 2;
  // The real geometries' synthetic checkpoints, made on the first run and kept (about 20 GB:
  // Qwen2.5 0.5B, 1.5B and 3B at bf16, int8 and 4-bit; a quick run makes only 0.5B's, about 2 GB).
  // Empty: no real-geometry sections.
  std::filesystem::path real_dir;
};

// Where the real geometries' checkpoints go unless told: $XDG_CACHE_HOME/molt/real-geometries,
// else $HOME/.cache/molt/real-geometries, else under the temporary folder.
std::filesystem::path default_real_dir();

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
