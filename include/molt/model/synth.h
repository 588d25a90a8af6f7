// Synthetic checkpoints: random weights at a real Qwen2.5 geometry, written as a complete
// Hugging Face directory. Speed and footprint do not depend on weight values, so these give
// every speed and memory figure without downloading a model.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

#include "molt/common/dtype.h"
#include "molt/formats/hf_config.h"

namespace molt {

// The real configs of Qwen2.5-{0.5B,1.5B,3B}(-Instruct): "qwen2.5-0.5b", "qwen2.5-1.5b",
// "qwen2.5-3b". Throws molt::Error for an unknown name.
ModelConfig qwen25_geometry(const std::string& name);

struct SynthOptions {
  DType dtype = DType::BF16;
  uint64_t seed = 0;
  size_t max_shard_bytes = size_t{4} << 30;  // shards above this size, as HF does
  bool show_progress = false;
};

// Writes config.json, generation_config.json and model.safetensors (or shards + index).
// Weights are uniform with the variance of N(0, 1/fan_in): every layer adds O(1) to the residual
// stream, which stays finite through every layer; norms are 1, biases small.
void write_synthetic_checkpoint(const ModelConfig& config, const SynthOptions& options,
                                const std::filesystem::path& dir);

}  // namespace molt
