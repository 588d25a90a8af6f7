// Applying a map: the RoPE sandwich around one GEMM per receiver layer and K/V, then the
// optional selective recompute and anchors.
#include <cblas.h>

#include <algorithm>
#include <array>
#include <cstring>

#include "molt/common/error.h"
#include "molt/kernels/linear.h"
#include "molt/transfer/embed_features.h"
#include "molt/transfer/map_file.h"
#include "molt/transfer/rope_sandwich.h"
#include "molt/transfer/transfer.h"

namespace molt {
namespace {

bool same_geometry(const CacheGeometry& a, const CacheGeometry& b) {
  return a.n_layers == b.n_layers && a.n_kv_heads == b.n_kv_heads && a.head_dim == b.head_dim;
}

// out[n × kv_r] = X[n × in] Wᵀ + b, with W [kv_r × in]: the bias rows are laid down first and
// the GEMM accumulates onto them (no extra pass over the output).
void affine(const float* x, int64_t n, int64_t in, const std::vector<float>& w,
            const std::vector<float>& b, float* out) {
  const int64_t m = static_cast<int64_t>(b.size());
  for (int64_t i = 0; i < n; ++i) std::memcpy(out + i * m, b.data(), sizeof(float) * m);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(n), static_cast<int>(m),
              static_cast<int>(in), 1.0f, x, static_cast<int>(in), w.data(), static_cast<int>(in),
              1.0f, out, static_cast<int>(m));
}

// Concatenates the rows of the source layers: X[i] = [L_s0[i], L_s1[i], ...] (X's rows are
// `in` wide; the columns after the sources' are left to the caller).
void gather(const std::vector<const float*>& layers, int64_t n, int64_t width, int64_t in,
            float* x) {
  for (int64_t i = 0; i < n; ++i) {
    for (size_t s = 0; s < layers.size(); ++s) {
      std::memcpy(x + i * in + static_cast<int64_t>(s) * width, layers[s] + i * width,
                  sizeof(float) * width);
    }
  }
}

// out[n × m] = X[n × in] Wᵀ + b for 16-bit W (the kernels dequantise it in tiles for sgemm).
void affine(const float* x, int64_t n, const WeightMatrix& w, const std::vector<float>& b,
            float* out) {
  matmul(w, x, n, out);
  const int64_t m = w.rows;
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t c = 0; c < m; ++c) out[i * m + c] += b[c];
  }
}

class LinearCacheMap final : public CacheMap {
 public:
  explicit LinearCacheMap(MapData map) : map_(std::move(map)) {
    if (map_.weight_dtype != DType::BF16) return;
    // BF16 maps stay at 16 bits once loaded (what the runtime budgets for: the file's size);
    // the f32 copies the reader made are dropped.
    const int64_t kvr = map_.receiver.geometry.kv_dim();
    bf16_.resize(map_.layers.size());
    weights_.resize(map_.layers.size());
    for (size_t j = 0; j < map_.layers.size(); ++j) {
      LayerMap& L = map_.layers[j];
      for (int kv = 0; kv < 2; ++kv) {
        std::vector<float>& w = kv == 0 ? L.k_weight : L.v_weight;
        std::vector<uint16_t>& h = bf16_[j][kv];
        h.resize(w.size());
        for (size_t i = 0; i < w.size(); ++i) h[i] = f32_to_bf16(w[i]);
        std::vector<float>().swap(w);
        WeightMatrix& m = weights_[j][kv];
        m.dtype = DType::BF16;
        m.rows = kvr;
        m.cols = kv == 0 ? L.k_in() : L.v_in();
        m.data = h.data();
      }
    }
  }

  std::string method() const override { return map_.method; }
  const MapData& data() const override { return map_; }

  double flops_per_position() const override {
    const int64_t kvr = map_.receiver.geometry.kv_dim();
    double f = 0;
    for (size_t j = static_cast<size_t>(map_.features.native_layers); j < map_.layers.size(); ++j) {
      const LayerMap& L = map_.layers[j];
      f += map_.method == "diagonal" ? 4.0 * kvr
                                     : 2.0 * kvr * static_cast<double>(L.k_in() + L.v_in());
    }
    return f;
  }

