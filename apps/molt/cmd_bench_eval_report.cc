// molt bench eval-collect | eval-report: models/tiny-ladder/eval.json from the runs of
// tools/tiny-ladder/evaluate.sh, and EVAL.md (plus the README blocks that quote the ladder)
// from it.

#include "command.h"
#include "molt/bench/eval_report.h"
#include "molt/bench/generated_block.h"
#include "molt/bench/ladder_card.h"
#include "molt/bench/needles.h"
#include "molt/common/error.h"
#include "molt/formats/atomic_file.h"

namespace molt::cli {
namespace {

namespace fs = std::filesystem;

struct ReportArgs {
  std::string in, out;
  std::vector<std::string> fill;
};

void report(const ReportArgs& a) {
  write_file_atomically(a.out, eval_report(a.in));
  if (a.fill.empty()) return;
  std::map<std::string, std::string> bodies = eval_blocks(a.in);
  bodies.merge(ladder_card_blocks(fs::path(a.in).parent_path() / "ladder.json"));
  for (const std::string& f : a.fill)
    write_file_atomically(f, fill_generated_blocks(read_text_file(f), bodies, f));
}

const bool registered = register_command([](CLI::App& root) {
  CLI::App* bench = group(root, "bench", "Benchmarks that print figures");
  {
    auto runs = std::make_shared<std::string>(), ladder = std::make_shared<std::string>(),
         training = std::make_shared<std::string>(), out = std::make_shared<std::string>();
    CLI::App* c = bench->add_subcommand(
        "eval-collect", "models/tiny-ladder/eval.json from the runs of evaluate.sh");
    c->add_option("--runs", *runs, "folder of `molt eval --json` runs and run.json")->required();
    c->add_option("--ladder", *ladder, "ladder manifest the runs measured")->required();
    c->add_option("--training", *training,
                  "train.py's runs (<dir>/<rung>/state.json); rungs without one keep the training "
                  "record of the eval.json replaced");
    c->add_option("--out", *out, "eval.json to write (its training records are kept)")->required();
    c->callback([runs, ladder, training, out] {
      const nlohmann::json previous =
          fs::exists(*out) ? nlohmann::json::parse(read_text_file(*out)) : nlohmann::json();
      write_file_atomically(*out, eval_collect(*runs, *ladder, *training, previous).dump(1) + "\n");
    });
  }
  {
    auto a = std::make_shared<ReportArgs>();
    CLI::App* r = bench->add_subcommand(
        "eval-report", "models/tiny-ladder/EVAL.md from eval.json and the committed ladder");
    r->add_option("--in", a->in, "eval.json (beside ladder.json)")->required();
    r->add_option("--out", a->out, "page to write")->required();
    r->add_option("--fill", a->fill,
                  "also rewrite the generated blocks of these pages (README.md, "
                  "models/tiny-ladder/README.md)");
    r->callback([a] { report(*a); });
  }
});

}  // namespace
}  // namespace molt::cli
