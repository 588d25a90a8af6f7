// Qwen2 forward pass. One layer loop serves prefill (GEMM, n > 1) and decode (matvec, n = 1);
// selective recompute reuses the same loop from a given layer on.
#include "molt/model/model.h"

#include <algorithm>
#include <cstring>

#include "molt/common/error.h"
#include "molt/kernels/attention.h"

namespace molt {
namespace {

std::string where(const WeightStore& s, const std::string& name) {
  return fmt::format("{}: tensor '{}'", s.dir().string(), name);
}

void check_shape(const WeightStore& s, const TensorView& t, std::vector<int64_t> want) {
  if (t.shape != want) {
    fail("{}: shape {} but the config needs [{}]", where(s, t.name), t.shape_str(),
         fmt::join(want, ", "));
  }
}

void check_dense_dtype(const WeightStore& s, const TensorView& t) {
  if (t.dtype != DType::F32 && t.dtype != DType::BF16 && t.dtype != DType::F16) {
    fail("{}: dtype {} is not supported for dense weights (F32, BF16, F16)", where(s, t.name),
         dtype_name(t.dtype));
  }
}

WeightMatrix matrix(const WeightStore& s, const std::string& name, int64_t rows, int64_t cols) {
  const TensorView& t = s.get(name);
  check_dense_dtype(s, t);
  check_shape(s, t, {rows, cols});
  return WeightMatrix{t.dtype, rows, cols, t.data};
}

// Norm weights and biases are small: widen them to f32 once at load.
std::vector<float> vector_f32(const WeightStore& s, const std::string& name, int64_t n) {
  const TensorView& t = s.get(name);
  check_dense_dtype(s, t);
  check_shape(s, t, {n});
  std::vector<float> out(static_cast<size_t>(n));
  dequantize_row(WeightMatrix{t.dtype, 1, n, t.data}, 0, out.data());
  return out;
}

void add_bias(float* x, const std::vector<float>& b, int64_t n) {
  if (b.empty()) return;
  const int64_t d = static_cast<int64_t>(b.size());
  for (int64_t i = 0; i < n; ++i) add_inplace(x + i * d, b.data(), d);
}

// y[n × rows] = x[n × cols] Wᵀ through the path suited to n.
void linear(const WeightMatrix& w, const float* x, int64_t n, float* y) {
  if (n == 1) {
    matvec(w, x, y);
  } else {
    matmul(w, x, n, y);
  }
}

}  // namespace

std::unique_ptr<Model> Model::load(const std::filesystem::path& dir) {
  std::unique_ptr<Model> m(new Model());
  m->config_ = load_model_config(dir);
  const ModelConfig& c = m->config_;
  if (c.quantization) {
    fail("{}: quantised checkpoints (quantization in config.json) are not supported yet",
         (dir / "config.json").string());
  }
  m->store_ = WeightStore::open_dir(dir);
  const WeightStore& s = m->store_;
  ModelWeights& w = m->weights_;
  const int64_t d = c.hidden_size, q = c.q_dim(), kv = c.kv_dim(), ff = c.intermediate_size;

  w.embed = matrix(s, "model.embed_tokens.weight", c.vocab_size, d);
  if (c.tie_word_embeddings) {
    w.lm_head = w.embed;
  } else {
    w.lm_head = matrix(s, "lm_head.weight", c.vocab_size, d);
  }
  w.final_norm = vector_f32(s, "model.norm.weight", d);
  w.layers.resize(static_cast<size_t>(c.num_hidden_layers));
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = fmt::format("model.layers.{}.", l);
    LayerWeights& L = w.layers[static_cast<size_t>(l)];
    L.q = matrix(s, p + "self_attn.q_proj.weight", q, d);
    L.k = matrix(s, p + "self_attn.k_proj.weight", kv, d);
    L.v = matrix(s, p + "self_attn.v_proj.weight", kv, d);
    L.o = matrix(s, p + "self_attn.o_proj.weight", d, q);
    if (c.attention_bias) {
      L.q_bias = vector_f32(s, p + "self_attn.q_proj.bias", q);
      L.k_bias = vector_f32(s, p + "self_attn.k_proj.bias", kv);
      L.v_bias = vector_f32(s, p + "self_attn.v_proj.bias", kv);
    }
    L.gate = matrix(s, p + "mlp.gate_proj.weight", ff, d);
    L.up = matrix(s, p + "mlp.up_proj.weight", ff, d);
    L.down = matrix(s, p + "mlp.down_proj.weight", d, ff);
    L.input_norm = vector_f32(s, p + "input_layernorm.weight", d);
    L.post_attention_norm = vector_f32(s, p + "post_attention_layernorm.weight", d);
  }
  w.bytes = s.total_bytes();
  return m;
}

CacheGeometry Model::cache_geometry() const {
  return {config_.num_hidden_layers, config_.num_key_value_heads, config_.head_dim,
          config_.hidden_size};
}

KVCache Model::new_cache(int64_t capacity, bool keep_hidden) const {
  return KVCache(cache_geometry(), capacity, keep_hidden);
}

