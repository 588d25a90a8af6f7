// molt bench run: every measured section into DIR/results.json, then DIR/RESULTS.md,
// DIR/results.html and DIR/results/*.svg generated from that JSON alone (bench_run.h,
// results_page.h). `molt bench results --in DIR` regenerates the page from the JSON.
#include <fmt/core.h>

#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>

#include "cmd_transfer_util.h"
#include "command.h"
#include "molt/bench/bench_run.h"
#include "molt/bench/needles.h"
#include "molt/bench/results_page.h"
#include "molt/formats/atomic_file.h"
#include "molt/formats/hf_config.h"

namespace molt::cli {
namespace {

namespace fs = std::filesystem;

void write_page(const fs::path& dir, const nlohmann::json& results) {
  const ResultsPage page = results_page(results);
  for (const auto& [path, svg] : page.figures) {
    fs::create_directories((dir / path).parent_path());
    write_file_atomically(dir / path, svg);
  }
  write_file_atomically(dir / "RESULTS.md", page.markdown);
  write_file_atomically(dir / "results.html", page.html);
}

struct RunArgs {
  BenchRunOptions o;
  std::string out = "docs/results";
};

const bool registered = register_command([](CLI::App& root) {
  CLI::App* bench = group(root, "bench", "Benchmarks that print figures");
  {
    auto a = std::make_shared<RunArgs>();
    CLI::App* s = bench->add_subcommand(
        "run", "The whole evidence: results.json, then RESULTS.md and results.html from it");
    s->add_option("--ladder", a->o.ladder, "ladder manifest");
    s->add_option("--text", a->o.text, "held-out prose (prompts)");
    s->add_option("--needles", a->o.needles, "needle file (its ChatML questions are prompts)");
    s->add_option("--traces-dir", a->o.traces_dir, "folder of the evaluation's traces");
    s->add_option("--trace", a->o.traces, "these traces instead (repeatable)");
    s->add_flag("--quick", a->o.quick, "4 prompts × 2 traces (minutes → seconds)");
    s->add_flag("--smoke", a->o.smoke,
                "--quick at its smallest: 2 prompts, 1 window, 1 needle per set (checks the "
                "pipeline where compute is scarce, e.g. under emulation)");
    s->add_option("--out", a->out, "folder for results.json, RESULTS.md, results.html");
    s->add_option("--threads", a->o.threads, "threads (0 = all cores)")
        ->check(CLI::NonNegativeNumber);
    a->o.real_dir = default_real_dir();
    s->add_option("--real-dir", a->o.real_dir,
                  "synthetic checkpoints at the real geometries, made once and kept (full run "
                  "about 20 GB; quick about 2 GB)")
        ->capture_default_str();
    s->add_flag_callback(
        "--no-real", [a] { a->o.real_dir.clear(); },
        "skip the real geometries (speed, memory and switch cost of synthetic Qwen2.5 rungs)");
    s->callback([a] {
      std::unique_ptr<ProgressBar> bar;  // one per section
      std::string shown;
      const nlohmann::json results =
          bench_run(a->o, [&](const std::string& section, int64_t done, int64_t total) {
            if (!bar || section != shown) {
              if (bar) bar->finish();
              bar = std::make_unique<ProgressBar>("[" + section + "]", total);
              shown = section;
            }
            bar->update(done);
          });
      if (bar) bar->finish();
      fs::create_directories(a->out);
      write_file_atomically(fs::path(a->out) / "results.json", results.dump(1) + "\n");
      write_page(a->out, results);
      fmt::print("{}: results.json, RESULTS.md, results.html ({:.0f} s)\n", a->out,
                 results.at("seconds").get<double>());
    });
  }
  {
    auto dir = std::make_shared<std::string>();
    CLI::App* s = bench->add_subcommand(
        "results", "RESULTS.md and results.html again from DIR/results.json alone");
    s->add_option("--in", *dir, "folder holding results.json")->required();
    s->callback([dir] { write_page(*dir, read_json_file(fs::path(*dir) / "results.json")); });
  }
});

}  // namespace
}  // namespace molt::cli
