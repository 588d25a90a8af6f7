// The token-identity floor (DESIGN.md §6): each position's K/V is the receiver's mean K/V for
// that token id over calibration text — never over the evaluation windows, whose own caches
// would leak the answer into the floor (with few windows most ids occur once or twice there, and
// the "floor" nearly reproduces the native cache).
//
// Rows are those `molt fit` takes: positions 0, stride, 2·stride, ... of each calibration window
// (training and held-out windows alike), keys un-rotated at the receiver's own RoPE angles.
// `molt fit` derives the floor from the per-token sums it already keeps (stats.h); `molt fit
// floor` recomputes it with the receiver alone over the same windows. Either way it is stored
// beside the map as <dir>/floor.safetensors and listed with its SHA-256 in index.json:
//   token_ids       I32 [R]             the ids seen in calibration, ascending
//   layers.{l}.k    F16 [R + 1, kv_dim] mean un-rotated keys of receiver layer l; row R is the
//   layers.{l}.v    F16 [R + 1, kv_dim] mean over all rows, which ids never seen take
// F16, not BF16: the means sit far inside its range and keep 11 bits instead of 8; a mean past
// ±65504 is refused when the floor is made. __metadata__ (strings; structured values JSON):
// format "molt-token-floor", format_version, receiver (geometry + RoPE, as in map files),
// corpus, corpus_sha256, calibration {windows, seq_len, stride, rows, distinct_tokens},
// created_by.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "molt/model/kv_cache.h"
#include "molt/model/model.h"
#include "molt/transfer/map_file.h"

namespace molt {

class TokenStream;
struct RouteStats;

constexpr const char* kTokenFloorFile = "floor.safetensors";
constexpr int kTokenFloorFormatVersion = 1;

struct TokenFloor {
  RungSpec receiver;                     // the geometry and RoPE the means belong to
  std::vector<int32_t> ids;              // seen in calibration, ascending
  std::vector<std::vector<float>> k, v;  // per layer [(ids.size() + 1) × kv_dim], F16 values
  nlohmann::json info = nlohmann::json::object();  // corpus, corpus_sha256, calibration, ...
  std::string file, sha256;  // where it was read from (empty when fitted in memory)

  // Where the floor came from, for the JSON of every figure shown beside it.
  nlohmann::json provenance() const;
};

// The calibration windows a floor is fitted on.
struct FloorWindows {
  int64_t sequences = 500, seq_len = 1024, stride = 4;
  // The windows a map was fitted on (its metadata's "calibration"), else the defaults above.
  static FloorWindows of_map(const MapData& map);
};

// Per-token sums of a receiver's un-rotated K and V over calibration rows; memory grows with the
// ids seen, not the vocabulary.
class TokenFloorSums {
 public:
  TokenFloorSums(const CacheGeometry& g, int64_t vocab);
  // `n` rows of token t whose keys and values (each L·kv_dim, layer after layer) sum to k and v.
  void add(int32_t t, double n, const double* k, const double* v);
  // The receiver reads `ids`; its rows at positions 0, stride, 2·stride, ... are added.
  void add_window(const Model& receiver, std::span<const int32_t> ids, int64_t stride);
  double rows() const { return rows_; }
  // Means rounded to F16 (what the file holds, so a floor fitted in memory equals a stored one).
  // `info` is kept and completed with the row counts.
  TokenFloor finish(const RungSpec& receiver, nlohmann::json info) const;

 private:
  CacheGeometry g_;
  std::vector<int32_t> slot_;  // id → row, -1 unseen
  std::vector<int32_t> ids_;
  std::vector<double> count_, k_, v_;  // [rows × L·kv_dim]
  double rows_ = 0;
};

// From `molt fit`'s statistics (training and held-out sums); throws when they hold no per-token
// sums (the vocabulary was too large for them).
TokenFloor token_floor_from_stats(const RouteStats& stats, const RungSpec& receiver,
                                  nlohmann::json info);

// The receiver alone over the first `w.sequences` windows of `corpus`. `info` is kept (corpus
// name and checksum) and completed with the windows actually read.
TokenFloor fit_token_floor(const Model& receiver, const RungSpec& spec, TokenStream& corpus,
                           const FloorWindows& w, nlohmann::json info,
                           const std::function<void(int64_t done, int64_t total)>& progress = {});

// Writes <dir>/floor.safetensors and lists it in <dir>/index.json with its SHA-256; `dir` is a
// map directory being written (write_map_dir's staging folder, so map and floor appear together).
void write_token_floor(const std::filesystem::path& dir, const TokenFloor& floor);
// Adds the floor to an existing map directory as one unit; the map stays byte for byte.
void add_token_floor(const std::filesystem::path& dir, const TokenFloor& floor);
// Whether <dir>/index.json lists a floor.
bool has_token_floor(const std::filesystem::path& dir);
// Reads and verifies <dir>/floor.safetensors: listed in index.json with a matching SHA-256,
// format and version, every tensor present with the shape the metadata implies.
TokenFloor read_token_floor(const std::filesystem::path& dir);

// Fills caches from a floor: each position's K/V is its token's row (keys rotated to the
// position); ids the floor never saw get the all-token mean.
class TokenIdentityCache {
 public:
  // Refuses a floor fitted for another geometry or RoPE, naming the floor's file.
  TokenIdentityCache(const Model& receiver, const TokenFloor& floor);
  void fill(std::span<const int32_t> tokens, KVCache& dst) const;

 private:
  CacheGeometry g_;
  RopeSpec rope_;
  std::vector<int32_t> slot_;              // token id → row of the tables, -1 unseen
  std::vector<std::vector<float>> k_, v_;  // per layer [rows × kv_dim]; last row = all mean
};

}  // namespace molt
