#include "molt/model/synth.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <vector>

#include "molt/common/error.h"
#include "molt/formats/safetensors.h"

namespace molt {
namespace {

// splitmix64: a fast, seedable generator; each tensor gets its own stream so the output does
// not depend on the thread count.
uint64_t splitmix(uint64_t& s) {
  uint64_t z = (s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint64_t hash_name(const std::string& s, uint64_t seed) {
  uint64_t h = 1469598103934665603ull ^ seed;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

struct Tensor {
  std::string name;
  std::vector<int64_t> shape;
  float std = 0;     // uniform noise with this standard deviation
  float offset = 0;  // added to every element (norm weights are 1)
  std::vector<std::byte> bytes;
};

void fill(Tensor& t, DType dtype, uint64_t seed) {
  int64_t n = 1;
  for (int64_t d : t.shape) n *= d;
  t.bytes.resize(static_cast<size_t>(n) * dtype_size(dtype));
  const float a = t.std * std::sqrt(3.0f);  // U(-a, a) has standard deviation std
  const uint64_t base = hash_name(t.name, seed);
  constexpr int64_t kChunk = 1 << 16;
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < (n + kChunk - 1) / kChunk; ++c) {
    uint64_t s = base + static_cast<uint64_t>(c) * 0x632be59bd9b4e019ull;
    const int64_t end = std::min(n, (c + 1) * kChunk);
    for (int64_t i = c * kChunk; i < end; ++i) {
      const float u = static_cast<float>(splitmix(s) >> 40) * (1.0f / 16777216.0f);  // [0,1)
      const float v = t.offset + a * (2.0f * u - 1.0f);
      switch (dtype) {
        case DType::F32:
          std::memcpy(&t.bytes[i * 4], &v, 4);
          break;
        case DType::BF16: {
          const uint16_t h = f32_to_bf16(v);
          std::memcpy(&t.bytes[i * 2], &h, 2);
          break;
        }
        case DType::F16: {
          const uint16_t h = f32_to_f16(v);
          std::memcpy(&t.bytes[i * 2], &h, 2);
          break;
        }
        default:
          break;
      }
    }
  }
}

void write_json(const std::filesystem::path& p, const nlohmann::json& j) {
  std::ofstream f(p);
  if (!f) fail("{}: cannot write", p.string());
  f << j.dump(2) << "\n";
  if (!f) fail("{}: write failed", p.string());
}

}  // namespace

ModelConfig qwen25_geometry(const std::string& name) {
  const std::map<std::string, std::string> sizes = {
      {"qwen2.5-0.5b", "0.5B"}, {"qwen2.5-1.5b", "1.5B"}, {"qwen2.5-3b", "3B"}};
  const auto it = sizes.find(name);
  if (it == sizes.end())
    fail("unknown geometry '{}' (qwen2.5-0.5b, qwen2.5-1.5b, qwen2.5-3b)", name);
  ModelConfig c = qwen2_5_config(it->second);
  c.eos_token_ids = {151645, 151643};  // generation_config.json of the Instruct release
  return c;
}

void write_synthetic_checkpoint(const ModelConfig& c, const SynthOptions& o,
                                const std::filesystem::path& dir) {
  const int64_t d = c.hidden_size, q = c.q_dim(), kv = c.kv_dim(), ff = c.intermediate_size;
  const int64_t L = c.num_hidden_layers;
  // Every branch adds O(1) to the residual stream, so after L layers it is O(sqrt(L)) and the
  // embedding no longer dominates: tied logits are then spread (std ≈ 3), not a copy of the
  // input token as they would be if the stream stayed close to its embedding.
  const float branch = 1.0f;
  std::vector<Tensor> ts;
  auto add = [&](std::string name, std::vector<int64_t> shape, float std, float offset = 0) {
    ts.push_back(Tensor{std::move(name), std::move(shape), std, offset, {}});
  };
  add("model.embed_tokens.weight", {c.vocab_size, d}, 3.0f / std::sqrt(static_cast<float>(d)));
  if (!c.tie_word_embeddings) add("lm_head.weight", {c.vocab_size, d}, 1.0f / std::sqrt(float(d)));
  add("model.norm.weight", {d}, 0.02f, 1.0f);
  for (int64_t l = 0; l < L; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    add(p + "self_attn.q_proj.weight", {q, d}, 1.0f / std::sqrt(float(d)));
    add(p + "self_attn.k_proj.weight", {kv, d}, 1.0f / std::sqrt(float(d)));
    add(p + "self_attn.v_proj.weight", {kv, d}, 1.0f / std::sqrt(float(d)));
    add(p + "self_attn.o_proj.weight", {d, q}, branch / std::sqrt(float(q)));
    if (c.attention_bias) {
      add(p + "self_attn.q_proj.bias", {q}, 0.02f);
      add(p + "self_attn.k_proj.bias", {kv}, 0.02f);
      add(p + "self_attn.v_proj.bias", {kv}, 0.02f);
    }
    add(p + "mlp.gate_proj.weight", {ff, d}, 1.0f / std::sqrt(float(d)));
    add(p + "mlp.up_proj.weight", {ff, d}, 1.0f / std::sqrt(float(d)));
    add(p + "mlp.down_proj.weight", {d, ff}, branch / std::sqrt(float(ff)));
    add(p + "input_layernorm.weight", {d}, 0.02f, 1.0f);
    add(p + "post_attention_layernorm.weight", {d}, 0.02f, 1.0f);
  }

  std::filesystem::create_directories(dir);
  std::vector<TensorToWrite> out;
  out.reserve(ts.size());
  for (size_t i = 0; i < ts.size(); ++i) {
    fill(ts[i], o.dtype, o.seed);
    out.push_back(TensorToWrite{ts[i].name, o.dtype, ts[i].shape, ts[i].bytes});
    if (o.show_progress) {
      std::fprintf(stderr, "\rsynth: generating %zu/%zu tensors", i + 1, ts.size());
    }
  }
  if (o.show_progress) std::fprintf(stderr, "\nsynth: writing %s\n", dir.string().c_str());

  ModelConfig written = c;
  written.torch_dtype = o.dtype == DType::F32   ? "float32"
                        : o.dtype == DType::F16 ? "float16"
                                                : "bfloat16";
  // As in the real release: config.json names one eos id, generation_config.json all of them.
  write_json(dir / "generation_config.json", generation_config_to_json(written));
  if (!written.eos_token_ids.empty()) written.eos_token_ids.resize(1);
  write_json(dir / "config.json", model_config_to_json(written));
  write_safetensors_sharded(dir, out, o.max_shard_bytes, {{"format", "pt"}});
}

}  // namespace molt
