// Qwen2 forward pass. One layer loop serves prefill (GEMM, n > 1) and decode (matvec, n = 1);
// selective recompute reuses the same loop from a given layer on.
#include "molt/model/model.h"

#include <algorithm>
#include <cstring>
#include <new>
#include <optional>

#include "molt/common/error.h"
#include "molt/kernels/attention.h"
#include "molt/kernels/team.h"
#include "molt/model/layout_cache.h"

namespace molt {

// The rows of one pass of the layers: n consecutive positions p0 .. of one cache (prefill,
// forward_layers, decode), or one token at the end of each of n caches (batched decode).
struct Model::Rows {
  std::span<KVCache* const> caches;  // one, or one per row
  int64_t p0 = 0;                    // first position, with one cache
  bool apart() const { return caches.size() > 1; }
  KVCache& cache(int64_t i) const { return *caches[apart() ? static_cast<size_t>(i) : 0]; }
  int64_t pos(int64_t i) const { return apart() ? caches[static_cast<size_t>(i)]->size() : p0 + i; }
};

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

bool is_dense(DType t) {
  return t == DType::F32 || t == DType::BF16 || t == DType::F16;
}

// The weight of linear (or embedding) `module` ("model.layers.0.self_attn.q_proj"), [rows, cols]
// logical, dense or quantised as config.json says. MLX leaves some modules dense (a layer
// whose input size the group does not divide, or per-layer "false"): a dense weight with no
// scales is taken as it is.
WeightMatrix linear_weight(const WeightStore& s, const ModelConfig& c, const std::string& module,
                           int64_t rows, int64_t cols) {
  const std::string wname = module + ".weight";
  if (!c.quantization) return matrix(s, wname, rows, cols);
  const QuantSpec& spec = *c.quantization;
  const QuantLayer l = spec.layer(module);
  const TensorView& t = s.get(wname);
  const TensorView* sc = s.find(module + ".scales");
  const TensorView* bi = s.find(module + ".biases");
  if (l.bits == 0 || (sc == nullptr && is_dense(t.dtype))) return matrix(s, wname, rows, cols);
  const bool int8 = spec.mode == "int8";
  const DType want = int8 ? DType::I8 : DType::U32;
  if (t.dtype != want) {
    fail("{}: dtype {} but a {} weight is stored as {}", where(s, wname), dtype_name(t.dtype),
         int8 ? "int8-quantised" : "MLX-quantised", dtype_name(want));
  }
  if (sc == nullptr) {
    fail("{}: quantised weight without its scales (tensor '{}.scales' is missing)", where(s, wname),
         module);
  }
  int64_t G = l.group_size;
  if (int8) {
    check_shape(s, t, {rows, cols});
    if (G == 0) G = cols;
  } else {
    if (l.bits != 4 && l.bits != 8) {
      fail("{}: {}-bit weights are not supported (4 or 8)", where(s, wname), l.bits);
    }
    if (spec.layout == "rows8") {
      if (rows % 8 != 0 || cols * l.bits % 32 != 0 ||
          t.shape != std::vector<int64_t>{rows / 8, cols * l.bits / 32 * 8}) {
        fail(
            "{}: packed shape {} but {} rows of {} inputs at {} bits, interleaved by 8 (layout "
            "rows8), need [{}, {}] uint32",
            where(s, wname), t.shape_str(), rows, cols, l.bits, rows / 8, cols * l.bits / 32 * 8);
      }
    } else if (cols * l.bits % 32 != 0 ||
               t.shape != std::vector<int64_t>{rows, cols * l.bits / 32}) {
      fail("{}: packed shape {} but {} inputs at {} bits need [{}, {}] uint32", where(s, wname),
           t.shape_str(), cols, l.bits, rows, cols * l.bits / 32);
    }
    if (bi == nullptr) {
      fail("{}: MLX-quantised weight without its biases (tensor '{}.biases' is missing)",
           where(s, wname), module);
    }
  }
  if (G <= 0 || cols % G != 0) {
    fail("{}: group size {} does not divide the input dimension {}", where(s, wname), G, cols);
  }
  const bool rows8 = !int8 && spec.layout == "rows8";
  const std::vector<int64_t> table =
      rows8 ? std::vector<int64_t>{rows / 8, cols / G * 8} : std::vector<int64_t>{rows, cols / G};
  check_dense_dtype(s, *sc);
  check_shape(s, *sc, table);
  if (bi != nullptr && !int8) {
    if (bi->dtype != sc->dtype) {
      fail("{}: dtype {} differs from the scales' {}", where(s, bi->name), dtype_name(bi->dtype),
           dtype_name(sc->dtype));
    }
    check_shape(s, *bi, table);
  }
  WeightMatrix w{t.dtype, rows, cols, t.data};
  w.bits = int8 ? 8 : l.bits;
  w.group_size = G;
  w.scale_dtype = sc->dtype;
  w.scales = sc->data;
  w.biases = int8 ? nullptr : bi->data;
  w.rows8 = rows8;
  return w;
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

// y[n × rows] = x[n × cols] Wᵀ through the path suited to the rows: one token, or one token of
// each of n sequences (`decode`), takes the matvec kernels, whose results do not depend on n;
// n tokens of one sequence take the GEMM path.
void linear(const WeightMatrix& w, const float* x, int64_t n, float* y, bool decode) {
  if (n == 1 || decode) {
    matvec_batch(w, x, n, y);
  } else {
    matmul(w, x, n, y);
  }
}

// Several linears of the same input: one pass of the threads at decode.
void linear3(const WeightMatrix& a, const WeightMatrix& b, const WeightMatrix& c, const float* x,
             int64_t n, bool decode, float* ya, float* yb, float* yc) {
  if (n == 1 || decode) {
    const WeightMatrix* ws[] = {&a, &b, &c};
    float* ys[] = {ya, yb, yc};
    matvec_batch(ws, x, n, ys);
  } else {
    matmul(a, x, n, ya);
    matmul(b, x, n, yb);
    matmul(c, x, n, yc);
  }
}

void linear2(const WeightMatrix& a, const WeightMatrix& b, const float* x, int64_t n, bool decode,
             float* ya, float* yb) {
  if (n == 1 || decode) {
    const WeightMatrix* ws[] = {&a, &b};
    float* ys[] = {ya, yb};
    matvec_batch(ws, x, n, ys);
  } else {
    matmul(a, x, n, ya);
    matmul(b, x, n, yb);
  }
}

void check_geometry(const CacheGeometry& g, const ModelConfig& c, const char* op, int64_t index) {
  if (g.n_layers != c.num_hidden_layers || g.n_kv_heads != c.num_key_value_heads ||
      g.head_dim != c.head_dim) {
    const std::string which = index < 0 ? "the KV cache" : fmt::format("KV cache {}", index);
    fail(
        "{}: {} geometry ({} layers, {} kv heads, head_dim {}) does not match the model ({}, {}, "
        "{})",
        op, which, g.n_layers, g.n_kv_heads, g.head_dim, c.num_hidden_layers, c.num_key_value_heads,
        c.head_dim);
  }
}

}  // namespace

Precision parse_precision(const std::string& name) {
  if (name == "native") return Precision::Native;
  if (name == "int8") return Precision::Int8;
  if (name == "q4") return Precision::Q4;
  if (name == "q8") return Precision::Q8;
  fail("precision '{}' is not one of native, int8, q4, q8", name);
}

WeightLayout parse_weight_layout(const std::string& name) {
  if (name == "auto") return WeightLayout::Auto;
  if (name == "stored") return WeightLayout::Stored;
  if (name == "memory") return WeightLayout::Memory;
  fail("layout '{}' is not one of auto, stored, memory", name);
}

const char* precision_name(Precision p) {
  switch (p) {
    case Precision::Int8:
      return "int8";
    case Precision::Q4:
      return "q4";
    case Precision::Q8:
      return "q8";
    default:
      return "native";
  }
}

// Out of memory (a quantised copy, an f32 vector) becomes an error naming the checkpoint; the
// half-built model has been destroyed by then, so nothing of it stays mapped or allocated.
std::unique_ptr<Model> Model::load(const std::filesystem::path& dir,
                                   const LoadOptions& options) try {
  std::unique_ptr<Model> m(new Model());
  m->bind(dir);
  const std::optional<QuantSpec>& spec = m->config_.quantization;
  if (spec && options.precision != Precision::Native) {
    fail("{}: the checkpoint is already quantised; --precision {} needs a dense one",
         (dir / "config.json").string(), precision_name(options.precision));
  }
  // The source binds first, so a malformed checkpoint is reported as itself, never as its copy.
  // Auto re-lays out 4-bit weights only: at 8 bits both layouts decode alike on AVX-512 VNNI
  // (0.5B: 55.9-60.9 tok/s rows8, 56.0-59.0 as stored), not worth a second copy on disk.
  if (options.layout == WeightLayout::Auto && spec && spec->mode == "affine" && spec->bits == 4 &&
      spec->layout == "rows" && rows8_preferred()) {
    const LayoutCacheResult r = rows8_layout_cache(dir);
    m->layout_note_ = r.note;
    if (r.rows8) {
      std::unique_ptr<Model> copy(new Model());
      try {
        copy->bind(r.dir);
        copy->layout_note_ = r.note;
        m = std::move(copy);
      } catch (const Error& e) {
        m->layout_note_ = fmt::format("weights: as stored (the rows8 copy {} did not load: {})",
                                      r.dir.string(), e.what());
      }
    }
  }
  const ModelConfig& c = m->config_;
  ModelWeights& w = m->weights_;
  if (options.precision != Precision::Native) m->quantize_weights(options);
  const bool heap_q4 = options.precision == Precision::Q4;  // quantised at load: on the heap
  if (rows8_preferred() && (options.layout == WeightLayout::Memory ||
                            (options.layout == WeightLayout::Auto && heap_q4))) {
    m->interleave_weights();
  }
  if (c.tie_word_embeddings) w.lm_head = w.embed;
  return m;
} catch (const std::bad_alloc&) {
  fail("{}: out of memory while loading the checkpoint{}: an allocation failed", dir.string(),
       options.precision == Precision::Native
           ? ""
           : fmt::format(" (quantising to {} at load)", precision_name(options.precision)));
}

void Model::bind(const std::filesystem::path& dir) {
  config_ = load_model_config(dir);
  const ModelConfig& c = config_;
  store_ = WeightStore::open_dir(dir);
  const WeightStore& s = store_;
  ModelWeights& w = weights_;
  const int64_t d = c.hidden_size, q = c.q_dim(), kv = c.kv_dim(), ff = c.intermediate_size;

  w.embed = linear_weight(s, c, "model.embed_tokens", c.vocab_size, d);
  if (!c.tie_word_embeddings) w.lm_head = linear_weight(s, c, "lm_head", c.vocab_size, d);
  w.final_norm = vector_f32(s, "model.norm.weight", d);
  w.layers.resize(static_cast<size_t>(c.num_hidden_layers));
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = fmt::format("model.layers.{}.", l);
    LayerWeights& L = w.layers[static_cast<size_t>(l)];
    L.q = linear_weight(s, c, p + "self_attn.q_proj", q, d);
    L.k = linear_weight(s, c, p + "self_attn.k_proj", kv, d);
    L.v = linear_weight(s, c, p + "self_attn.v_proj", kv, d);
    L.o = linear_weight(s, c, p + "self_attn.o_proj", d, q);
    if (c.attention_bias) {
      L.q_bias = vector_f32(s, p + "self_attn.q_proj.bias", q);
      L.k_bias = vector_f32(s, p + "self_attn.k_proj.bias", kv);
      L.v_bias = vector_f32(s, p + "self_attn.v_proj.bias", kv);
    }
    L.gate = linear_weight(s, c, p + "mlp.gate_proj", ff, d);
    L.up = linear_weight(s, c, p + "mlp.up_proj", ff, d);
    L.down = linear_weight(s, c, p + "mlp.down_proj", d, ff);
    L.input_norm = vector_f32(s, p + "input_layernorm.weight", d);
    L.post_attention_norm = vector_f32(s, p + "post_attention_layernorm.weight", d);
  }
  w.bytes = s.total_bytes();
}