void Model::forward_layers(int64_t first, int64_t p0, int64_t n, std::span<float> hidden,
                           KVCache& cache, int64_t last) const {
  const ModelConfig& c = config_;
  const int64_t d = c.hidden_size, qd = c.q_dim(), kvd = c.kv_dim(), ff = c.intermediate_size;
  if (last < 0) last = c.num_hidden_layers;
  if (first < 0 || first > c.num_hidden_layers) fail("forward_layers: bad first layer {}", first);
  if (last < first || last > c.num_hidden_layers) fail("forward_layers: bad last layer {}", last);
  if (static_cast<int64_t>(hidden.size()) != n * d) {
    fail("forward_layers: hidden has {} floats, expected {} × {}", hidden.size(), n, d);
  }
  if (p0 + n > cache.capacity()) fail("forward_layers: positions past the cache capacity");
  const float eps = static_cast<float>(c.rms_norm_eps);
  const AttentionShape shape{c.num_attention_heads, c.num_key_value_heads, c.head_dim};
  const RopeSpec rope_spec = rope();

  std::vector<float> xn(n * d), q(n * qd), att(n * qd), tmp(n * d), gate(n * ff), up(n * ff);
  float* x = hidden.data();
  for (int64_t l = first; l < last; ++l) {
    const LayerWeights& L = weights_.layers[static_cast<size_t>(l)];
    if (cache.keeps_hidden()) {
      std::memcpy(cache.hidden(l).data() + p0 * d, x, sizeof(float) * n * d);
    }
    // Attention block. K and V go straight into the cache rows of these positions.
    float* kc = cache.k(l).data();
    float* vc = cache.v(l).data();
    for (int64_t i = 0; i < n; ++i) rmsnorm(x + i * d, L.input_norm.data(), d, eps, &xn[i * d]);
    linear(L.q, xn.data(), n, q.data());
    linear(L.k, xn.data(), n, kc + p0 * kvd);
    linear(L.v, xn.data(), n, vc + p0 * kvd);
    add_bias(q.data(), L.q_bias, n);
    add_bias(kc + p0 * kvd, L.k_bias, n);
    add_bias(vc + p0 * kvd, L.v_bias, n);
    for (int64_t i = 0; i < n; ++i) {
      rope_apply(rope_spec, p0 + i, &q[i * qd], c.num_attention_heads);
      rope_apply(rope_spec, p0 + i, kc + (p0 + i) * kvd, c.num_key_value_heads);
    }
    attention(shape, q.data(), kc, vc, p0, n, att.data());
    linear(L.o, att.data(), n, tmp.data());
    add_inplace(x, tmp.data(), n * d);

    // SwiGLU MLP block.
    for (int64_t i = 0; i < n; ++i) {
      rmsnorm(x + i * d, L.post_attention_norm.data(), d, eps, &xn[i * d]);
    }
    linear(L.gate, xn.data(), n, gate.data());
    linear(L.up, xn.data(), n, up.data());
    silu_mul(gate.data(), up.data(), n * ff);
    linear(L.down, gate.data(), n, tmp.data());
    add_inplace(x, tmp.data(), n * d);
  }
  if (cache.keeps_hidden() && last == c.num_hidden_layers) {
    std::memcpy(cache.hidden(c.num_hidden_layers).data() + p0 * d, x, sizeof(float) * n * d);
  }
}

void Model::embed(std::span<const int32_t> tokens, std::span<float> out) const {
  const int64_t n = static_cast<int64_t>(tokens.size()), d = config_.hidden_size;
  if (static_cast<int64_t>(out.size()) != n * d) {
    fail("embed: out has {} floats, expected {} × {}", out.size(), n, d);
  }
  for (int64_t i = 0; i < n; ++i) {
    if (tokens[i] < 0 || tokens[i] >= config_.vocab_size) {
      fail("token id {} is out of range [0, {})", tokens[i], config_.vocab_size);
    }
    dequantize_row(weights_.embed, tokens[i], &out[i * d]);
  }
}

void Model::forward(std::span<const int32_t> tokens, KVCache& cache, std::span<float> logits,
                    std::span<float> last_logits) const {
  const ModelConfig& c = config_;
  const int64_t n = static_cast<int64_t>(tokens.size()), d = c.hidden_size, V = c.vocab_size;
  if (n == 0) return;
  const CacheGeometry g = cache.geometry();
  if (g.n_layers != c.num_hidden_layers || g.n_kv_heads != c.num_key_value_heads ||
      g.head_dim != c.head_dim) {
    fail("forward: the KV cache geometry does not match the model");
  }
  if (!logits.empty() && static_cast<int64_t>(logits.size()) != n * V) {
    fail("forward: logits span has {} floats, expected {} × {}", logits.size(), n, V);
  }
  if (!last_logits.empty() && static_cast<int64_t>(last_logits.size()) != V) {
    fail("forward: last_logits span has {} floats, expected {}", last_logits.size(), V);
  }
  for (int32_t t : tokens) {
    if (t < 0 || t >= V) fail("token id {} is out of range [0, {})", t, V);
  }

  const int64_t p0 = cache.reserve(n);
  std::vector<float> x(n * d);
  for (int64_t i = 0; i < n; ++i) dequantize_row(weights_.embed, tokens[i], &x[i * d]);
  forward_layers(0, p0, n, x, cache);
  cache.commit(n);

  const float eps = static_cast<float>(c.rms_norm_eps);
  if (!logits.empty()) {
    for (int64_t i = 0; i < n; ++i)
      rmsnorm(&x[i * d], weights_.final_norm.data(), d, eps, &x[i * d]);
    linear(weights_.lm_head, x.data(), n, logits.data());
    if (!last_logits.empty()) {
      std::copy_n(logits.data() + (n - 1) * V, V, last_logits.data());
    }
  } else if (!last_logits.empty()) {
    float* last = &x[(n - 1) * d];
    rmsnorm(last, weights_.final_norm.data(), d, eps, last);
    matvec(weights_.lm_head, last, last_logits.data());
  }
}

std::vector<float> Model::prefill(std::span<const int32_t> tokens, KVCache& cache) const {
  std::vector<float> out(static_cast<size_t>(config_.vocab_size));
  forward(tokens, cache, {}, out);
  return out;
}

std::vector<float> Model::decode(int32_t token, KVCache& cache) const {
  return prefill(std::span<const int32_t>(&token, 1), cache);
}

}  // namespace molt
