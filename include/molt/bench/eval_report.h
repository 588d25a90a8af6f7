// The tiny ladder's own quality, models/tiny-ladder/EVAL.md: tools/tiny-ladder/evaluate.sh runs
// `molt eval nll | needle` on every rung into a folder, eval_collect() gathers the runs into
// eval.json with the provenance of what they measured, and eval_report() writes the page from
// eval.json and the committed ladder beside it. No number is typed by hand;
// tests/cli/eval_trace_test.cc regenerates the page and checks the provenance.
#pragma once

#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

namespace molt {

// eval.json from `runs` (evaluate.sh's work/eval): run.json (what the script knows: commit,
// dirty tree, date, machine, threads) and, per rung of `manifest` (file names from the rung's
// path), <rung>.test.json (`molt eval nll --prefix`), <rung>.validation.json (optional) and
// <rung>.needle-<context>.json. Refuses runs that did not read the committed files (the rung's
// folder, data/test.txt, data/needles.jsonl beside the manifest); records their SHA-256 by name
// relative to the manifest's folder, and the SHA-256 of texts read from elsewhere apart. Each
// rung's training record comes from <training>/<rung>/state.json (train.py's) when there is
// one, else from `previous` (the eval.json being replaced; null for none).
nlohmann::json eval_collect(const std::filesystem::path& runs,
                            const std::filesystem::path& manifest,
                            const std::filesystem::path& training, const nlohmann::json& previous);

// EVAL.md from `eval_json`, which lies in the ladder's folder beside ladder.json.
std::string eval_report(const std::filesystem::path& eval_json);

// Generated block bodies (generated_block.h) that quote eval.json and the rungs' files:
// "tiny-ladder-needles" (the repository's README).
std::map<std::string, std::string> eval_blocks(const std::filesystem::path& eval_json);

}  // namespace molt
