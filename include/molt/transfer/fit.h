// Fitting a route: stream calibration windows through both rungs into sufficient statistics
// (stats.h), then solve in closed form (ridge.h) and select, producing a map (map_file.h).
//
// What `molt fit` does, exactly:
//  1. The corpus is cut into consecutive windows of seq_len tokens; window i (0-based) is held
//     out when i % heldout_every == heldout_every − 1, the others are training windows. Shard
//     I/N takes the windows with i % N == I − 1, so shards together cover exactly one run.
//  2. Each window is prefilled by sender and receiver; rows are the positions 0, stride,
//     2·stride, ... . Keys are un-rotated at each model's own RoPE angles (sender: its
//     head_dim and θ; receiver: its own) before they enter the statistics.
//  3. ridge: per receiver layer j, sender layers are ranked by single-source R² — a centred
//     ridge from all KV heads of one sender layer to all KV heads of receiver layer j, fitted
//     on training rows, R² measured on held-out rows (on training rows when nothing is held
//     out) — separately for keys and values. The top-k sender layers (listed in ascending layer
//     order) form the input; K and V maps are separate. Each receiver KV head's map is a block
//     of rows of one per-layer solve (the inputs are shared, so a joint solve equals per-head
//     solves). k comes from --k, or from candidates 1, 2, 4, 8, 16, all (those ≤ L_s): each
//     candidate's maps are applied to held-out windows and the one with the lowest receiver
//     NLL on the text after the transferred prefix (first ¾ of the window) wins.
//     With token features (--embed-tokens), every candidate k is tried with each feature count
//     (0, 1, 3 when chosen automatically): the inputs gain the receiver's RMS-normalised
//     embeddings of the row's token and the ones before it, and the same NLL picks the pair.
//     With --sender-kv joint (or auto: both tried), the K and the V map of a layer read the
//     keys and the values of their top-k source layers (each kind ranked as above).
//     depth-remap: receiver layer j reads sender layer ⌊(j + ½)·L_s / L_r⌋ alone (k = 1).
//     diagonal: same geometry; per layer and channel y = a·x + b by least squares.
//  4. Selective recompute (--recompute-layers R): for each r = 1..R, a centred ridge from the
//     sender's hidden state entering layer round((L_r − r)·L_s / L_r) (the same relative depth)
//     to the receiver's hidden state entering layer L_r − r.
//  5. Held-out residuals per layer (relative RMS ‖Y − Ŷ‖/‖Y‖ and centred ‖Y − Ŷ‖/‖Y − Ȳ‖, keys
//     un-rotated) and the token-identity floor on the same rows are written to the metadata.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <span>
#include <string>

#include "molt/model/model.h"
#include "molt/transfer/map_file.h"
#include "molt/transfer/stats.h"

namespace molt {

class TokenStream;

constexpr int64_t kAutoEmbedTokens = -1;

struct FitOptions {
  std::string method = "ridge";  // ridge | depth-remap | diagonal
  int64_t k = 0;                 // 0: auto; > 0: top-k (clamped to L_s)
  double lambda = 0.01;
  int64_t sequences = 500, seq_len = 1024, stride = 4;
  int64_t recompute_layers = 0;              // boundary maps for r = 1 .. R
  int64_t heldout_every = 10;                // 0: no held-out windows
  int64_t select_windows = 4;                // held-out windows used to choose k
  int64_t shard_index = 0, shard_count = 1;  // 0-based shard of shard_count
  bool token_identity = true;  // keep per-token sums (floor residuals) when small enough
  // ridge: token features after the sender's inputs (embed_features.h): 0 none, N the
  // receiver's normed embeddings of the token and the N − 1 before it, kAutoEmbedTokens: chosen
  // with k by held-out prefix NLL among 0, 1 and 3.
  int64_t embed_tokens = 0;
  // ridge: the receiver's first native_layers layers run natively over the context when the
  // map is applied, and the token features are the hidden states they produce (not the
  // embeddings); 0: embeddings (MapFeatures::native_layers).
  int64_t native_layers = 0;
  // false: keys mapped as the caches hold them (after RoPE), no un-rotation before the map nor
  // re-rotation after it: the ablation of the RoPE sandwich. Its maps say "keys": "rotated".
  bool rope_sandwich = true;
  // ridge: what each map reads of the sender: "separate" (K maps keys, V maps values), "joint"
  // (both read the keys and values of their source layers), "auto" (chosen with k and the
  // token features by held-out prefix NLL).
  std::string sender_kv = "separate";
  std::string sender_name, receiver_name, corpus_name;  // names written into the map
  // Where they came from, so `molt fit merge` can reopen them.
  std::string sender_dir, receiver_dir, corpus_path;
  bool corpus_ids = false;  // the corpus file holds token ids, not text

  // Every setting that must agree between shards (the shard itself excluded).
  nlohmann::json settings() const;
};

using FitLog = std::function<void(const std::string&)>;
using FitProgress = std::function<void(int64_t done, int64_t total)>;

StatsLayout make_layout(const Model& sender, const Model& receiver, const FitOptions& o);

// Adds one window's rows to `split`.
void accumulate_window(const StatsLayout& layout, SplitStats& split, const Model& sender,
                       const Model& receiver, std::span<const int32_t> ids, int64_t stride);

// Streams the corpus (this shard's windows) into statistics.
RouteStats collect_stats(const Model& sender, const Model& receiver, TokenStream& corpus,
                         const FitOptions& o, const FitProgress& progress = {},
                         const FitLog& log = {});

// Solves, selects k and assembles the map with its metadata.
MapData solve_route(const RouteStats& stats, const Model& sender, const Model& receiver,
                    const FitOptions& o, const FitLog& log = {});

// FitOptions recorded in statistics (inverse of settings()).
FitOptions fit_options_from_settings(const nlohmann::json& settings);

}  // namespace molt
