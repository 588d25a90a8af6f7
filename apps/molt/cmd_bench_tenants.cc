// molt bench tenants: several tenants on one ladder under a pressure trace (src/scheduler/).
#include <fmt/core.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>

#include "command.h"
#include "molt/common/error.h"
#include "molt/scheduler/bench.h"

namespace molt::cli {
namespace {

struct BenchTenantsArgs {
  sched::TenantsBenchOptions o;
  bool json = false;
  std::string out;
};

void write_file(const std::filesystem::path& p, const std::string& text) {
  if (p.has_parent_path()) std::filesystem::create_directories(p.parent_path());
  std::ofstream f(p, std::ios::binary);
  f << text;
  if (!f) fail("{}: cannot write", p.string());
}

void run(const BenchTenantsArgs& a) {
  const nlohmann::json result = sched::run_tenants_bench(a.o);
  if (!a.out.empty()) {
    std::filesystem::path svg = a.out;
    svg.replace_extension(".svg");
    write_file(a.out, result.dump(1) + "\n");
    write_file(svg, sched::timeline_svg(result));
    if (!a.json) fmt::print("wrote {} and {}\n", a.out, svg.string());
  }
  if (a.json) {
    fmt::print("{}\n", result.dump());
  } else {
    fmt::print("{}", sched::summary_table(result));
  }
  const nlohmann::json& s = result["summary"];
  if (!s["all_finished"].get<bool>() || s["killed"].get<int64_t>() != 0) set_exit_code(1);
}

const bool registered = register_command([](CLI::App& root) {
  auto a = std::make_shared<BenchTenantsArgs>();
  CLI::App* s =
      group(root, "bench", "Benchmarks that print figures")
          ->add_subcommand("tenants", "Tenants sharing one moving budget (the scheduler)");
  s->add_option("--ladder", a->o.ladder, "ladder manifest")->required();
  s->add_option("--trace", a->o.trace, "pressure trace (unit tokens counts rounds)")->required();
  s->add_option("--tenants", a->o.tenants, "fg|bg[:TOKENS][@ROUND], comma-separated")
      ->capture_default_str();
  s->add_option("--policy", a->o.policy, "every tenant's migration policy")->capture_default_str();
  s->add_option("--threads", a->o.threads, "threads (0 = all cores)")
      ->check(CLI::NonNegativeNumber);
  s->add_option("--max-rounds", a->o.max_rounds, "stop after this many rounds")
      ->check(CLI::PositiveNumber);
  s->add_option("--out", a->out, "write the JSON here and the SVG timeline beside it (.svg)");
  s->add_flag("--json", a->json, "print the JSON (timeline and summary) instead of the table");
  s->callback([a] { run(*a); });
});

}  // namespace
}  // namespace molt::cli
