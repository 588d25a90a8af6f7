// Prefill and decode speed of one checkpoint beside the memory-bandwidth bound (`molt bench
// decode`, and the real geometries of `molt bench run`); with batch > 1, N sequences decoded
// together against the same sequences one at a time.
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "molt/model/model.h"
#include "molt/runtime/options.h"

namespace molt {

struct DecodeBenchOptions {
  int prompt_tokens = 128;
  int tokens = 32;
  std::string precision = "native";          // as stored, or int8 | q4 | q8 quantised at load
  WeightLayout layout = WeightLayout::Auto;  // MLX weights: see LoadOptions
  // A STREAM triad pass after every decode step: the bound timed in the same seconds.
  bool bandwidth = false;
  int rounds = 5;  // with bandwidth: decode rounds, each paired with its triad passes
  int batch = 1;
  KvDType kv_dtype = SessionOptions{}.kv_dtype;  // the product's default
};

// Loads `model` and measures on the kernel threads as they are set. The JSON holds every
// figure `molt bench decode --json` prints (model, prefill_tok_s, decode_tok_s,
// weight_bytes_per_token, decode_gb_s, kv_bytes_per_token, peak_rss_mib, config, FLOP counts;
// with bandwidth triad_gb_s, bound_tok_s, x_bound, triad_best_gb_s, rounds; with batch the
// batched and single figures). Throws when batched decoding changed a token.
nlohmann::json run_decode_bench(const std::filesystem::path& model, const DecodeBenchOptions& o);

}  // namespace molt
