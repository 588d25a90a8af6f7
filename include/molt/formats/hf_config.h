// Hugging Face config.json (Qwen2ForCausalLM) and generation_config.json.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace molt {

// One layer's quantisation: bits 0 = left dense.
struct QuantLayer {
  int group_size = 0;
  int bits = 0;
};

// config.json "quantization" (or "quantization_config"); absent = dense.
//   MLX affine: {"group_size": G, "bits": B}, G in 32/64/128, B in 2/3/4/6/8, optionally with
//   per-layer entries {"model.layers.0.mlp.down_proj": {"group_size": G, "bits": B} or false}.
//   molt symmetric int8: {"mode": "int8", "bits": 8, "group_size": G}, G = 0 per channel.
struct QuantSpec {
  QuantSpec() = default;
  QuantSpec(int g, int b) : group_size(g), bits(b) {}
  int group_size = 0;
  int bits = 0;
  std::string mode = "affine";  // "affine" or "int8"
  // "rows" (MLX: [rows, packed cols]) or "rows8" (molt: affine weights with rows interleaved
  // in blocks of 8, weight [rows / 8, packed cols · 8], scales and biases [rows / 8, groups · 8];
  // see WeightMatrix::rows8). MLX itself cannot read rows8 files: the shapes differ.
  std::string layout = "rows";
  std::map<std::string, QuantLayer> layers;  // per-layer overrides, by module path
  // The spec of module `path` (e.g. "model.layers.3.self_attn.q_proj").
  QuantLayer layer(const std::string& path) const {
    auto it = layers.find(path);
    return it != layers.end() ? it->second : QuantLayer{group_size, bits};
  }
};

struct ModelConfig {
  std::string architecture = "Qwen2ForCausalLM";
  std::string model_type = "qwen2";
  int64_t hidden_size = 0;
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;
  int64_t head_dim = 0;  // from config when given, else hidden_size / num_attention_heads
  int64_t intermediate_size = 0;
  int64_t vocab_size = 0;
  int64_t max_position_embeddings = 32768;
  double rope_theta = 10000.0;
  double rms_norm_eps = 1e-6;
  bool tie_word_embeddings = false;
  bool attention_bias = true;  // Qwen2 has q/k/v biases
  std::string torch_dtype = "bfloat16";
  std::optional<int64_t> bos_token_id;
  std::vector<int64_t> eos_token_ids;
  std::optional<QuantSpec> quantization;
  // Carried so a written config.json matches what Hugging Face writes; unused by the forward.
  std::string hidden_act = "silu";
  double attention_dropout = 0.0;
  double initializer_range = 0.02;
  int64_t max_window_layers = 21;
  int64_t sliding_window = 32768;
  bool use_sliding_window = false;
  bool use_cache = true;
  std::string transformers_version = "4.43.1";

  int64_t q_dim() const { return num_attention_heads * head_dim; }
  int64_t kv_dim() const { return num_key_value_heads * head_dim; }
};

// Parses and validates (positive sizes, kv heads divide heads, heads divide hidden size unless
// head_dim is given, a Qwen2 architecture). `source` names the file in error messages.
ModelConfig parse_model_config(const nlohmann::json& j, const std::string& source);
// Reads dir/config.json, then dir/generation_config.json when present for eos_token_id
// (an int or a list); falls back to config.json's eos_token_id.
ModelConfig load_model_config(const std::filesystem::path& dir);
// Serialises the fields Hugging Face writes for Qwen2 (the inverse of parse_model_config).
nlohmann::json model_config_to_json(const ModelConfig& c);
nlohmann::json generation_config_to_json(const ModelConfig& c);

// The real Qwen2.5 Instruct configs by size ("0.5B", "1.5B", "3B"), for synthetic checkpoints
// at real geometries; eos = <|im_end|>. Throws on an unknown size.
ModelConfig qwen2_5_config(const std::string& size);

// Reads a JSON file; errors name the file and the parse position.
nlohmann::json read_json_file(const std::filesystem::path& path);
// Parses JSON text the same way; `source` names it in errors. Both refuse nesting deeper than
// kMaxJsonDepth: no molt file needs it, and code that recurses over a document (dump() in an
// error message, for one) would exhaust the stack on a few hundred KB of "[[[[".
inline constexpr int kMaxJsonDepth = 512;
nlohmann::json parse_json_text(std::string_view text, const std::string& source);

}  // namespace molt
