// Sufficient statistics of a route's regressions, accumulated in double precision.
//
// Fitting never holds the calibration rows: each window's rows are folded into sums (count,
// Σx, Σy, Σy², Σxxᵀ, Σxyᵀ) whose size depends only on the two geometries, so memory does not
// grow with the corpus, and two sets of sums over disjoint windows add up to the sums over
// their union — shards fitted apart merge exactly (up to the order of double additions).
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "molt/model/kv_cache.h"

namespace molt {

// Moments of one regression family x (dim_x) → y (dim_y).
struct Moments {
  int64_t dim_x = 0, dim_y = 0;
  bool diagonal = false;  // y_c is regressed on x_c alone (dim_x == dim_y): per-channel sums
  double n = 0;
  std::vector<double> sx, sy, syy;  // Σx, Σy, Σy² (per channel)
  std::vector<double> xx;  // Σxxᵀ [dim_x × dim_x], upper triangle valid; diagonal: Σx² [dim_x]
  std::vector<double> xy;  // Σxyᵀ [dim_x × dim_y];                       diagonal: Σx∘y [dim_x]

  void reset(int64_t dx, int64_t dy, bool diag);
  // Adds `rows` rows; x: [rows × dim_x], y: [rows × dim_y], row-major.
  void add(const double* x, const double* y, int64_t rows);
  void merge(const Moments& o);
  // Σ x_i x_j for any i, j (reads the upper triangle).
  double gram(int64_t i, int64_t j) const {
    return i <= j ? xx[static_cast<size_t>(i * dim_x + j)] : xx[static_cast<size_t>(j * dim_x + i)];
  }
};

// The receiver's hidden state entering layer L_r − r is regressed on the sender's hidden state
// entering layer `sender_hidden` (selective recompute of the receiver's last r layers).
struct BoundarySpec {
  int64_t r = 0;
  int64_t sender_hidden = 0;
};

// What is accumulated; two statistics merge only when their layouts are equal.
struct StatsLayout {
  // "full": all cross-layer moments (solvable as ridge or depth-remap); "diagonal": per channel
  std::string kind;
  CacheGeometry sender, receiver;
  std::vector<BoundarySpec> boundaries;
  int64_t token_vocab = 0;  // > 0: per-token sums of the receiver's K/V (token-identity floor)
  // Token features after the sender's inputs (embed_features.h): x gains embed_tokens ·
  // hidden_r columns, the receiver's normed embeddings of the token and those before it.
  int64_t embed_tokens = 0;
  // The token features are the receiver's hidden states entering this layer (its first
  // native_layers layers run natively), not its embeddings (MapFeatures::native_layers).
  int64_t native_layers = 0;
  // Keys as the caches hold them, after RoPE, instead of un-rotated: the "naive map on rotated
  // keys" that the RoPE sandwich is measured against (an ablation, never a shipped map).
  bool rotated_keys = false;
  // x holds the sender's keys and then its values (for the K rows and the V rows alike), so
  // that a map may read both (MapFeatures::joint_kv); maps reading one kind use a subset.
  bool joint_kv = false;
  // Sender channels in x: all layers' keys, or keys then values.
  int64_t sender_width() const { return sender.n_layers * sender.kv_dim() * (joint_kv ? 2 : 1); }
  int64_t x_dim() const { return sender_width() + embed_tokens * receiver.hidden_size; }

  bool diagonal() const { return kind == "diagonal"; }
  nlohmann::json to_json() const;
  static StatsLayout from_json(const nlohmann::json& j, const std::string& source);
  bool operator==(const StatsLayout& o) const { return to_json() == o.to_json(); }
};

// Sums over the rows of one split (train or held-out).
//   k: x = all sender layers' un-rotated keys, concatenated layer after layer (L_s·kv_s),
//      with joint_kv then all sender layers' values (L_s·kv_s), then the token features
//      (embed_tokens·hidden_r),
//      y = all receiver layers' un-rotated keys (L_r·kv_r); v: the same for values.
//   diagonal layout: x and y are layer-aligned and only per-channel products are kept.
struct SplitStats {
  int64_t sequences = 0;
  Moments k, v;
  std::vector<Moments> boundary;  // one per StatsLayout::boundaries
  std::vector<double> tok_count;  // [token_vocab]
  std::vector<double> tok_k,
      tok_v;  // Σ receiver K (un-rotated) / V per token id [vocab × L_r·kv_r]
};

// The implicit moves are noexcept; clang-tidy 14 counts nlohmann::json's assert_invariant()
// in them as throwing.
// NOLINTNEXTLINE(bugprone-exception-escape)
struct RouteStats {
  StatsLayout layout;
  SplitStats train, heldout;
  // The first held-out windows (global sequence index, ids), kept to choose k by prefix NLL.
  std::vector<std::pair<int64_t, std::vector<int32_t>>> select_windows;
  int64_t max_select_windows = 4;
  nlohmann::json settings;  // the fit options that produced them; merges require equal settings
  int64_t shard_index = 0, shard_count = 1;  // 0-based index of the shard these sums cover
  std::vector<int64_t> shards_merged;        // shard indices summed into this object

  void init(const StatsLayout& l);
  void add_select_window(int64_t index, std::vector<int32_t> ids);
  // Adds another shard's sums; layouts and settings must agree and the shards must differ.
  void merge(const RouteStats& o, const std::string& source);

  // Binary file: "MOLTSTAT", u64 header length, JSON header, then the arrays as f64.
  void save(const std::filesystem::path& path) const;
  static RouteStats load(const std::filesystem::path& path);
};

// Visits every summed quantity of the statistics (counts included), named ("train.k.xx", ...),
// in a fixed order; sizes follow from the layout.
void for_each_array(RouteStats& s,
                    const std::function<void(const std::string&, double*, size_t)>& f);

}  // namespace molt
