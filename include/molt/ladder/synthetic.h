// A synthetic ladder: random-weight Qwen2 rungs at small sizes sharing one byte-level BPE
// tokenizer (merges.txt), plus ladder.json. For tests and for `molt demo --synthetic` until the
// trained tiny ladder (models/tiny-ladder) is present; speed, memory and every mechanism of
// the runtime behave the same, only the text is noise.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "molt/common/dtype.h"

namespace molt {

struct SyntheticRung {
  std::string name;
  int64_t hidden = 0, layers = 0, heads = 0, kv_heads = 2, head_dim = 0, intermediate = 0;
};

struct SyntheticLadderOptions {
  // The tiny ladder's geometry (tools/tiny-ladder/model.py): l → m changes head_dim like
  // 1.5B → 0.5B, m → s keeps it.
  std::vector<SyntheticRung> rungs = {
      {"l", 256, 6, 4, 2, 64, 768}, {"m", 192, 5, 6, 2, 32, 576}, {"s", 128, 4, 4, 2, 32, 384}};
  int64_t vocab = 512;  // 256 bytes + merges
  DType dtype = DType::BF16;
  uint64_t seed = 1;
  double rope_theta = 10000.0;
  // Routes between every ordered pair of rungs. "maps" routes name <dir>/maps/<from>-<to> (absent
  // until someone fits them: the runtime then falls back to re-prefill); "reprefill" routes
  // carry no map.
  std::string route_method = "maps";
  bool tokenizer = true;       // write merges.txt into each rung
  std::string tokenizer_salt;  // non-empty: rung 0 gets a different merge list (tests)
};

// Writes <dir>/<rung>/{config.json, generation_config.json, model.safetensors, merges.txt}
// and <dir>/ladder.json; returns the manifest path.
std::filesystem::path write_synthetic_ladder(const std::filesystem::path& dir,
                                             const SyntheticLadderOptions& options = {});

}  // namespace molt
