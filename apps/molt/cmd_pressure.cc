// molt pressure: the budget sources. `hog` takes memory away (a real allocation, every page
// written); `probe` shows which live signals this machine has; `trace` validates and prints a
// trace file.
#include <fmt/format.h>

#include <chrono>
#include <thread>

#include "command.h"
#include "molt/common/error.h"
#include "molt/pressure/hog.h"
#include "molt/pressure/live.h"

namespace molt::cli {
namespace {

struct HogArgs {
  size_t mib = 256;
  double hold_ms = 10000;
};

struct ProbeArgs {
  int samples = 1;
  double interval_ms = 500;
};

void probe(const ProbeArgs& a) {
  LiveBudget live;
  for (const std::string& n : live.notes()) fmt::print("{}\n", n);
  for (int i = 0; i < a.samples; ++i) {
    if (i > 0)
      std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(a.interval_ms));
    fmt::print("budget (for a session using 0 MiB): {:.0f} MiB\n", live.budget_mib(BudgetQuery{}));
  }
}

void show_trace(const std::string& file) {
  const PressureTrace t = PressureTrace::load(file);
  fmt::print("{}: {} points, unit {}\n", t.name, t.points.size(),
             t.unit == TraceUnit::kTokens ? "tokens" : "ms");
  for (const TracePoint& p : t.points) {
    fmt::print("  at {:>8}: {}\n", p.at,
               p.relative ? fmt::format("{:.2f} × the top rung's footprint", p.value)
                          : fmt::format("{:.1f} MiB", p.value));
  }
}

const bool registered = register_command([](CLI::App& root) {
  CLI::App* g = root.add_subcommand("pressure", "Memory budget sources: hog, probe, trace");
  g->require_subcommand(1);

  auto h = std::make_shared<HogArgs>();
  CLI::App* hog = g->add_subcommand("hog", "Allocate and hold memory (makes real pressure)");
  hog->add_option("--mib", h->mib, "MiB to allocate (every page written)")
      ->check(CLI::PositiveNumber);
  hog->add_option("--hold-ms", h->hold_ms, "how long to hold it")->check(CLI::NonNegativeNumber);
  hog->callback([h] {
    hog_foreground(h->mib, h->hold_ms, [](size_t bytes) {
      fmt::print("hog: holding {} MiB\n", bytes >> 20);
      std::fflush(stdout);
    });
    fmt::print("hog: released\n");
  });

  auto p = std::make_shared<ProbeArgs>();
  CLI::App* pr = g->add_subcommand("probe", "Show the live memory signals of this machine");
  pr->add_option("--samples", p->samples, "budget readings")->check(CLI::PositiveNumber);
  pr->add_option("--interval-ms", p->interval_ms, "between readings")
      ->check(CLI::NonNegativeNumber);
  pr->callback([p] { probe(*p); });

  auto file = std::make_shared<std::string>();
  CLI::App* tr = g->add_subcommand("trace", "Validate and print a pressure trace");
  tr->add_option("file", *file, "trace JSON")->required();
  tr->callback([file] { show_trace(*file); });
});

}  // namespace
}  // namespace molt::cli
