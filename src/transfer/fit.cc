#include "molt/transfer/fit.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <utility>

#include "molt/common/error.h"
#include "molt/transfer/corpus.h"
#include "molt/transfer/embed_features.h"
#include "molt/transfer/eval.h"
#include "molt/transfer/ridge.h"
#include "molt/transfer/rope_sandwich.h"
#include "molt/transfer/transfer.h"

namespace molt {
namespace {

constexpr double kTokenIdentityBudgetBytes = 512.0 * 1024 * 1024;

void say(const FitLog& log, const std::string& s) {
  if (log) log(s);
}

// Rows of every layer at the sampled positions, concatenated layer after layer, as double.
// Keys are un-rotated at the model's own angles first, unless `rotated` (the ablation).
std::vector<double> layer_rows(const KVCache& c, const RopeSpec& rope, bool keys,
                               const std::vector<int64_t>& pos, bool rotated = false) {
  const CacheGeometry& g = c.geometry();
  const int64_t kv = g.kv_dim(), width = g.n_layers * kv, T = c.size();
  const int64_t R = static_cast<int64_t>(pos.size());
  std::vector<double> out(static_cast<size_t>(R * width));
  std::vector<float> plain;
  const bool unrotate = keys && !rotated;
  const RopeTable table(rope, 0, unrotate ? T : 0);
  for (int64_t l = 0; l < g.n_layers; ++l) {
    const float* src = keys ? c.k(l).data() : c.v(l).data();
    if (unrotate) {
      plain.assign(src, src + T * kv);
      table.rotate(plain.data(), 0, T, g.n_kv_heads, /*inverse=*/true);
      src = plain.data();
    }
    for (int64_t i = 0; i < R; ++i) {
      const float* row = src + pos[i] * kv;
      double* dst = &out[i * width + l * kv];
      for (int64_t c2 = 0; c2 < kv; ++c2) dst[c2] = row[c2];
    }
  }
  return out;
}

// The x rows of the statistics: the sender's blocks of channels side by side (keys, or keys
// then values with joint_kv; each [R × L_s·kv_s]), then the layout's token features
// (embed_features.h). `e`: the receiver's normed embeddings of the window (normed_embeddings).
std::vector<double> x_rows(const std::vector<const std::vector<double>*>& blocks,
                           const StatsLayout& layout, const std::vector<float>& e,
                           const std::vector<int64_t>& pos) {
  const int64_t R = static_cast<int64_t>(pos.size());
  const int64_t w = layout.sender.n_layers * layout.sender.kv_dim(), dx = layout.x_dim();
  const int64_t H = layout.receiver.hidden_size;
  if (blocks.size() == 1 && layout.embed_tokens == 0) return *blocks[0];
  std::vector<double> out(static_cast<size_t>(R * dx));
  for (int64_t i = 0; i < R; ++i) {
    double* row = out.data() + i * dx;
    for (const std::vector<double>* b : blocks) row = std::copy_n(b->data() + i * w, w, row);
    embed_features(e, H, layout.embed_tokens, pos[i], row);
  }
  return out;
}

std::vector<double> hidden_rows(const KVCache& c, int64_t index, const std::vector<int64_t>& pos) {
  const int64_t d = c.geometry().hidden_size;
  std::vector<double> out(pos.size() * static_cast<size_t>(d));
  const float* h = c.hidden(index).data();
  for (size_t i = 0; i < pos.size(); ++i) {
    for (int64_t e = 0; e < d; ++e) out[i * d + e] = h[pos[i] * d + e];
  }
  return out;
}

// Where a map's inputs sit in the statistics' x: the sender block(s) it reads (offsets of the
// keys' and the values' blocks; one offset when it reads one kind) and the token features.
struct InputBlocks {
  std::vector<int64_t> offsets;  // keys' block, then values' block with joint reading
  int64_t kvs = 0;
};

// Input channels of a source list: all KV heads of each source layer, in list order, for each
// block read (keys of every source, then values of every source).
std::vector<int64_t> source_channels(const std::vector<int64_t>& sources, const InputBlocks& in) {
  std::vector<int64_t> xi;
  for (int64_t off : in.offsets) {
    for (int64_t s : sources) {
      for (int64_t c = 0; c < in.kvs; ++c) xi.push_back(off + s * in.kvs + c);
    }
  }
  return xi;
}

// The blocks a K (keys = true) or V map reads in statistics of this layout.
InputBlocks input_blocks(const StatsLayout& lay, bool keys, bool joint) {
  const int64_t kvs = lay.sender.kv_dim(), values = lay.joint_kv ? lay.sender.n_layers * kvs : 0;
  if (joint) return {{0, values}, kvs};
  return {{keys ? 0 : values}, kvs};
}

RidgeFit slice_outputs(const RidgeFit& f, int64_t c0, int64_t n) {
  RidgeFit s;
  s.in = f.in;
  s.out = n;
  s.w.assign(f.w.begin() + c0 * f.in, f.w.begin() + (c0 + n) * f.in);
  s.b.assign(f.b.begin() + c0, f.b.begin() + c0 + n);
  return s;
}

std::vector<float> to_f32(const std::vector<double>& v) {
  return {v.begin(), v.end()};
}

nlohmann::json residual_json(const Residual& r) {
  return {{"rel_rms", r.rel_rms()}, {"centred", r.centred()}};
}

// Per receiver layer: fits for the given source lists. Layers with the same list share one
// factorisation (solved together, then split by output rows).
struct LayerSolve {
  std::vector<RidgeFit> fits;
  std::vector<Residual> residuals;
};

LayerSolve solve_layers(const Moments& train, const Moments& eval,
                        const std::vector<std::vector<int64_t>>& sources, const InputBlocks& blocks,
                        const std::vector<int64_t>& features, int64_t kvr, double lambda,
                        const char* what) {
  LayerSolve out;
  const int64_t L = static_cast<int64_t>(sources.size());
  out.fits.resize(static_cast<size_t>(L));
  out.residuals.resize(static_cast<size_t>(L));
  std::map<std::vector<int64_t>, std::vector<int64_t>> groups;
  for (int64_t j = 0; j < L; ++j) groups[sources[j]].push_back(j);
  for (const auto& [src, layers] : groups) {
    std::vector<int64_t> xi = source_channels(src, blocks);
    xi.insert(xi.end(), features.begin(), features.end());
    std::vector<int64_t> yi;
    for (int64_t j : layers) {
      for (int64_t c = 0; c < kvr; ++c) yi.push_back(j * kvr + c);
    }
    const RidgeFit fit = fit_ridge(train, xi, yi, lambda,
                                   fmt::format("{} of receiver layer {}", what, layers.front()));
    for (size_t g = 0; g < layers.size(); ++g) {
      const int64_t j = layers[g];
      out.fits[j] = slice_outputs(fit, static_cast<int64_t>(g) * kvr, kvr);
      out.residuals[j] = ridge_residual(eval, xi, channel_range(j * kvr, kvr), out.fits[j]);
    }
  }
  return out;
}

std::vector<int64_t> top_k(const std::vector<double>& score, int64_t k) {
  std::vector<int64_t> idx(score.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(),
                   [&](int64_t a, int64_t b) { return score[a] > score[b]; });
  idx.resize(static_cast<size_t>(std::min<int64_t>(k, static_cast<int64_t>(idx.size()))));
  std::sort(idx.begin(), idx.end());
  return idx;
}

// Token-identity floor on held-out rows of receiver layer j: ŷ = the training mean of y for the
// row's token id (the overall training mean for ids never seen in training).
Residual identity_floor(const SplitStats& train, const SplitStats& held, const Moments& held_m,
                        const Moments& train_m, const std::vector<double>& tok_train,
                        const std::vector<double>& tok_held, int64_t M, int64_t j, int64_t kvr) {
  Residual r = output_spread(held_m, channel_range(j * kvr, kvr));
  double rss = r.sum_sq;
  const int64_t V = static_cast<int64_t>(train.tok_count.size());
  for (int64_t t = 0; t < V; ++t) {
    const double nh = held.tok_count[t];
    if (nh == 0) continue;
    const double nt = train.tok_count[t];
    for (int64_t c = j * kvr; c < (j + 1) * kvr; ++c) {
      const double mu =
          nt > 0 ? tok_train[t * M + c] / nt : train_m.sy[c] / std::max(train_m.n, 1.0);
      rss += -2 * mu * tok_held[t * M + c] + nh * mu * mu;
    }
  }
  r.rss = rss;
  return r;
}

}  // namespace

nlohmann::json FitOptions::settings() const {
  return {{"method", method},
          {"k", k},
          {"lambda", lambda},
          {"sequences", sequences},
          {"seq_len", seq_len},
          {"stride", stride},
          {"recompute_layers", recompute_layers},
          {"heldout_every", heldout_every},
          {"select_windows", select_windows},
          {"shard_count", shard_count},
          {"token_identity", token_identity},
          {"embed_tokens", embed_tokens},
          {"native_layers", native_layers},
          {"rope_sandwich", rope_sandwich},
          {"sender_kv", sender_kv},
          {"sender", sender_name},
          {"receiver", receiver_name},
          {"corpus", corpus_name},
          {"sender_dir", sender_dir},
          {"receiver_dir", receiver_dir},
          {"corpus_path", corpus_path},
          {"corpus_ids", corpus_ids}};
}

FitOptions fit_options_from_settings(const nlohmann::json& s) {
  FitOptions o;
  try {
    o.method = s.at("method").get<std::string>();
    o.k = s.at("k").get<int64_t>();
    o.lambda = s.at("lambda").get<double>();
    o.sequences = s.at("sequences").get<int64_t>();
    o.seq_len = s.at("seq_len").get<int64_t>();
    o.stride = s.at("stride").get<int64_t>();
    o.recompute_layers = s.at("recompute_layers").get<int64_t>();
    o.heldout_every = s.at("heldout_every").get<int64_t>();
    o.select_windows = s.at("select_windows").get<int64_t>();
    o.shard_count = s.at("shard_count").get<int64_t>();
    o.token_identity = s.at("token_identity").get<bool>();
    o.embed_tokens = s.value("embed_tokens", int64_t{0});         // absent before token features
    o.native_layers = s.value("native_layers", int64_t{0});       // absent before native layers
    o.rope_sandwich = s.value("rope_sandwich", true);             // absent before the ablation
    o.sender_kv = s.value("sender_kv", std::string("separate"));  // absent before joint K/V
    o.sender_name = s.at("sender").get<std::string>();
    o.receiver_name = s.at("receiver").get<std::string>();
    o.corpus_name = s.at("corpus").get<std::string>();
    o.sender_dir = s.at("sender_dir").get<std::string>();
    o.receiver_dir = s.at("receiver_dir").get<std::string>();
    o.corpus_path = s.at("corpus_path").get<std::string>();
    o.corpus_ids = s.at("corpus_ids").get<bool>();
  } catch (const nlohmann::json::exception& e) {
    fail("fit settings: {}", e.what());
  }
  return o;
}

StatsLayout make_layout(const Model& sender, const Model& receiver, const FitOptions& o) {
  if (o.method != "ridge" && o.method != "depth-remap" && o.method != "diagonal") {
    fail("--method: '{}' is not one of ridge, depth-remap, diagonal", o.method);
  }
  StatsLayout l;
  l.kind = o.method == "diagonal" ? "diagonal" : "full";
  l.sender = sender.cache_geometry();
  l.receiver = receiver.cache_geometry();
  if (l.diagonal() &&
      (l.sender.n_layers != l.receiver.n_layers || l.sender.n_kv_heads != l.receiver.n_kv_heads ||
       l.sender.head_dim != l.receiver.head_dim)) {
    fail(
        "--method diagonal re-aligns the same weights at another precision: the sender ({} layers, "
        "{} KV heads × {}) and receiver ({} layers, {} KV heads × {}) geometries differ",
        l.sender.n_layers, l.sender.n_kv_heads, l.sender.head_dim, l.receiver.n_layers,
        l.receiver.n_kv_heads, l.receiver.head_dim);
  }
  if (o.embed_tokens != kAutoEmbedTokens && (o.embed_tokens < 0 || o.embed_tokens > 16)) {
    fail("--embed-tokens {} must be in 0..16 or auto", o.embed_tokens);
  }
  if (o.method != "ridge" && o.embed_tokens > 0) {
    fail("--embed-tokens applies to --method ridge only (not {})", o.method);
  }
  if (o.sender_kv != "separate" && o.sender_kv != "joint" && o.sender_kv != "auto") {
    fail("--sender-kv: '{}' is not one of separate, joint, auto", o.sender_kv);
  }
  if (o.method != "ridge" && o.sender_kv != "separate") {
    fail("--sender-kv {} applies to --method ridge only (not {})", o.sender_kv, o.method);
  }
  if (o.method == "ridge") l.embed_tokens = o.embed_tokens == kAutoEmbedTokens ? 3 : o.embed_tokens;
  if (o.native_layers < 0 || o.native_layers >= l.receiver.n_layers) {
    fail("--native-layers {} must be in [0, {}) (the receiver's layers)", o.native_layers,
         l.receiver.n_layers);
  }
  if (o.method != "ridge" && o.native_layers > 0) {
    fail("--native-layers applies to --method ridge only (not {})", o.method);
  }
  if (o.native_layers > 0 && o.recompute_layers > l.receiver.n_layers - o.native_layers) {
    fail("--native-layers {} and --recompute-layers {} overlap in a receiver of {} layers",
         o.native_layers, o.recompute_layers, l.receiver.n_layers);
  }
  l.native_layers = o.native_layers;
  l.joint_kv = o.sender_kv != "separate";
  l.rotated_keys = !o.rope_sandwich;
  if (o.recompute_layers < 0 || o.recompute_layers > l.receiver.n_layers) {
    fail("--recompute-layers {} must be in [0, {}] (the receiver's layers)", o.recompute_layers,
         l.receiver.n_layers);
  }
  const int64_t Ls = l.sender.n_layers, Lr = l.receiver.n_layers;
  for (int64_t r = 1; r <= o.recompute_layers; ++r) {
    const int64_t hs = std::llround(static_cast<double>(Lr - r) * static_cast<double>(Ls) / Lr);
    l.boundaries.push_back({r, std::clamp<int64_t>(hs, 0, Ls)});
  }
  // The token-identity floor's means are of un-rotated keys; rotated ones mean nothing per token.
  if (o.token_identity && o.rope_sandwich) {
    const int64_t V = std::min(sender.config().vocab_size, receiver.config().vocab_size);
    const double bytes = static_cast<double>(V) * (1 + 2.0 * Lr * l.receiver.kv_dim()) * 2 * 8;
    if (bytes <= kTokenIdentityBudgetBytes) l.token_vocab = V;
  }
  return l;
}

void accumulate_window(const StatsLayout& layout, SplitStats& split, const Model& sender,
                       const Model& receiver, std::span<const int32_t> ids, int64_t stride) {
  const int64_t T = static_cast<int64_t>(ids.size());
  if (T == 0) return;
  if (stride < 1) fail("--stride {} must be ≥ 1", stride);
  // Hidden states for the boundary maps, and for hidden-state token features (native layers).
  const bool hidden = !layout.boundaries.empty() || layout.native_layers > 0;
  KVCache sc = sender.new_cache(T, hidden), rc = receiver.new_cache(T, hidden);
  sender.forward(ids, sc, {});
  receiver.forward(ids, rc, {});
  std::vector<int64_t> pos;
  for (int64_t p = 0; p < T; p += stride) pos.push_back(p);
  const int64_t R = static_cast<int64_t>(pos.size());

  // The receiver's own forward above already holds the states the native layers produce.
  std::vector<float> e;
  if (layout.embed_tokens > 0) {
    e = layout.native_layers > 0
            ? normed_hidden_rows(receiver, std::as_const(rc).hidden(layout.native_layers))
            : normed_embeddings(receiver, ids);
  }
  const std::vector<double> sk = layer_rows(sc, sender.rope(), true, pos, layout.rotated_keys);
  const std::vector<double> sv = layer_rows(sc, sender.rope(), false, pos);
  const std::vector<double> yk = layer_rows(rc, receiver.rope(), true, pos, layout.rotated_keys);
  const std::vector<double> yv = layer_rows(rc, receiver.rope(), false, pos);
  if (layout.joint_kv) {
    const std::vector<double> x = x_rows({&sk, &sv}, layout, e, pos);
    split.k.add(x.data(), yk.data(), R);
    split.v.add(x.data(), yv.data(), R);
  } else {
    split.k.add(x_rows({&sk}, layout, e, pos).data(), yk.data(), R);
    split.v.add(x_rows({&sv}, layout, e, pos).data(), yv.data(), R);
  }
  for (size_t b = 0; b < layout.boundaries.size(); ++b) {
    const BoundarySpec& s = layout.boundaries[b];
    const std::vector<double> x = hidden_rows(sc, s.sender_hidden, pos);
    const std::vector<double> y = hidden_rows(rc, layout.receiver.n_layers - s.r, pos);
    split.boundary[b].add(x.data(), y.data(), R);
  }
  if (layout.token_vocab > 0) {
    const int64_t M = layout.receiver.n_layers * layout.receiver.kv_dim();
    for (int64_t i = 0; i < R; ++i) {
      const int32_t t = ids[pos[i]];
      if (t < 0 || t >= layout.token_vocab) continue;
      split.tok_count[t] += 1;
      for (int64_t c = 0; c < M; ++c) {
        split.tok_k[t * M + c] += yk[i * M + c];
        split.tok_v[t * M + c] += yv[i * M + c];
      }
    }
  }
  split.sequences += 1;
}

RouteStats collect_stats(const Model& sender, const Model& receiver, TokenStream& corpus,
                         const FitOptions& o, const FitProgress& progress, const FitLog& log) {
  if (o.shard_count < 1 || o.shard_index < 0 || o.shard_index >= o.shard_count) {
    fail("--shard {}/{}: the shard must be in 1..{}", o.shard_index + 1, o.shard_count,
         o.shard_count);
  }
  if (o.seq_len < 2) fail("--seq-len {} must be ≥ 2", o.seq_len);
  if (o.sequences < 1) fail("--sequences {} must be ≥ 1", o.sequences);
  RouteStats st;
  st.init(make_layout(sender, receiver, o));
  st.settings = o.settings();
  st.shard_index = o.shard_index;
  st.shard_count = o.shard_count;
  st.shards_merged = {o.shard_index};
  st.max_select_windows = o.select_windows;
  const int64_t vocab = std::min(sender.config().vocab_size, receiver.config().vocab_size);
  int64_t mine = 0;
  for (int64_t i = 0; i < o.sequences; ++i) mine += i % o.shard_count == o.shard_index;
  std::vector<int32_t> ids;
  int64_t done = 0, seen = 0;
  for (int64_t i = 0; i < o.sequences; ++i) {
    if (i % o.shard_count != o.shard_index) {
      if (!corpus.skip_window(o.seq_len)) break;
      ++seen;
      continue;
    }
    if (!corpus.next_window(o.seq_len, ids)) break;
    ++seen;
    for (int32_t t : ids) {
      if (t >= vocab) {
        fail("{}: token id {} is outside the models' vocabulary ({} ids)", corpus.path().string(),
             t, vocab);
      }
    }
    const bool held = o.heldout_every > 0 && i % o.heldout_every == o.heldout_every - 1;
    accumulate_window(st.layout, held ? st.heldout : st.train, sender, receiver, ids, o.stride);
    if (held) st.add_select_window(i, ids);
    ++done;
    if (progress) progress(done, mine);
  }
  if (seen < o.sequences) {
    say(log, fmt::format("note: {} holds only {} windows of {} tokens (asked for {})",
                         corpus.path().string(), seen, o.seq_len, o.sequences));
  }
  return st;
}

namespace {

// Receiver layer j's maps from fitted rows: weights and residuals.
struct SolvedLayers {
  std::vector<std::vector<int64_t>> k_sources, v_sources;
  LayerSolve k, v;
  int64_t embed_in = 0;       // token-feature inputs of every layer map
  bool joint_kv = false;      // K and V maps read the sources' keys and values
  int64_t native_layers = 0;  // receiver layers run natively (their maps unused)
};

SolvedLayers solve_sources(const SplitStats& train, const SplitStats& held, const StatsLayout& lay,
                           std::vector<std::vector<int64_t>> k_sources,
                           std::vector<std::vector<int64_t>> v_sources, bool joint,
                           const std::vector<int64_t>& features, double lambda) {
  SolvedLayers s;
  const int64_t kvr = lay.receiver.kv_dim();
  s.k = solve_layers(train.k, held.k, k_sources, input_blocks(lay, true, joint), features, kvr,
                     lambda, "keys");
  s.v = solve_layers(train.v, held.v, v_sources, input_blocks(lay, false, joint), features, kvr,
                     lambda, "values");
  s.embed_in = static_cast<int64_t>(features.size());
  s.joint_kv = joint;
  s.k_sources = std::move(k_sources);
  s.v_sources = std::move(v_sources);
  return s;
}

// The solved weights as the map stores them: f32, or rounded to BF16 (so that choosing k
// evaluates exactly what ships).
std::vector<float> stored(const std::vector<double>& w, DType dtype) {
  std::vector<float> out = to_f32(w);
  if (dtype == DType::BF16) {
    for (float& x : out) x = bf16_to_f32(f32_to_bf16(x));
  }
  return out;
}

void store_layers(const SolvedLayers& s, MapData& map) {
  map.features.embed_tokens = s.embed_in / map.receiver.geometry.hidden_size;
  map.features.joint_kv = s.joint_kv;
  map.features.native_layers = s.native_layers;
  for (size_t j = 0; j < map.layers.size(); ++j) {
    LayerMap& L = map.layers[j];
    L.k_sources = s.k_sources[j];
    L.v_sources = s.v_sources[j];
    L.embed_in = s.embed_in;
    L.joint_kv = s.joint_kv;
    L.k_weight = stored(s.k.fits[j].w, map.weight_dtype);
    L.k_bias = to_f32(s.k.fits[j].b);
    L.v_weight = stored(s.v.fits[j].w, map.weight_dtype);
    L.v_bias = to_f32(s.v.fits[j].b);
  }
}

// Over the mapped layers: the first `native` run natively, their maps unused.
Residual total(const std::vector<Residual>& rs, int64_t native) {
  Residual t;
  for (size_t j = static_cast<size_t>(native); j < rs.size(); ++j) t.add(rs[j]);
  return t;
}

// R²[j][i]: a centred ridge from all KV heads of sender layer i alone to receiver layer j,
// fitted on training rows and scored on `held` rows.
std::vector<std::vector<double>> single_source_r2(const Moments& train, const Moments& held,
                                                  const InputBlocks& blocks, int64_t Ls, int64_t Lr,
                                                  int64_t kvr, double lambda, const char* what) {
  std::vector<std::vector<double>> r2(Lr, std::vector<double>(Ls));
  const std::vector<int64_t> all_out = channel_range(0, Lr * kvr);
  for (int64_t i = 0; i < Ls; ++i) {
    const std::vector<int64_t> xi = source_channels({i}, blocks);
    const RidgeFit f =
        fit_ridge(train, xi, all_out, lambda, fmt::format("{} from sender layer {}", what, i));
    for (int64_t j = 0; j < Lr; ++j) {
      r2[j][i] =
          ridge_residual(held, xi, channel_range(j * kvr, kvr), slice_outputs(f, j * kvr, kvr))
              .r2();
    }
  }
  return r2;
}

// Which candidate's map gives the receiver the lowest NLL after a transferred prefix of the
// held-out windows; fills each candidate's "heldout_nll" / "nll_gap".
size_t choose_by_prefix_nll(const std::vector<MapData>& cands,
                            const std::vector<std::string>& labels, const RouteStats& st,
                            const Model& sender, const Model& receiver, int64_t prefix,
                            nlohmann::json& candidates, const FitLog& log, double* native_nll) {
  if (st.select_windows.empty()) {
    fail(
        "choosing k needs held-out windows (--heldout-every > 0 and enough --sequences); "
        "or give --k");
  }
  std::vector<std::vector<int32_t>> windows;
  for (const auto& w : st.select_windows) windows.push_back(w.second);
  std::vector<std::unique_ptr<CacheMap>> maps;
  std::vector<Condition> conds;
  for (size_t c = 0; c < cands.size(); ++c) {
    maps.push_back(CacheMap::from_data(cands[c]));
    const CacheMap* mp = maps.back().get();
    conds.push_back({labels[c], [mp, &sender, &receiver](const KVCache& s,
                                                         std::span<const int32_t> t, KVCache& d) {
                       mp->apply(sender, s, receiver, t, TransferOptions{}, d);
                     }});
  }
  const TransferEval ev = evaluate_transfer(sender, receiver, windows, prefix, conds, false);
  size_t best = 0;
  for (size_t c = 0; c < cands.size(); ++c) {
    candidates[c]["heldout_nll"] = ev.conditions[c].nll;
    candidates[c]["nll_gap"] = ev.conditions[c].nll_gap;
    say(log, fmt::format("{}: held-out prefix-KV NLL {:.4f} (gap {:+.4f} vs re-reading)", labels[c],
                         ev.conditions[c].nll, ev.conditions[c].nll_gap));
    if (ev.conditions[c].nll < ev.conditions[best].nll) best = c;
  }
  *native_nll = ev.native_nll;
  return best;
}

}  // namespace

MapData solve_route(const RouteStats& st, const Model& sender, const Model& receiver,
                    const FitOptions& o, const FitLog& log) {
  const StatsLayout& lay = st.layout;
  // Statistics with more token features solve fewer (a subset of their channels); auto tries
  // the counts they hold.
  StatsLayout want = make_layout(sender, receiver, o);
  if (o.embed_tokens != kAutoEmbedTokens && lay.embed_tokens < want.embed_tokens) {
    fail("statistics hold {} token features, --embed-tokens {} needs {}: collect them again",
         lay.embed_tokens, want.embed_tokens, want.embed_tokens);
  }
  want.embed_tokens = lay.embed_tokens;
  // Hidden-state features come with their native layers; statistics holding them also solve a
  // map without features and without native layers (the reference ridge), nothing between.
  const int64_t native = o.method == "ridge" ? o.native_layers : 0;
  if (native != lay.native_layers && o.method == "ridge" && (native != 0 || o.embed_tokens != 0)) {
    fail(
        "statistics hold the receiver's hidden states entering layer {} as token features: solve "
        "with --native-layers {}, or with --native-layers 0 and --embed-tokens 0",
        lay.native_layers, lay.native_layers);
  }
  // Statistics holding keys and values together also solve maps that read them apart.
  if (o.sender_kv != "separate" && !lay.joint_kv) {
    fail(
        "statistics hold the sender's K and V apart; --sender-kv {} needs them collected with "
        "--sender-kv joint or auto",
        o.sender_kv);
  }
  want.joint_kv = lay.joint_kv;
  want.native_layers = lay.native_layers;
  if (!(lay == want)) {
    fail("statistics were collected for another route, or for {} maps and cannot give {} ({})",
         lay.kind, o.method, lay.to_json().dump());
  }
  if (static_cast<int64_t>(st.shards_merged.size()) != st.shard_count) {
    fail("statistics cover {} of {} shards; merge all shards first (molt fit merge)",
         st.shards_merged.size(), st.shard_count);
  }
  const SplitStats& train = st.train;
  const bool has_held = st.heldout.k.n > 0;
  const SplitStats& held = has_held ? st.heldout : st.train;
  if (train.k.n < 1) fail("no training rows: the corpus is empty or every window is held out");
  const int64_t Ls = lay.sender.n_layers, Lr = lay.receiver.n_layers;
  const int64_t kvs = lay.sender.kv_dim(), kvr = lay.receiver.kv_dim();

  MapData map;
  map.method = o.method;
  // Ridge weights ship at 16 bits: half the bytes a switch must find room for; the rounding
  // (2⁻⁹ relative) is far inside the maps' residuals and the choice of k sees it.
  map.weight_dtype = o.method == "diagonal" ? DType::F32 : DType::BF16;
  map.sender = RungSpec::of(sender, o.sender_name);
  map.receiver = RungSpec::of(receiver, o.receiver_name);
  map.layers.resize(static_cast<size_t>(Lr));
  for (LayerMap& L : map.layers) L.kv_s = kvs;
  nlohmann::json& info = map.info;
  // Read by CacheMap: keys mapped as cached, without the sandwich (before k is chosen, so the
  // candidates are applied as the map will be).
  if (lay.rotated_keys) info["keys"] = "rotated";
  std::vector<Residual> res_k(Lr), res_v(Lr);

  if (o.method == "diagonal") {
    for (int64_t j = 0; j < Lr; ++j) {
      LayerMap& L = map.layers[j];
      L.k_sources = L.v_sources = {j};
      const DiagonalFit fk = fit_diagonal(train.k, j * kvr, kvr);
      const DiagonalFit fv = fit_diagonal(train.v, j * kvr, kvr);
      L.k_scale = to_f32(fk.scale);
      L.k_offset = to_f32(fk.offset);
      L.v_scale = to_f32(fv.scale);
      L.v_offset = to_f32(fv.offset);
      res_k[j] = diagonal_residual(held.k, j * kvr, kvr, fk);
      res_v[j] = diagonal_residual(held.v, j * kvr, kvr, fv);
    }
    info["lambda"] = 0.0;
    info["lambda_applied_to"] =
        "none: per layer and channel, y = scale·x + offset by ordinary least squares";
    info["k"] = 1;
    info["k_chosen_by"] = "diagonal re-alignment: receiver layer j reads sender layer j";
  } else if (o.method == "depth-remap") {
    std::vector<std::vector<int64_t>> src(Lr);
    for (int64_t j = 0; j < Lr; ++j)
      src[j] = {std::min<int64_t>(Ls - 1, (2 * j + 1) * Ls / (2 * Lr))};
    const SolvedLayers s = solve_sources(train, held, lay, src, src, false, {}, o.lambda);
    store_layers(s, map);
    res_k = s.k.residuals;
    res_v = s.v.residuals;
    info["k"] = 1;
    info["k_chosen_by"] = "depth remap: receiver layer j reads sender layer ⌊(j + ½)·L_s/L_r⌋";
  } else {
    const auto r2k = single_source_r2(train.k, held.k, input_blocks(lay, true, false), Ls, Lr, kvr,
                                      o.lambda, "keys");
    const auto r2v = single_source_r2(train.v, held.v, input_blocks(lay, false, false), Ls, Lr, kvr,
                                      o.lambda, "values");
    info["single_source_r2"] = {{"k", r2k}, {"v", r2v}};
    info["ranked_by"] =
        has_held ? "single-source R² on held-out rows, per receiver layer, keys and values apart"
                 : "single-source R² on training rows (nothing held out), per receiver layer, "
                   "keys and values apart";
    std::vector<int64_t> ks;
    if (o.k > 0) {
      ks = {std::min(o.k, Ls)};
    } else {
      for (int64_t k : {1, 2, 4, 8, 16}) {
        if (k < Ls) ks.push_back(k);
      }
      ks.push_back(Ls);
    }
    // Token-feature counts to try with each k (the layout holds up to lay.embed_tokens).
    std::vector<int64_t> es;
    if (o.embed_tokens == kAutoEmbedTokens) {
      for (int64_t e : {0, 1, 3}) {
        if (e <= lay.embed_tokens) es.push_back(e);
      }
    } else {
      es = {o.embed_tokens};
    }
    // What the maps read of the sender: apart, together, or both tried.
    std::vector<bool> joints;
    if (o.sender_kv != "joint") joints.push_back(false);
    if (o.sender_kv != "separate") joints.push_back(true);
    const int64_t H = lay.receiver.hidden_size;
    std::vector<MapData> cands;
    std::vector<SolvedLayers> solved;
    std::vector<std::string> labels;
    std::vector<std::pair<int64_t, int64_t>> pairs;  // (k, embed_tokens) of each candidate
    nlohmann::json candidates = nlohmann::json::array();
    for (const bool joint : joints) {
      for (int64_t e : es) {
        const std::vector<int64_t> features = channel_range(lay.sender_width(), e * H);
        for (int64_t k : ks) {
          std::vector<std::vector<int64_t>> sk(Lr), sv(Lr);
          for (int64_t j = 0; j < Lr; ++j) sk[j] = top_k(r2k[j], k), sv[j] = top_k(r2v[j], k);
          solved.push_back(solve_sources(train, held, lay, sk, sv, joint, features, o.lambda));
          solved.back().native_layers = native;
          MapData m = map;
          store_layers(solved.back(), m);
          cands.push_back(std::move(m));
          pairs.emplace_back(k, e);
          std::string label = es.size() > 1 || e > 0
                                  ? fmt::format("k = {:2}, {} token features", k, e)
                                  : fmt::format("k = {:2}", k);
          if (joints.size() > 1 || joint) label += joint ? ", K+V together" : ", K and V apart";
          labels.push_back(label);
          const Residual tk = total(solved.back().k.residuals, native),
                         tv = total(solved.back().v.residuals, native);
          say(log,
              fmt::format("{}: held-out residual K {:.4f} V {:.4f} (centred {:.4f} / {:.4f})",
                          labels.back(), tk.rel_rms(), tv.rel_rms(), tk.centred(), tv.centred()));
          candidates.push_back({{"k", k},
                                {"embed_tokens", e},
                                {"sender_kv", joint ? "joint" : "separate"},
                                {"k_residual", residual_json(tk)},
                                {"v_residual", residual_json(tv)}});
        }
      }
    }
    size_t best = 0;
    if (cands.size() > 1) {
      const int64_t prefix = o.seq_len * 3 / 4;
      double native = 0;
      best = choose_by_prefix_nll(cands, labels, st, sender, receiver, prefix, candidates, log,
                                  &native);
      info["k_chosen_by"] = fmt::format(
          "lowest held-out prefix-KV NLL: the receiver's NLL on the tokens after a transferred "
          "prefix of {} tokens, {} held-out windows of {}, over candidates k = {}{}{}",
          prefix, st.select_windows.size(), o.seq_len, fmt::join(ks, ", "),
          es.size() > 1 ? fmt::format(" × token features {}", fmt::join(es, ", ")) : "",
          joints.size() > 1 ? " × sender K and V apart or together" : "");
      info["select_native_nll"] = native;
    } else {
      info["k_chosen_by"] = o.k > 0 ? "given (--k)" : "the only candidate";
    }
    store_layers(solved[best], map);
    res_k = solved[best].k.residuals;
    res_v = solved[best].v.residuals;
    info["k"] = pairs[best].first;
    info["k_candidates"] = candidates;
  }
  if (o.method != "diagonal") {
    info["lambda"] = o.lambda;
    info["lambda_applied_to"] =
        "the centred input covariance: W = (XcᵀXc/N + λI)⁻¹ XcᵀYc/N with Xc, Yc the rows minus "
        "their means; intercept b = ȳ − Wᵀx̄ (not penalised); Cholesky (LAPACK dpotrf/dpotrs) in "
        "double";
  }
  if (o.method == "diagonal") {
    info["input"] = "the same layer's channel (keys un-rotated at the sender's RoPE)";
  } else {
    std::string in = map.features.joint_kv
                         ? "the keys (un-rotated at the sender's RoPE angles) of all KV heads of "
                           "the listed sender layers, concatenated in ascending layer order, "
                           "then their values in the same order (K and V maps alike)"
                         : "all KV heads of the listed sender layers, concatenated in ascending "
                           "layer order, keys un-rotated at the sender's RoPE angles";
    if (map.features.embed_tokens > 0 && map.features.native_layers > 0) {
      in += fmt::format(
          "; then the receiver's RMS-normalised hidden states entering layer {} (its first {} "
          "layers run natively over the context) of the token and the {} before it (zeros before "
          "position 0)",
          map.features.native_layers, map.features.native_layers, map.features.embed_tokens - 1);
    } else if (map.features.embed_tokens > 0) {
      in += fmt::format(
          "; then the receiver's RMS-normalised embeddings of the token and the {} before it "
          "(zeros before position 0)",
          map.features.embed_tokens - 1);
    }
    if (map.features.native_layers > 0) {
      info["native_layers"] = fmt::format(
          "receiver layers 0..{} run natively over the context when the map is applied; their "
          "maps are stored but not used",
          map.features.native_layers - 1);
    }
    info["input"] = in;
  }
  if (lay.rotated_keys) {
    info["input"] = info["input"].get<std::string>() +
                    "; here NOT un-rotated: keys as cached, after RoPE, and mapped keys are not "
                    "re-rotated (the ablation of the RoPE sandwich)";
  }

  // Selective recompute: boundary maps.
  nlohmann::json boundary_res = nlohmann::json::array();
  for (size_t b = 0; b < lay.boundaries.size(); ++b) {
    const BoundarySpec& s = lay.boundaries[b];
    const std::vector<int64_t> xi = channel_range(0, lay.sender.hidden_size);
    const std::vector<int64_t> yi = channel_range(0, lay.receiver.hidden_size);
    const RidgeFit f =
        fit_ridge(train.boundary[b], xi, yi, o.lambda, fmt::format("boundary map for r = {}", s.r));
    const Residual r = ridge_residual(held.boundary[b], xi, yi, f);
    map.boundaries.push_back({s.r, s.sender_hidden, to_f32(f.w), to_f32(f.b)});
    boundary_res.push_back({{"r", s.r},
                            {"sender_hidden", s.sender_hidden},
                            {"receiver_hidden", Lr - s.r},
                            {"rel_rms", r.rel_rms()},
                            {"centred", r.centred()}});
    say(log,
        fmt::format("boundary r = {}: sender hidden {} → receiver hidden {}: held-out residual "
                    "{:.4f} (centred {:.4f})",
                    s.r, s.sender_hidden, Lr - s.r, r.rel_rms(), r.centred()));
  }

  // Residuals per layer, beside the token-identity floor.
  const bool floor = lay.token_vocab > 0 && has_held;
  const int64_t M = Lr * kvr;
  nlohmann::json layers = nlohmann::json::array();
  Residual tk, tv, fk, fvv;
  const int64_t native_layers = map.features.native_layers;
  for (int64_t j = 0; j < Lr; ++j) {
    nlohmann::json e = {
        {"layer", j}, {"k", residual_json(res_k[j])}, {"v", residual_json(res_v[j])}};
    const bool native = j < native_layers;  // the receiver's own K/V: not in the totals
    if (native) {
      e["native"] = true;
    } else {
      tk.add(res_k[j]);
      tv.add(res_v[j]);
    }
    if (floor) {
      const Residual a = identity_floor(train, st.heldout, st.heldout.k, train.k, train.tok_k,
                                        st.heldout.tok_k, M, j, kvr);
      const Residual b = identity_floor(train, st.heldout, st.heldout.v, train.v, train.tok_v,
                                        st.heldout.tok_v, M, j, kvr);
      e["k_token_identity"] = residual_json(a);
      e["v_token_identity"] = residual_json(b);
      if (!native) {
        fk.add(a);
        fvv.add(b);
      }
    }
    layers.push_back(e);
  }
  nlohmann::json total = {{"k", residual_json(tk)}, {"v", residual_json(tv)}};
  if (floor) {
    total["k_token_identity"] = residual_json(fk);
    total["v_token_identity"] = residual_json(fvv);
  }
  info["residuals"] = {
      {"on", has_held ? "held-out rows" : "training rows (nothing held out)"},
      {"totals_over", native_layers > 0 ? fmt::format("receiver layers {}..{} (the mapped ones)",
                                                      native_layers, Lr - 1)
                                        : std::string("every receiver layer")},
      {"keys", lay.rotated_keys ? "rotated" : "un-rotated"},
      {"total", total},
      {"layers", layers},
      {"boundary", boundary_res}};
  say(log,
      fmt::format(
          "held-out residual K {:.4f} V {:.4f} (centred {:.4f} / {:.4f}){}", tk.rel_rms(),
          tv.rel_rms(), tk.centred(), tv.centred(),
          floor ? fmt::format("; token-identity floor K {:.4f} V {:.4f} (centred {:.4f} / {:.4f})",
                              fk.rel_rms(), fvv.rel_rms(), fk.centred(), fvv.centred())
                : ""));
  info["calibration"] = {{"sequences", o.sequences},
                         {"train_windows", train.sequences},
                         {"heldout_windows", st.heldout.sequences},
                         {"seq_len", o.seq_len},
                         {"stride", o.stride},
                         {"rows", "positions 0, stride, 2·stride, ... of each window"},
                         {"train_rows", train.k.n},
                         {"heldout_rows", st.heldout.k.n},
                         {"heldout_every", o.heldout_every},
                         {"shards", st.shard_count}};
  info["corpus"] = o.corpus_name;
  info["created_by"] = "molt fit";
  return map;
}

}  // namespace molt
