// What the KV cache's precision costs and saves (issue "prefill at peak … and a half-size KV
// cache"): per K/V row type (f32, f16, int8), each rung's bytes per cached token, the prefix NLL
// of held-out text read through a cache of that type, and the needles answered greedily with it.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <nlohmann/json_fwd.hpp>
#include <span>
#include <vector>

#include "molt/ladder/ladder.h"

namespace molt {

struct KvBenchOptions {
  int64_t context = 512;  // tokens per NLL window
  int64_t windows = 12;   // consecutive windows of the text, averaged
  // (context, count) of the needle sets read from the needles file, on the top rung.
  std::vector<std::pair<int64_t, int64_t>> needles = {{700, 20}, {2048, 10}};
};

// `text`: ids of held-out prose (at least windows × context). {"types": [...], "context",
// "windows", "rungs": [{rung, bytes_per_token: {type: n}, bytes_ratio: {type: x}, nll: {type:
// x}, nll_change_pct: {type: x}}], "needles": [{context, count, rung, correct: {type: n},
// same_as_f32: {type: bool}}]}; ratios and changes are against f32.
nlohmann::json run_kv_bench(Ladder& ladder, std::span<const int32_t> text,
                            const std::filesystem::path& needles, const KvBenchOptions& o,
                            const std::function<void(int64_t, int64_t)>& progress = {});

}  // namespace molt