void Model::quantize_weights(const LoadOptions& o) {
  ModelWeights& w = weights_;
  auto quantize = [&](WeightMatrix& mat) {
    // As MLX does, a matrix the group does not tile stays dense.
    if (o.precision != Precision::Int8 && mat.cols % o.group_size != 0) return;
    const DType scale_dtype = mat.dtype;  // MLX keeps scales in the model dtype
    auto q = std::make_unique<QuantizedMatrix>(
        o.precision == Precision::Int8 ? quantize_int8(mat, 0)
                                       : quantize_affine(mat, o.precision == Precision::Q4 ? 4 : 8,
                                                         o.group_size, scale_dtype));
    w.bytes = w.bytes - mat.bytes() + q->view().bytes();
    mat = q->view();
    owned_.push_back(std::move(q));
  };
  quantize(w.embed);
  if (!config_.tie_word_embeddings) quantize(w.lm_head);
  for (LayerWeights& L : w.layers) {
    for (WeightMatrix* mat : {&L.q, &L.k, &L.v, &L.o, &L.gate, &L.up, &L.down}) quantize(*mat);
  }
  // Nothing refers to the file's pages any more: give them back.
  store_.release_pages();
}

// MLX weights get their rows interleaved by 8 for the decode kernel (interleave_rows8): a
// copy of each, made once at load; the file's pages of each matrix (or its row-major copy from
// load-time quantisation) are let go as soon as its copy exists. Matrices whose rows do not
// tile by 8 stay as they are.
void Model::interleave_weights() {
  ModelWeights& w = weights_;
  auto interleave = [&](WeightMatrix& mat) {
    if (mat.dtype != DType::U32 || mat.rows % 8 != 0 || mat.rows8) return;
    auto q = std::make_unique<QuantizedMatrix>(interleave_rows8(mat));
    // The file's copy goes as each matrix is done, so the peak stays near one copy.
    const size_t tables =
        static_cast<size_t>(mat.rows * mat.groups()) * dtype_size(mat.scale_dtype);
    store_.release_range(mat.data, mat.data_bytes());
    store_.release_range(mat.scales, tables);
    store_.release_range(mat.biases, tables);
    // A load-time quantised row-major copy nothing refers to any more.
    std::erase_if(owned_, [&](const std::unique_ptr<QuantizedMatrix>& o) {
      return o->data.data() == mat.data;
    });
    mat = q->view();
    owned_.push_back(std::move(q));
  };
  interleave(w.embed);
  if (!config_.tie_word_embeddings) interleave(w.lm_head);
  for (LayerWeights& L : w.layers) {
    for (WeightMatrix* mat : {&L.q, &L.k, &L.v, &L.o, &L.gate, &L.up, &L.down}) interleave(*mat);
  }
}

