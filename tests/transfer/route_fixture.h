// Tiny synthetic rungs for the transfer tests: random weights at small geometries, written
// once per test into a temporary folder.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <random>
#include <vector>

#include "molt/formats/hf_config.h"
#include "molt/model/model.h"
#include "molt/model/synth.h"
#include "test_util.h"

namespace molt::test {

inline ModelConfig tiny_config(int64_t hidden, int64_t layers, int64_t heads, int64_t kv_heads,
                               double theta = 10000.0) {
  ModelConfig c = qwen25_geometry("qwen2.5-0.5b");
  c.hidden_size = hidden;
  c.num_hidden_layers = layers;
  c.num_attention_heads = heads;
  c.num_key_value_heads = kv_heads;
  c.head_dim = hidden / heads;
  c.intermediate_size = 2 * hidden;
  c.vocab_size = 97;
  c.eos_token_ids = {96};
  c.bos_token_id = 96;
  c.rope_theta = theta;
  return c;
}

inline std::unique_ptr<Model> tiny_model(const std::filesystem::path& dir, const ModelConfig& c,
                                         uint64_t seed = 3, DType dtype = DType::F32) {
  SynthOptions o;
  o.dtype = dtype;
  o.seed = seed;
  write_synthetic_checkpoint(c, o, dir);
  return Model::load(dir);
}

inline std::vector<int32_t> random_ids(int64_t n, int64_t vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> d(0, static_cast<int32_t>(vocab - 1));
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (auto& t : ids) t = d(rng);
  return ids;
}

// A corpus file of whitespace-separated ids.
inline void write_ids_file(const std::filesystem::path& p, int64_t n, int64_t vocab,
                           uint32_t seed) {
  std::ofstream f(p);
  for (int32_t t : random_ids(n, vocab, seed)) f << t << ' ';
}

}  // namespace molt::test

#include "molt/transfer/map_file.h"

namespace molt::test {

// A map from a model to itself that copies every layer (W = I, b = 0), with identity boundary
// maps for r = 1 .. max_r: exact by construction, to test apply() around it.
inline MapData identity_map(const Model& m, int64_t max_r = 0) {
  MapData map;
  map.method = "ridge";
  map.sender = map.receiver = RungSpec::of(m, "self");
  const CacheGeometry g = m.cache_geometry();
  const int64_t kv = g.kv_dim(), d = g.hidden_size;
  for (int64_t j = 0; j < g.n_layers; ++j) {
    LayerMap L;
    L.kv_s = kv;
    L.k_sources = L.v_sources = {j};
    L.k_weight.assign(static_cast<size_t>(kv * kv), 0.0f);
    for (int64_t i = 0; i < kv; ++i) L.k_weight[i * kv + i] = 1.0f;
    L.v_weight = L.k_weight;
    L.k_bias.assign(static_cast<size_t>(kv), 0.0f);
    L.v_bias = L.k_bias;
    map.layers.push_back(std::move(L));
  }
  for (int64_t r = 1; r <= max_r; ++r) {
    BoundaryMap b;
    b.r = r;
    b.sender_hidden = g.n_layers - r;
    b.weight.assign(static_cast<size_t>(d * d), 0.0f);
    for (int64_t i = 0; i < d; ++i) b.weight[i * d + i] = 1.0f;
    b.bias.assign(static_cast<size_t>(d), 0.0f);
    map.boundaries.push_back(std::move(b));
  }
  map.info["corpus"] = "identity";
  return map;
}

inline double max_abs_diff(std::span<const float> a, std::span<const float> b, int64_t n) {
  double m = 0;
  for (int64_t i = 0; i < n; ++i) m = std::max(m, std::abs(double(a[i]) - double(b[i])));
  return m;
}

inline double max_abs(std::span<const float> a, int64_t n) {
  double m = 0;
  for (int64_t i = 0; i < n; ++i) m = std::max(m, std::abs(double(a[i])));
  return m;
}

}  // namespace molt::test
