// Hugging Face config.json / generation_config.json for Qwen2ForCausalLM.
#include "molt/formats/hf_config.h"

#include <cmath>
#include <nlohmann/json.hpp>

#include "molt/common/error.h"

namespace molt {
namespace {

using nlohmann::json;

// Optional fields: absent and null both mean "use the default".
bool has(const json& j, const char* key) {
  return j.contains(key) && !j[key].is_null();
}

int64_t as_int(const json& v, const std::string& src, const std::string& field) {
  if (!v.is_number_integer()) {
    fail("{}: field '{}' is {} ({}), expected an integer", src, field, v.dump(), v.type_name());
  }
  if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
    fail("{}: field '{}' is too large ({})", src, field, v.dump());
  }
  return v.get<int64_t>();
}

int64_t required_int(const json& j, const std::string& src, const char* key) {
  if (!j.contains(key)) fail("{}: missing field '{}'", src, key);
  return as_int(j[key], src, key);
}

void optional_int(const json& j, const std::string& src, const char* key, int64_t* out) {
  if (has(j, key)) *out = as_int(j[key], src, key);
}

void optional_number(const json& j, const std::string& src, const char* key, double* out) {
  if (!has(j, key)) return;
  const json& v = j[key];
  if (!v.is_number()) {
    fail("{}: field '{}' is {} ({}), expected a number", src, key, v.dump(), v.type_name());
  }
  *out = v.get<double>();
}

void optional_bool(const json& j, const std::string& src, const char* key, bool* out) {
  if (!has(j, key)) return;
  const json& v = j[key];
  if (!v.is_boolean()) {
    fail("{}: field '{}' is {} ({}), expected true or false", src, key, v.dump(), v.type_name());
  }
  *out = v.get<bool>();
}

void optional_string(const json& j, const std::string& src, const char* key, std::string* out) {
  if (!has(j, key)) return;
  const json& v = j[key];
  if (!v.is_string()) {
    fail("{}: field '{}' is {} ({}), expected a string", src, key, v.dump(), v.type_name());
  }
  *out = v.get<std::string>();
}

// eos_token_id / bos_token_id: an int or a list of ints (Qwen2.5 Instruct lists two eos ids).
std::vector<int64_t> token_ids(const json& v, const std::string& src, const char* key) {
  std::vector<int64_t> ids;
  if (v.is_array()) {
    for (size_t i = 0; i < v.size(); ++i) {
      ids.push_back(as_int(v[i], src, fmt::format("{}[{}]", key, i)));
    }
  } else {
    ids.push_back(as_int(v, src, key));
  }
  for (int64_t id : ids) {
    if (id < 0) fail("{}: field '{}' holds a negative token id ({})", src, key, id);
  }
  return ids;
}

json ids_to_json(const std::vector<int64_t>& ids) {
  return ids.size() == 1 ? json(ids[0]) : json(ids);
}

// `src` names the file, `key` the object ("quantization" or "quantization.<layer>").
QuantLayer parse_quant_layer(const json& q, const std::string& src, const std::string& key,
                             bool int8) {
  // Range-checked before narrowing to int: 2^32 + 8 must not pass as 8 bits.
  auto small_int = [&](const char* field) {
    const int64_t v = required_int(q, src + ": " + key, field);
    if (v < 0 || v > 1024) {
      fail("{}: field '{}.{}' is {}, out of range", src, key, field, v);
    }
    return static_cast<int>(v);
  };
  QuantLayer l;
  l.group_size = small_int("group_size");
  l.bits = small_int("bits");
  if (int8) {
    if (l.bits != 8)
      fail("{}: field '{}.bits' is {}, int8 mode needs 8", src, key, q["bits"].dump());
    if (l.group_size != 0 && l.group_size != 32 && l.group_size != 64 && l.group_size != 128) {
      fail("{}: field '{}.group_size' is {}, expected 0 (per channel), 32, 64 or 128", src, key,
           q["group_size"].dump());
    }
    return l;
  }
  if (l.bits != 2 && l.bits != 3 && l.bits != 4 && l.bits != 6 && l.bits != 8) {
    fail("{}: field '{}.bits' is {}, expected one of 2, 3, 4, 6, 8", src, key, q["bits"].dump());
  }
  if (l.group_size != 32 && l.group_size != 64 && l.group_size != 128) {
    fail("{}: field '{}.group_size' is {}, expected one of 32, 64, 128", src, key,
         q["group_size"].dump());
  }
  return l;
}

QuantSpec parse_quantization(const json& q, const std::string& src, const char* key) {
  const std::string where = fmt::format("{}: field '{}'", src, key);
  if (!q.is_object()) {
    fail("{} is a {}, expected {{\"group_size\": G, \"bits\": B}}", where, q.type_name());
  }
  QuantSpec s;
  if (q.contains("quant_method")) {
    fail("{}: quantization method {} is not supported (MLX affine or molt int8)", where,
         q["quant_method"].dump());
  }
  if (q.contains("mode")) {
    if (!q["mode"].is_string()) fail("{}: 'mode' is not a string", where);
    s.mode = q["mode"].get<std::string>();
    if (s.mode != "affine" && s.mode != "int8") {
      fail("{}: mode '{}' is not supported (affine or int8)", where, s.mode);
    }
  }
  if (q.contains("layout")) {
    if (!q["layout"].is_string()) fail("{}: 'layout' is not a string", where);
    s.layout = q["layout"].get<std::string>();
    if (s.layout != "rows" && s.layout != "rows8") {
      fail("{}: layout '{}' is not supported (rows or rows8)", where, s.layout);
    }
    if (s.layout == "rows8" && s.mode != "affine") {
      fail("{}: layout rows8 is for affine weights, not mode '{}'", where, s.mode);
    }
  }
  const bool int8 = s.mode == "int8";
  const QuantLayer top = parse_quant_layer(q, src, key, int8);
  s.group_size = top.group_size;
  s.bits = top.bits;
  for (const auto& [name, v] : q.items()) {
    if (v.is_object()) {
      s.layers[name] = parse_quant_layer(v, src, fmt::format("{}.{}", key, name), int8);
    } else if (v.is_boolean() && !v.get<bool>()) {
      s.layers[name] = QuantLayer{};
    }
  }
  return s;
}

// Sizes beyond these are no model molt could hold; bounding them here keeps every product the
// loaders form (heads × head_dim, rows × columns, layers × positions × kv_dim) inside int64.
constexpr int64_t kMaxSize = int64_t{1} << 24;   // hidden, intermediate, vocab, positions
constexpr int64_t kMaxCount = int64_t{1} << 16;  // layers, heads, head_dim

void require_positive(const std::string& src, const char* key, int64_t v, int64_t max = kMaxSize) {
  if (v <= 0) fail("{}: field '{}' must be positive, got {}", src, key, v);
  if (v > max) fail("{}: field '{}' is {}, larger than the {} molt supports", src, key, v, max);
}

}  // namespace

