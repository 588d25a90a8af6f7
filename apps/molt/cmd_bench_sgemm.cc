// molt bench sgemm — OpenBLAS sgemm GFLOP/s at prefill shapes: the peak prefill is held to.
#include <fmt/format.h>

#include <algorithm>
#include <memory>
#include <nlohmann/json.hpp>

#include "command.h"
#include "molt/common/error.h"
#include "molt/kernels/bandwidth.h"
#include "molt/kernels/threads.h"

namespace molt::cli {
namespace {

struct SgemmOptions {
  int64_t tokens = 512;
  int threads = 0;
  int repeats = 3;
  bool json = false;
};

void run_sgemm(const SgemmOptions& o) {
  if (o.tokens < 1) fail("bench sgemm: --tokens must be at least 1");
  if (o.repeats < 1) fail("bench sgemm: --repeats {} must be at least 1", o.repeats);
  set_num_threads(o.threads);
  // [out, in] of the Qwen2.5-0.5B and 1.5B MLP and attention matrices, and a square one.
  const int64_t shapes[][2] = {{4864, 896},  {896, 4864},  {8960, 1536},
                               {1536, 8960}, {1536, 1536}, {2048, 2048}};
  nlohmann::json runs = nlohmann::json::array();
  double peak = 0.0;
  for (const auto& s : shapes) {
    const double g = measure_sgemm_gflops(o.tokens, s[0], s[1], o.repeats);
    peak = std::max(peak, g);
    runs.push_back({{"m", o.tokens}, {"n", s[0]}, {"k", s[1]}, {"gflop_s", g}});
    if (!o.json) fmt::print("sgemm {:5} x {:5} x {:5}  {:7.1f} GFLOP/s\n", o.tokens, s[0], s[1], g);
  }
  if (o.json) {
    nlohmann::json j = {{"peak_gflop_s", peak}, {"threads", num_threads()}, {"runs", runs}};
    fmt::print("{}\n", j.dump());
  } else {
    fmt::print("peak  {:7.1f} GFLOP/s ({} threads)\n", peak, num_threads());
  }
}

[[maybe_unused]] const bool registered = register_command([](CLI::App& root) {
  CLI::App* bench = group(root, "bench", "Measure speed and memory");
  CLI::App* cmd = bench->add_subcommand(
      "sgemm", "OpenBLAS sgemm GFLOP/s at prefill shapes (the peak prefill is compared with)");
  auto o = std::make_shared<SgemmOptions>();
  cmd->add_option("--tokens", o->tokens, "rows of x (prompt tokens)")->capture_default_str();
  cmd->add_option("--threads", o->threads, "Threads (0 = all cores)")->capture_default_str();
  cmd->add_option("--repeats", o->repeats, "Timed runs; the best is reported")
      ->capture_default_str();
  cmd->add_flag("--json", o->json, "Print one JSON object");
  cmd->callback([o] { run_sgemm(*o); });
});

}  // namespace
}  // namespace molt::cli
