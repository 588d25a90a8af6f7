// molt bench serve: concurrent streaming clients against the server on loopback.
#include <fmt/core.h>

#include <fstream>
#include <memory>

#include "command.h"
#include "molt/common/error.h"
#include "molt/server/bench_serve.h"

namespace molt::cli {
namespace {

struct BenchServeArgs {
  server::ServeBenchOptions o;
  bool json = false;
  std::string out;
};

void run(BenchServeArgs& a) {
  a.o.progress = stderr_is_tty() && !a.json;
  const nlohmann::json r = server::run_serve_bench(a.o);
  if (!a.out.empty()) {
    std::ofstream f(a.out);
    f << r.dump(1) << "\n";
    if (!f) fail("{}: cannot write", a.out);
  }
  fmt::print("{}", a.json ? r.dump() + "\n" : server::serve_bench_table(r));
  if (r["errors"].get<int64_t>() != 0) set_exit_code(1);
}

const bool registered = register_command([](CLI::App& root) {
  auto a = std::make_shared<BenchServeArgs>();
  CLI::App* s = group(root, "bench", "Benchmarks that print figures")
                    ->add_subcommand("serve", "Concurrent streaming clients against molt serve");
  s->add_option("--ladder", a->o.ladder, "ladder manifest")->required();
  s->add_option("--streams", a->o.streams, "concurrent clients")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  s->add_option("--seconds", a->o.seconds, "duration")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  s->add_option("--max-tokens", a->o.max_tokens, "tokens per answer")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  s->add_option("--cut-at", a->o.cut_at, "fraction of the run at which the budget is squeezed")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  s->add_option("--restore-at", a->o.restore_at, "fraction at which it is given back (1: never)")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  s->add_option("--cut-rung", a->o.cut_rung, "the rung squeezed to (default: the second)");
  s->add_option("--min-round-ms", a->o.min_round_ms, "pace the server's rounds")
      ->check(CLI::NonNegativeNumber);
  s->add_option("--threads", a->o.threads, "compute threads (0 = all cores)")
      ->check(CLI::NonNegativeNumber);
  s->add_option("--out", a->out, "write the JSON here");
  s->add_flag("--json", a->json, "print the JSON instead of the table");
  s->callback([a] { run(*a); });
});

}  // namespace
}  // namespace molt::cli