CacheGeometry Model::cache_geometry() const {
  return {config_.num_hidden_layers, config_.num_key_value_heads, config_.head_dim,
          config_.hidden_size};
}

KVCache Model::new_cache(int64_t capacity, bool keep_hidden, KvDType kv) const {
  return KVCache(cache_geometry(), capacity, keep_hidden, kv);
}

int64_t Model::layer_scratch_floats(int64_t n) const {
  const ModelConfig& c = config_;
  // xn, tmp; q, att; gate, up; a cos/sin table per position; new K and V rows (of a batched
  // decode, or of a cache not stored as f32).
  return n * (2 * c.hidden_size + 2 * c.q_dim() + 2 * c.intermediate_size + c.head_dim +
              2 * c.kv_dim());
}

void Model::forward_layers(int64_t first, int64_t p0, int64_t n, std::span<float> hidden,
                           KVCache& cache, int64_t last) const {
  const ModelConfig& c = config_;
  if (last < 0) last = c.num_hidden_layers;
  if (first < 0 || first > c.num_hidden_layers) fail("forward_layers: bad first layer {}", first);
  if (last < first || last > c.num_hidden_layers) fail("forward_layers: bad last layer {}", last);
  if (static_cast<int64_t>(hidden.size()) != n * c.hidden_size) {
    fail("forward_layers: hidden has {} floats, expected {} × {}", hidden.size(), n, c.hidden_size);
  }
  if (p0 < 0 || p0 + n > cache.capacity()) {
    fail("forward_layers: positions [{}, {}) outside the cache capacity of {}", p0, p0 + n,
         cache.capacity());
  }
  float* work = cache.scratch(static_cast<size_t>(layer_scratch_floats(n))).data();
  KVCache* one[] = {&cache};
  run_layers(first, last, Rows{one, p0}, n, hidden.data(), work);
}

