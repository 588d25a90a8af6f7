// molt bench bandwidth — the memory bandwidth that bounds decode speed on this machine.
#include <fmt/format.h>

#include <memory>
#include <nlohmann/json.hpp>

#include "command.h"
#include "molt/common/error.h"
#include "molt/kernels/bandwidth.h"
#include "molt/kernels/threads.h"

namespace molt::cli {
namespace {

struct BandwidthOptions {
  size_t mib = 128;
  int threads = 0;
  int repeats = 10;
  bool json = false;
};

void run_bandwidth(const BandwidthOptions& o) {
  if (o.mib < 1) fail("bench bandwidth: --mib must be at least 1");
  if (o.threads < 0) fail("bench bandwidth: --threads {} must be 0 (all cores) or more", o.threads);
  if (o.repeats < 1) fail("bench bandwidth: --repeats {} must be at least 1", o.repeats);
  set_num_threads(o.threads);
  const double triad = measure_triad_bandwidth_gbs(o.mib, o.repeats);
  const double read = measure_read_bandwidth_gbs(o.mib, o.repeats);
  if (o.json) {
    nlohmann::json j = {{"triad_gb_s", triad},
                        {"read_gb_s", read},
                        {"mib_per_array", o.mib},
                        {"threads", num_threads()},
                        {"repeats", o.repeats}};
    fmt::print("{}\n", j.dump());
    return;
  }
  fmt::print("triad  {:7.2f} GB/s  (a = b + s*c, 3 x {} MiB float arrays, 3 x 4 bytes/element)\n",
             triad, o.mib);
  fmt::print("read   {:7.2f} GB/s  (sum over {} MiB)\n", read, o.mib);
  fmt::print("threads {}, best of {} runs\n", num_threads(), o.repeats);
}

[[maybe_unused]] const bool registered = register_command([](CLI::App& root) {
  CLI::App* bench = group(root, "bench", "Measure speed and memory");
  CLI::App* cmd = bench->add_subcommand(
      "bandwidth", "STREAM triad memory bandwidth (the bound for decode tokens/s)");
  auto o = std::make_shared<BandwidthOptions>();
  cmd->add_option("--mib", o->mib, "Size of each of the three arrays in MiB (>> cache)")
      ->capture_default_str();
  cmd->add_option("--threads", o->threads, "Threads (0 = all cores)")->capture_default_str();
  cmd->add_option("--repeats", o->repeats, "Timed runs; the best is reported")
      ->capture_default_str();
  cmd->add_flag("--json", o->json, "Print one JSON object");
  cmd->callback([o] { run_bandwidth(*o); });
});

}  // namespace
}  // namespace molt::cli