  using CacheMap::apply;
  void apply(const Model& sender, const KVCache& src, const Model& receiver,
             std::span<const int32_t> tokens, const TransferOptions& options, KVCache& dst,
             std::vector<float>* native_hidden) const override {
    if (native_hidden != nullptr) native_hidden->clear();
    const CacheGeometry& gs = map_.sender.geometry;
    const CacheGeometry& gr = map_.receiver.geometry;
    if (!same_geometry(src.geometry(), gs))
      fail("transfer: the source cache is not the map's sender geometry");
    if (!same_geometry(dst.geometry(), gr))
      fail("transfer: the destination cache is not the map's receiver geometry");
    if (!same_geometry(sender.cache_geometry(), gs) ||
        !same_geometry(receiver.cache_geometry(), gr)) {
      fail("transfer: the models are not the map's sender and receiver");
    }
    const int64_t n = src.size();
    const int64_t r = options.recompute_layers, a = options.anchors;
    if (r < 0 || r > gr.n_layers)
      fail("transfer: recompute_layers {} outside [0, {}]", r, gr.n_layers);
    if (a < 0 || a > n) fail("transfer: {} anchors for a {}-position cache", a, n);
    if (a > 0 && static_cast<int64_t>(tokens.size()) != n) {
      fail("transfer: anchors need the {} token ids of the cache, got {}", n, tokens.size());
    }
    const int64_t lags = map_.features.embed_tokens, native = map_.features.native_layers;
    if ((lags > 0 || native > 0) && static_cast<int64_t>(tokens.size()) != n) {
      fail(
          "transfer: this map reads token features and needs the {} token ids of the cache, got {}",
          n, tokens.size());
    }
    if (native + r > gr.n_layers) {
      fail("transfer: recompute_layers {} overlaps the map's {} native layers", r, native);
    }
    const BoundaryMap* boundary = nullptr;
    if (r > 0) {
      for (const BoundaryMap& b : map_.boundaries) {
        if (b.r == r) boundary = &b;
      }
      if (boundary == nullptr) {
        fail(
            "transfer: no boundary map for recompute_layers = {} in this map (fit it with "
            "--recompute-layers {})",
            r, r);
      }
      if (!src.keeps_hidden()) {
        fail(
            "transfer: recompute needs the sender cache to keep hidden states "
            "(Model::new_cache(capacity, /*keep_hidden=*/true))");
      }
    }
    dst.set_size(n);
    if (n == 0) return;
    const int64_t mapped = gr.n_layers - r;
    const int64_t kvs = gs.kv_dim();

    if (map_.method == "diagonal") {
      apply_diagonal(src, dst, n, mapped);
    } else {
      // Un-rotate the sender layers whose keys the mapped receiver layers read, once each (K
      // maps read their sources' keys; joint maps read keys and values of all their sources).
      const bool joint = map_.features.joint_kv;
      const auto reads = [&](int64_t l, bool keys) {
        for (int64_t j = native; j < mapped; ++j) {
          const LayerMap& L = map_.layers[j];
          for (const auto* list : {&L.k_sources, &L.v_sources}) {
            if ((joint || (list == &L.k_sources) == keys) &&
                std::find(list->begin(), list->end(), l) != list->end()) {
              return true;
            }
          }
        }
        return false;
      };
      std::vector<int64_t> need;
      for (int64_t l = 0; l < gs.n_layers; ++l) {
        if (reads(l, true)) need.push_back(l);
      }
      const RopeTable sender_rope(map_.sender.rope, 0, n), receiver_rope(map_.receiver.rope, 0, n);
      std::vector<std::vector<float>> k_plain(static_cast<size_t>(gs.n_layers));
      // V rows of a sender cache not stored as f32, widened once per layer read.
      std::vector<std::vector<float>> v_wide(static_cast<size_t>(gs.n_layers));
      if (src.kv_dtype() != KvDType::kF32) {
        for (int64_t l = 0; l < gs.n_layers; ++l) {
          if (reads(l, false)) {
            v_wide[l].resize(static_cast<size_t>(n * kvs));
            src.read_v(l, 0, n, v_wide[l].data());
          }
        }
      }
      const int64_t hr = gr.hidden_size;
      // Native layers first: they write the receiver's own K/V of layers [0, native) into dst
      // and give the features (token_feature_rows).
      std::vector<float> embeddings;
      if (lags > 0 || native > 0) {
        embeddings = token_feature_rows(receiver, tokens, native, dst, native_hidden);
      }
      if (lags == 0) {
        std::vector<float>().swap(embeddings);  // only the native rows were wanted
      }
      // Whole layers (and below, whole K or V maps) are the unit of parallel work: one OpenMP
      // region, each GEMM single-threaded inside it (OpenBLAS runs serially within a parallel
      // region), instead of a team synchronising around every small GEMM.
#pragma omp parallel for schedule(dynamic, 1)
      for (size_t i = 0; i < need.size(); ++i) {
        const int64_t l = need[i];
        k_plain[l].resize(static_cast<size_t>(n * kvs));
        src.read_k(l, 0, n, k_plain[l].data());
        if (sandwich_) sender_rope.rotate(k_plain[l].data(), 0, n, gs.n_kv_heads, /*inverse=*/true);
      }
#pragma omp parallel
      {
        std::vector<float> x, y;
        std::vector<const float*> parts;
#pragma omp for schedule(dynamic, 1)
        for (int64_t task = 2 * native; task < 2 * mapped; ++task) {
          const int64_t j = task / 2;
          const bool keys = task % 2 == 0;
          const LayerMap& L = map_.layers[j];
          // Keys of the sources, values of the sources (joint), or the target's own kind.
          parts.clear();
          const std::vector<int64_t>& sources = keys ? L.k_sources : L.v_sources;
          for (const bool read_keys : {true, false}) {
            if (!joint && read_keys != keys) continue;
            for (int64_t s : sources) {
              parts.push_back(read_keys           ? k_plain[s].data()
                              : v_wide[s].empty() ? src.v(s).data()
                                                  : v_wide[s].data());
            }
          }
          const int64_t in = keys ? L.k_in() : L.v_in();
          x.resize(static_cast<size_t>(n * in));
          gather(parts, n, kvs, in, x.data());
          if (lags > 0) {
            const int64_t at = in - L.embed_in;  // the features follow the sender's inputs
            for (int64_t i = 0; i < n; ++i) {
              embed_features(embeddings, hr, lags, i, x.data() + i * in + at);
            }
          }
          // Straight into an f32 receiver cache, else through y (rounded to its type below).
          const bool direct = dst.kv_dtype() == KvDType::kF32;
          if (!direct) y.resize(static_cast<size_t>(n * gr.kv_dim()));
          float* out = !direct ? y.data() : keys ? dst.k(j).data() : dst.v(j).data();
          const std::vector<float>& bias = keys ? L.k_bias : L.v_bias;
          if (weights_.empty()) {
            affine(x.data(), n, in, keys ? L.k_weight : L.v_weight, bias, out);
          } else {
            affine(x.data(), n, weights_[j][keys ? 0 : 1], bias, out);
          }
          if (keys && sandwich_) receiver_rope.rotate(out, 0, n, gr.n_kv_heads, /*inverse=*/false);
          if (!direct && keys) dst.write_k(j, 0, n, out);
          if (!direct && !keys) dst.write_v(j, 0, n, out);
        }
      }
    }

    if (boundary != nullptr) {
      const int64_t hs = gs.hidden_size, hr = gr.hidden_size;
      std::vector<float> h(static_cast<size_t>(n * hr));
      affine(src.hidden(boundary->sender_hidden).data(), n, hs, boundary->weight, boundary->bias,
             h.data());
      receiver.forward_layers(mapped, 0, n, h, dst);
    }
    if (a > 0) {
      dst.truncate(n - a);
      receiver.forward(tokens.subspan(static_cast<size_t>(n - a)), dst, {});
    }
  }

