// A small Qwen2.5-shaped config for synthetic checkpoints in the model tests: every code path of
// the real geometry (GQA, biases, tied embeddings), sizes that fit a test.
#pragma once

#include "molt/formats/hf_config.h"
#include "molt/model/synth.h"

namespace molt::test {

inline ModelConfig small_config() {
  ModelConfig c = qwen25_geometry("qwen2.5-0.5b");
  c.hidden_size = 64, c.num_hidden_layers = 2, c.num_attention_heads = 4;
  c.num_key_value_heads = 2, c.head_dim = 16, c.intermediate_size = 128;
  c.vocab_size = 304, c.eos_token_ids = {303}, c.bos_token_id = 303;
  return c;
}

}  // namespace molt::test
