// Speed, memory and switch cost at the real Qwen2.5 geometries (issue "molt bench run"):
// synthetic checkpoints (random weights, the real shapes: speed and memory do not depend on the
// values) written once into a folder and kept, quantised to each precision the runtime serves,
// then decoded beside a standalone STREAM triad, and switched down the real routes through the
// runtime's own migrate() with a shape map (random values, the real k).
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <utility>
#include <vector>

namespace molt {

struct RealBenchOptions {
  std::filesystem::path dir;  // checkpoints and the routes' ladder; reused when present
  std::vector<std::string> geometries = {"qwen2.5-0.5b", "qwen2.5-1.5b", "qwen2.5-3b"};
  // bf16 (as synthesised), int8 (per channel), q4 (MLX 4-bit, group 64), q4-rows8 (the same
  // weights re-laid out by 8 rows).
  std::vector<std::string> precisions = {"bf16", "int8", "q4", "q4-rows8"};
  int prompt_tokens = 512, tokens = 32, rounds = 4;
  int triad_repeats = 10;  // passes of the standalone triad before each decode; the best counts
  // Down the ladder, sender → receiver geometry.
  std::vector<std::pair<std::string, std::string>> routes = {{"qwen2.5-1.5b", "qwen2.5-0.5b"},
                                                             {"qwen2.5-3b", "qwen2.5-1.5b"}};
  std::vector<int64_t> contexts = {256, 1024, 4096};
  int switch_repeats = 1;
  int64_t shape_map_k = 16;
};

// The checkpoint folder of a geometry at a precision: <dir>/<geometry>-<precision>.
std::filesystem::path real_checkpoint(const RealBenchOptions& o, const std::string& geometry,
                                      const std::string& precision);

// {"checkpoints": {name: {geometry, precision, made_by, bytes, sha256}}, "speed": [one
// run_decode_bench JSON per geometry and precision, with "triad_standalone_gb_s" (the best of
// triad_repeats passes just before it) and "footprint" {weight_mib, kv_bytes_per_token,
// scratch_mib, total_mib_at: {context: MiB}}], "switch": {"shape_map_k", "routes", run_switch_bench
// rows}}. `progress(section, done, total)`.
nlohmann::json run_real_bench(
    const RealBenchOptions& o,
    const std::function<void(const std::string&, int64_t, int64_t)>& progress = {});

}  // namespace molt