 private:
  void apply_diagonal(const KVCache& src, KVCache& dst, int64_t n, int64_t mapped) const {
    const CacheGeometry& g = map_.receiver.geometry;
    const int64_t kv = g.kv_dim();
    const RopeTable sender_rope(map_.sender.rope, 0, n), receiver_rope(map_.receiver.rope, 0, n);
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t j = 0; j < mapped; ++j) {
      const LayerMap& L = map_.layers[j];
      // Rows of any stored type are widened to f32, mapped, and stored rounded to dst's type.
      std::vector<float> k(static_cast<size_t>(n * kv)), v(static_cast<size_t>(n * kv));
      src.read_k(L.k_sources.at(0), 0, n, k.data());
      src.read_v(L.v_sources.at(0), 0, n, v.data());
      if (sandwich_) sender_rope.rotate(k.data(), 0, n, g.n_kv_heads, /*inverse=*/true);
      for (int64_t i = 0; i < n; ++i) {
        for (int64_t c = 0; c < kv; ++c) {
          k[i * kv + c] = k[i * kv + c] * L.k_scale[c] + L.k_offset[c];
          v[i * kv + c] = v[i * kv + c] * L.v_scale[c] + L.v_offset[c];
        }
      }
      if (sandwich_) receiver_rope.rotate(k.data(), 0, n, g.n_kv_heads, /*inverse=*/false);
      dst.write_k(j, 0, n, k.data());
      dst.write_v(j, 0, n, v.data());
    }
  }

  MapData map_;
  // Keys un-rotated before the map and re-rotated after it (DESIGN.md §3); false only for a map
  // fitted on keys as cached ("keys": "rotated"), the ablation that shows what the sandwich buys.
  bool sandwich_ = map_.info.value("keys", std::string("un-rotated")) != "rotated";
  // BF16 maps: per layer, the K and V weights at 16 bits and their descriptions.
  std::vector<std::array<std::vector<uint16_t>, 2>> bf16_;
  std::vector<std::array<WeightMatrix, 2>> weights_;
};