void Model::run_layers(int64_t first, int64_t last, const Rows& rows, int64_t n, float* x,
                       float* work) const {
  const ModelConfig& c = config_;
  const int64_t d = c.hidden_size, qd = c.q_dim(), kvd = c.kv_dim(), ff = c.intermediate_size,
                hd = c.head_dim;
  const float eps = static_cast<float>(c.rms_norm_eps);
  const AttentionShape shape{c.num_attention_heads, c.num_key_value_heads, hd};
  const bool apart = rows.apart();
  KVCache& cache = rows.cache(0);
  const int64_t p0 = rows.pos(0);

  float* xn = work;
  float* tmp = xn + n * d;
  float* q = tmp + n * d;
  float* att = q + n * qd;
  float* gate = att + n * qd;
  float* up = gate + n * ff;
  // The RoPE angles of these positions serve every layer: cos then sin, hd/2 each.
  float* rope_cs = up + n * ff;
  // Rows of different caches get their K and V here first (one cache's rows go straight in).
  float* k_new = rope_cs + n * hd;
  float* v_new = k_new + n * kvd;
  for (int64_t i = 0; i < n; ++i) {
    rope_cos_sin(rope(), rows.pos(i), rope_cs + i * hd, rope_cs + i * hd + hd / 2);
  }
  // Each sequence's query against its own cache, all in one region; kept between calls so
  // steady-state decoding allocates nothing.
  thread_local std::vector<AttentionQuery> queries;
  for (int64_t l = first; l < last; ++l) {
    const LayerWeights& L = weights_.layers[static_cast<size_t>(l)];
    for (int64_t i = 0; i < n; ++i) {
      KVCache& ci = rows.cache(i);
      if (ci.keeps_hidden()) {
        std::memcpy(ci.hidden(l).data() + rows.pos(i) * d, x + i * d, sizeof(float) * d);
      }
    }
    // Attention block. With one f32 cache, K and V go straight into its rows of these
    // positions; else they are computed here and stored (rounded to the cache's type).
    const bool direct = !apart && cache.kv_dtype() == KvDType::kF32;
    float* k_out = direct ? cache.k(l).data() + p0 * kvd : k_new;
    float* v_out = direct ? cache.v(l).data() + p0 * kvd : v_new;
    for (int64_t i = 0; i < n; ++i) rmsnorm(x + i * d, L.input_norm.data(), d, eps, xn + i * d);
    linear3(L.q, L.k, L.v, xn, n, apart, q, k_out, v_out);
    add_bias(q, L.q_bias, n);
    add_bias(k_out, L.k_bias, n);
    add_bias(v_out, L.v_bias, n);
    for (int64_t i = 0; i < n; ++i) {
      const float* cs = rope_cs + i * hd;
      rope_rotate(hd, cs, cs + hd / 2, q + i * qd, c.num_attention_heads);
      rope_rotate(hd, cs, cs + hd / 2, k_out + i * kvd, c.num_key_value_heads);
    }
    if (apart) {
      queries.clear();
      for (int64_t i = 0; i < n; ++i) {
        KVCache& ci = rows.cache(i);
        const int64_t p = rows.pos(i);
        ci.write_k(l, p, 1, k_new + i * kvd);
        ci.write_v(l, p, 1, v_new + i * kvd);
        queries.push_back({q + i * qd, ci.k_rows(l), ci.v_rows(l), p, att + i * qd, ci.kv_dtype()});
      }
      attention_batch(shape, queries);
    } else {
      if (!direct) {
        cache.write_k(l, p0, n, k_new);
        cache.write_v(l, p0, n, v_new);
      }
      attention(shape, q, cache.k_rows(l), cache.v_rows(l), cache.kv_dtype(), p0, n, att);
    }
    linear(L.o, att, n, tmp, apart);
    add_inplace(x, tmp, n * d);

    // SwiGLU MLP block.
    for (int64_t i = 0; i < n; ++i) {
      rmsnorm(x + i * d, L.post_attention_norm.data(), d, eps, xn + i * d);
    }
    linear2(L.gate, L.up, xn, n, apart, gate, up);
    silu_mul(gate, up, n * ff);
    linear(L.down, gate, n, tmp, apart);
    add_inplace(x, tmp, n * d);
  }
  if (last == c.num_hidden_layers) {
    for (int64_t i = 0; i < n; ++i) {
      KVCache& ci = rows.cache(i);
      if (ci.keeps_hidden()) {
        std::memcpy(ci.hidden(last).data() + rows.pos(i) * d, x + i * d, sizeof(float) * d);
      }
    }
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
  check_geometry(cache.geometry(), c, "forward", -1);
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
  // The residual stream, then the layers' working memory: one scratch block of the cache.
  float* x = cache.scratch(static_cast<size_t>(n * d + layer_scratch_floats(n))).data();
  for (int64_t i = 0; i < n; ++i) dequantize_row(weights_.embed, tokens[i], x + i * d);
  KVCache* one[] = {&cache};
  run_layers(0, c.num_hidden_layers, Rows{one, p0}, n, x, x + n * d);
  cache.commit(n);

  const float eps = static_cast<float>(c.rms_norm_eps);
  if (!logits.empty()) {
    for (int64_t i = 0; i < n; ++i) {
      rmsnorm(x + i * d, weights_.final_norm.data(), d, eps, x + i * d);
    }
    linear(weights_.lm_head, x, n, logits.data(), false);
    if (!last_logits.empty()) {
      std::copy_n(logits.data() + (n - 1) * V, V, last_logits.data());
    }
  } else if (!last_logits.empty()) {
    float* last = x + (n - 1) * d;
    rmsnorm(last, weights_.final_norm.data(), d, eps, last);
    matvec(weights_.lm_head, last, last_logits.data());
  }
}

std::vector<float> Model::prefill(std::span<const int32_t> tokens, KVCache& cache) const {
  std::vector<float> out(static_cast<size_t>(config_.vocab_size));
  forward(tokens, cache, {}, out);
  return out;
}

void Model::decode(int32_t token, KVCache& cache, std::span<float> logits) const {
  if (static_cast<int64_t>(logits.size()) != config_.vocab_size) {
    fail("decode: logits span has {} floats, expected {}", logits.size(), config_.vocab_size);
  }
  KVCache* one[] = {&cache};
  decode_batch(std::span<const int32_t>(&token, 1), one, logits);
}

void Model::decode_batch(std::span<const int32_t> tokens, std::span<KVCache* const> caches,
                         std::span<float> logits) const {
  const ModelConfig& c = config_;
  const int64_t B = static_cast<int64_t>(tokens.size()), d = c.hidden_size, V = c.vocab_size;
  // Every check comes before any cache changes.
  if (caches.size() != tokens.size()) {
    fail("decode_batch: {} tokens but {} caches (one token per sequence)", tokens.size(),
         caches.size());
  }
  if (static_cast<int64_t>(logits.size()) != B * V) {
    fail("decode_batch: logits span has {} floats, expected {} sequences × {}", logits.size(), B,
         V);
  }
  for (int64_t i = 0; i < B; ++i) {
    const KVCache* ci = caches[static_cast<size_t>(i)];
    if (ci == nullptr) fail("decode_batch: cache {} is null", i);
    check_geometry(ci->geometry(), c, "decode_batch", i);
    if (ci->size() >= ci->capacity()) {
      fail("decode_batch: cache {} is full ({} of {} positions)", i, ci->size(), ci->capacity());
    }
    for (int64_t j = 0; j < i; ++j) {
      if (caches[static_cast<size_t>(j)] == ci) {
        fail("decode_batch: caches {} and {} are the same cache (one step per sequence)", j, i);
      }
    }
    const int32_t t = tokens[static_cast<size_t>(i)];
    if (t < 0 || t >= V) {
      fail("decode_batch: token id {} of sequence {} is out of range [0, {})", t, i, V);
    }
  }
  if (B == 0) return;

  // The residual streams of all rows, then the layers' working memory: one scratch block of the
  // first cache (sized by the largest batch it has led).
  float* x = caches[0]->scratch(static_cast<size_t>(B * d + layer_scratch_floats(B))).data();
  for (int64_t i = 0; i < B; ++i) {
    dequantize_row(weights_.embed, tokens[static_cast<size_t>(i)], x + i * d);
  }
  const Rows rows{caches, caches[0]->size()};
  // The step's parallel kernel calls (~120 at 0.5B) share one OpenMP region (kernels/team.h).
  run_as_team([&] {
    run_layers(0, c.num_hidden_layers, rows, B, x, x + B * d);
    const float eps = static_cast<float>(c.rms_norm_eps);
    for (int64_t i = 0; i < B; ++i) {
      rmsnorm(x + i * d, weights_.final_norm.data(), d, eps, x + i * d);
    }
    linear(weights_.lm_head, x, B, logits.data(), true);
  });
  for (KVCache* ci : caches) ci->commit(1);
}

std::vector<float> Model::decode(int32_t token, KVCache& cache) const {
  std::vector<float> out(static_cast<size_t>(config_.vocab_size));
  decode(token, cache, out);
  return out;
}

}  // namespace molt
