// molt bench perf-report: docs/PERFORMANCE.md from the JSON of scripts/performance.sh.
#include <fstream>

#include "command.h"
#include "molt/bench/performance_report.h"
#include "molt/common/error.h"

namespace molt::cli {
namespace {

const bool registered = register_command([](CLI::App& root) {
  auto in = std::make_shared<std::string>(), out = std::make_shared<std::string>();
  CLI::App* r = group(root, "bench", "Benchmarks that print figures")
                    ->add_subcommand("perf-report",
                                     "docs/PERFORMANCE.md from the JSON of scripts/performance.sh");
  r->add_option("--in", *in, "figures folder (docs/figures/performance)")->required();
  r->add_option("--out", *out, "page to write")->required();
  r->callback([in, out] {
    const std::string md = performance_report(*in);
    std::ofstream f(*out, std::ios::binary);
    if (!(f << md)) fail("perf-report: cannot write {}", *out);
  });
});

}  // namespace
}  // namespace molt::cli