// A map built in memory gets the same checks a file gets: every size follows from the
// geometries and source lists, so apply() never reads past a tensor.
void validate(const MapData& m) {
  const CacheGeometry& gs = m.sender.geometry;
  const CacheGeometry& gr = m.receiver.geometry;
  const bool diagonal = m.method == "diagonal";
  if (m.method != "ridge" && m.method != "depth-remap" && !diagonal) {
    fail("map: unknown method '{}'", m.method);
  }
  if (static_cast<int64_t>(m.layers.size()) != gr.n_layers) {
    fail("map: {} layer maps for a receiver of {} layers", m.layers.size(), gr.n_layers);
  }
  const auto size_is = [](const std::vector<float>& v, int64_t n) {
    return static_cast<int64_t>(v.size()) == n;
  };
  const int64_t kvr = gr.kv_dim(), kvs = gs.kv_dim();
  if (m.features.embed_tokens < 0 || (diagonal && m.features.embed_tokens > 0)) {
    fail("map: {} token features for a {} map", m.features.embed_tokens, m.method);
  }
  if (diagonal && m.features.joint_kv) fail("map: a diagonal map reads K and V apart");
  if (m.features.native_layers < 0 || m.features.native_layers >= gr.n_layers ||
      (diagonal && m.features.native_layers > 0)) {
    fail("map: {} native layers for a {} map of a {}-layer receiver", m.features.native_layers,
         m.method, gr.n_layers);
  }
  for (int64_t j = 0; j < gr.n_layers; ++j) {
    const LayerMap& L = m.layers[j];
    if (!diagonal && L.joint_kv != m.features.joint_kv) {
      fail("map: receiver layer {} reads the sender's K and V {}, the features say {}", j,
           L.joint_kv ? "together" : "apart", m.features.joint_kv ? "together" : "apart");
    }
    if (!diagonal && L.embed_in != m.features.embed_tokens * gr.hidden_size) {
      fail("map: receiver layer {} reads {} token-feature inputs, the features say {}", j,
           L.embed_in, m.features.embed_tokens * gr.hidden_size);
    }
    for (const auto* list : {&L.k_sources, &L.v_sources}) {
      if (list->empty()) fail("map: receiver layer {} has no source layers", j);
      for (int64_t s : *list) {
        if (s < 0 || s >= gs.n_layers) fail("map: receiver layer {} reads sender layer {}", j, s);
      }
    }
    const bool ok = diagonal ? kvs == kvr && size_is(L.k_scale, kvr) && size_is(L.k_offset, kvr) &&
                                   size_is(L.v_scale, kvr) && size_is(L.v_offset, kvr)
                             : L.kv_s == kvs && size_is(L.k_weight, kvr * L.k_in()) &&
                                   size_is(L.k_bias, kvr) && size_is(L.v_weight, kvr * L.v_in()) &&
                                   size_is(L.v_bias, kvr);
    if (!ok) fail("map: receiver layer {}: tensor sizes do not match the geometries", j);
  }
  for (const BoundaryMap& b : m.boundaries) {
    if (b.r < 1 || b.r > gr.n_layers || b.sender_hidden < 0 || b.sender_hidden > gs.n_layers ||
        !size_is(b.weight, gr.hidden_size * gs.hidden_size) || !size_is(b.bias, gr.hidden_size)) {
      fail("map: boundary map r = {} does not match the geometries", b.r);
    }
  }
}

}  // namespace

std::unique_ptr<CacheMap> CacheMap::from_data(MapData map) {
  validate(map);
  return std::make_unique<LinearCacheMap>(std::move(map));
}

std::unique_ptr<CacheMap> CacheMap::load(const std::filesystem::path& dir, const Model& sender,
                                         const Model& receiver) {
  MapData map = read_map_dir(dir);
  check_route(map, dir, sender, receiver);
  return from_data(std::move(map));
}

}  // namespace molt
