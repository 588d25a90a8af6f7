// A ladder's figures computed from its committed files alone (configs, safetensors headers,
// tokenizer.json, data/), for the generated blocks of models/tiny-ladder/README.md: nothing
// there is typed by hand, and tests/cli/eval_trace_test.cc regenerates and compares.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>

namespace molt {

// The model's weights as trained, from the safetensors headers of checkpoint `dir`: every
// element, a packed word counted as the values it holds, quantisation scales and biases not
// counted (so a quantised rung counts what its source does).
int64_t parameter_count(const std::filesystem::path& dir);

// Block bodies by name (generated_block.h), from the ladder of `manifest`:
//   tiny-ladder-rungs      geometry, parameters and weight file size per rung, what every rung
//                          shares, intermediate / hidden beside Qwen2.5's
//   tiny-ladder-tokenizer  vocabulary, merges, added tokens; bytes per token on data/test.txt
//   tiny-ladder-data       the test split's size, the needles per context
std::map<std::string, std::string> ladder_card_blocks(const std::filesystem::path& manifest);

}  // namespace molt