ModelConfig parse_model_config(const json& j, const std::string& src) {
  if (!j.is_object()) fail("{}: config is a JSON {}, expected an object", src, j.type_name());
  ModelConfig c;

  // Architecture: architectures must name Qwen2ForCausalLM, or model_type must be qwen2.
  bool qwen2 = false;
  std::string archs = "(absent)";
  if (has(j, "architectures")) {
    const json& a = j["architectures"];
    if (!a.is_array()) {
      fail("{}: field 'architectures' is a {}, expected a list of strings", src, a.type_name());
    }
    for (const json& name : a) {
      if (!name.is_string()) {
        fail("{}: field 'architectures' holds {}, expected strings", src, name.dump());
      }
      qwen2 = qwen2 || name.get_ref<const std::string&>() == "Qwen2ForCausalLM";
    }
    archs = a.dump();
  }
  optional_string(j, src, "model_type", &c.model_type);
  qwen2 = qwen2 || (has(j, "model_type") && c.model_type == "qwen2");
  if (!qwen2) {
    fail(
        "{}: field 'architectures' is {} and model_type is '{}': molt runs Qwen2ForCausalLM "
        "(model_type qwen2) only",
        src, archs, has(j, "model_type") ? c.model_type : "(absent)");
  }
  c.architecture = "Qwen2ForCausalLM";

  c.hidden_size = required_int(j, src, "hidden_size");
  c.num_hidden_layers = required_int(j, src, "num_hidden_layers");
  c.num_attention_heads = required_int(j, src, "num_attention_heads");
  c.num_key_value_heads = required_int(j, src, "num_key_value_heads");
  c.intermediate_size = required_int(j, src, "intermediate_size");
  c.vocab_size = required_int(j, src, "vocab_size");
  optional_int(j, src, "max_position_embeddings", &c.max_position_embeddings);
  require_positive(src, "hidden_size", c.hidden_size);
  require_positive(src, "num_hidden_layers", c.num_hidden_layers, kMaxCount);
  require_positive(src, "num_attention_heads", c.num_attention_heads, kMaxCount);
  require_positive(src, "num_key_value_heads", c.num_key_value_heads, kMaxCount);
  require_positive(src, "intermediate_size", c.intermediate_size);
  require_positive(src, "vocab_size", c.vocab_size);
  require_positive(src, "max_position_embeddings", c.max_position_embeddings);
  if (c.num_attention_heads % c.num_key_value_heads != 0) {
    fail("{}: field 'num_key_value_heads' ({}) must divide num_attention_heads ({})", src,
         c.num_key_value_heads, c.num_attention_heads);
  }
  if (has(j, "head_dim")) {
    c.head_dim = as_int(j["head_dim"], src, "head_dim");
    require_positive(src, "head_dim", c.head_dim, kMaxCount);
  } else {
    if (c.hidden_size % c.num_attention_heads != 0) {
      fail(
          "{}: field 'num_attention_heads' ({}) must divide hidden_size ({}) when head_dim is "
          "not given",
          src, c.num_attention_heads, c.hidden_size);
    }
    c.head_dim = c.hidden_size / c.num_attention_heads;
  }
  if (c.head_dim % 2 != 0) {
    fail("{}: head_dim {} is odd; RoPE rotates pairs of channels", src, c.head_dim);
  }

  optional_number(j, src, "rope_theta", &c.rope_theta);
  if (!(c.rope_theta > 0) || !std::isfinite(c.rope_theta)) {
    fail("{}: field 'rope_theta' must be a positive number, got {}", src, c.rope_theta);
  }
  optional_number(j, src, "rms_norm_eps", &c.rms_norm_eps);
  if (!(c.rms_norm_eps > 0) || !std::isfinite(c.rms_norm_eps)) {
    fail("{}: field 'rms_norm_eps' must be a positive number, got {}", src, c.rms_norm_eps);
  }
  optional_bool(j, src, "tie_word_embeddings", &c.tie_word_embeddings);
  optional_bool(j, src, "attention_bias", &c.attention_bias);
  optional_string(j, src, "torch_dtype", &c.torch_dtype);
  optional_string(j, src, "hidden_act", &c.hidden_act);
  if (c.hidden_act != "silu") {
    fail("{}: field 'hidden_act' is '{}'; Qwen2 uses silu, the only activation molt runs", src,
         c.hidden_act);
  }
  optional_number(j, src, "attention_dropout", &c.attention_dropout);
  optional_number(j, src, "initializer_range", &c.initializer_range);
  optional_int(j, src, "max_window_layers", &c.max_window_layers);
  optional_int(j, src, "sliding_window", &c.sliding_window);
  optional_bool(j, src, "use_sliding_window", &c.use_sliding_window);
  optional_bool(j, src, "use_cache", &c.use_cache);
  optional_string(j, src, "transformers_version", &c.transformers_version);

  if (has(j, "bos_token_id")) {
    auto ids = token_ids(j["bos_token_id"], src, "bos_token_id");
    if (ids.size() != 1) fail("{}: field 'bos_token_id' must be one token id", src);
    c.bos_token_id = ids[0];
  }
  if (has(j, "eos_token_id")) c.eos_token_ids = token_ids(j["eos_token_id"], src, "eos_token_id");
  if (has(j, "quantization")) {
    c.quantization = parse_quantization(j["quantization"], src, "quantization");
  } else if (has(j, "quantization_config")) {
    c.quantization = parse_quantization(j["quantization_config"], src, "quantization_config");
  }
  return c;
}

ModelConfig load_model_config(const std::filesystem::path& dir) {
  const auto config_path = dir / "config.json";
  if (!std::filesystem::exists(config_path)) {
    fail("{}: no config.json in the checkpoint folder", dir.string());
  }
  ModelConfig c = parse_model_config(read_json_file(config_path), config_path.string());
  const auto gen_path = dir / "generation_config.json";
  if (std::filesystem::exists(gen_path)) {
    const std::string src = gen_path.string();
    json g = read_json_file(gen_path);
    if (!g.is_object())
      fail("{}: generation config is a JSON {}, expected an object", src, g.type_name());
    // generation_config.json is what generate() obeys, so its eos list wins.
    if (has(g, "eos_token_id")) c.eos_token_ids = token_ids(g["eos_token_id"], src, "eos_token_id");
  }
  return c;
}

json model_config_to_json(const ModelConfig& c) {
  json j = {
      {"architectures", {c.architecture}},
      {"attention_dropout", c.attention_dropout},
      {"hidden_act", c.hidden_act},
      {"hidden_size", c.hidden_size},
      {"initializer_range", c.initializer_range},
      {"intermediate_size", c.intermediate_size},
      {"max_position_embeddings", c.max_position_embeddings},
      {"max_window_layers", c.max_window_layers},
      {"model_type", c.model_type},
      {"num_attention_heads", c.num_attention_heads},
      {"num_hidden_layers", c.num_hidden_layers},
      {"num_key_value_heads", c.num_key_value_heads},
      {"rms_norm_eps", c.rms_norm_eps},
      {"rope_theta", c.rope_theta},
      {"sliding_window", c.sliding_window},
      {"tie_word_embeddings", c.tie_word_embeddings},
      {"torch_dtype", c.torch_dtype},
      {"transformers_version", c.transformers_version},
      {"use_cache", c.use_cache},
      {"use_sliding_window", c.use_sliding_window},
      {"vocab_size", c.vocab_size},
  };
  if (c.bos_token_id) j["bos_token_id"] = *c.bos_token_id;
  if (!c.eos_token_ids.empty()) j["eos_token_id"] = ids_to_json(c.eos_token_ids);
  // HF's Qwen2 config has neither field; write them only where the default would mislead.
  if (c.num_attention_heads <= 0 || c.head_dim * c.num_attention_heads != c.hidden_size) {
    j["head_dim"] = c.head_dim;
  }
  if (!c.attention_bias) j["attention_bias"] = false;
  if (c.quantization) {
    json q = {{"group_size", c.quantization->group_size}, {"bits", c.quantization->bits}};
    if (c.quantization->mode != "affine") q["mode"] = c.quantization->mode;
    if (c.quantization->layout != "rows") q["layout"] = c.quantization->layout;
    for (const auto& [name, l] : c.quantization->layers) {
      q[name] = l.bits == 0 ? json(false) : json{{"group_size", l.group_size}, {"bits", l.bits}};
    }
    j["quantization"] = q;
    j["quantization_config"] = q;
  }
  return j;
}

json generation_config_to_json(const ModelConfig& c) {
  json j = {{"transformers_version", c.transformers_version}};
  if (c.bos_token_id) j["bos_token_id"] = *c.bos_token_id;
  if (!c.eos_token_ids.empty()) j["eos_token_id"] = ids_to_json(c.eos_token_ids);
  return j;
}

ModelConfig qwen2_5_config(const std::string& size) {
  ModelConfig c;
  if (size == "0.5B") {
    c.hidden_size = 896, c.num_hidden_layers = 24, c.num_attention_heads = 14;
    c.intermediate_size = 4864, c.max_window_layers = 21;
  } else if (size == "1.5B") {
    c.hidden_size = 1536, c.num_hidden_layers = 28, c.num_attention_heads = 12;
    c.intermediate_size = 8960, c.max_window_layers = 21;
  } else if (size == "3B") {
    c.hidden_size = 2048, c.num_hidden_layers = 36, c.num_attention_heads = 16;
    c.intermediate_size = 11008, c.max_window_layers = 70;
  } else {
    fail("unknown Qwen2.5 size '{}' (known: 0.5B, 1.5B, 3B)", size);
  }
  c.num_key_value_heads = 2;
  c.head_dim = c.hidden_size / c.num_attention_heads;
  c.vocab_size = 151936;
  c.max_position_embeddings = 32768;
  c.sliding_window = 32768;
  c.rope_theta = 1e6;
  c.rms_norm_eps = 1e-6;
  c.tie_word_embeddings = true;
  c.bos_token_id = 151643;
  c.eos_token_ids = {151645};
  return c;
}

}  // namespace molt
