// Map files (DESIGN.md §5): <dir>/map.safetensors plus <dir>/index.json.
//
// Tensors, all F32, per receiver layer j and KV head h:
//   ridge / depth-remap: layers.{j}.{k|v}.heads.{h}.weight  [head_dim_r, |sources|·kv_dim_s]
//                        (F32 or BF16, the same for every weight of a file; MapData::weight_dtype)
//                        layers.{j}.{k|v}.heads.{h}.bias    [head_dim_r]
//     input = the concatenation, in ascending layer order, of all KV heads of the source
//     layers listed in the metadata (keys un-rotated at the sender's angles); the output keys
//     are un-rotated and get the receiver's rotation after the map.
//     With token features (format_version 2, metadata "features": {"embed_tokens": n}), each
//     weight has n · hidden_r more input columns after the sender's: the receiver's
//     RMS-normalised embedding of the token and of the n − 1 before it (embed_features.h).
//     With the sender's K and V read together (format_version 3, "features": {"sender_kv":
//     "joint"}), the K and the V map of a layer each read the un-rotated keys of their source
//     layers, then the values of the same layers, then the token features; "separate" (and
//     every earlier file) reads keys for K maps and values for V maps.
//     With native layers (format_version 4, "features": {"native_layers": b}), the receiver's
//     first b layers run natively over the carried tokens (their K/V are the receiver's own;
//     their maps are in the file but unused) and the token features are the RMS-normalised
//     hidden state entering layer b, of the token and the n − 1 before it, instead of the
//     embeddings.
//   diagonal:            layers.{j}.{k|v}.heads.{h}.scale / .offset  [head_dim]
//   selective recompute: boundary.r{r}.weight [hidden_r, hidden_s], boundary.r{r}.bias [hidden_r]
//     (receiver hidden state entering layer L_r − r from the sender's hidden state entering
//     layer `sender_hidden`).
// __metadata__ (strings; structured values are JSON): format, format_version, method, sender,
// receiver (geometry + RoPE spec: theta, head_dim, style), sources ({"k": [[...]...], "v": ...}),
// features (version 2; sender_kv in version 3; native_layers in version 4), lambda,
// lambda_applied_to, k, k_chosen_by, k_candidates, calibration, corpus, residuals, boundary,
// created_by. Version 1 files (no features), version 2 files (no sender_kv) and version 3 files (no
// native_layers) still load. index.json: {"format": "molt-map-index", "files": {"map.safetensors":
// {"sha256", "bytes"}}}.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "molt/common/dtype.h"
#include "molt/kernels/ops.h"
#include "molt/model/kv_cache.h"

namespace molt {

class Model;

constexpr int kMapFormatVersion = 4;     // what is written
constexpr int kMinMapFormatVersion = 1;  // the oldest still read (no "features")

// One side of a route as the map file records it.
struct RungSpec {
  std::string name;  // informative (checkpoint folder name)
  CacheGeometry geometry;
  RopeSpec rope;
  static RungSpec of(const Model& m, const std::string& name);
  nlohmann::json to_json() const;
  // Inverse of to_json(); errors name `side` and the field.
  static RungSpec from_json(const nlohmann::json& j, const char* side);
};

// One receiver layer's maps. For ridge methods the per-head matrices are stacked along the
// output: weight is [kv_dim_r × in] (rows of head h at h·head_dim_r), bias [kv_dim_r].
// For diagonal, scale / offset are [kv_dim].
struct LayerMap {
  std::vector<int64_t> k_sources, v_sources;
  std::vector<float> k_weight, k_bias, v_weight, v_bias;
  std::vector<float> k_scale, k_offset, v_scale, v_offset;
  int64_t k_in() const;
  int64_t v_in() const;
  int64_t kv_s = 0;       // sender kv_dim (inputs per source layer and per K or V)
  int64_t embed_in = 0;   // token-feature inputs after the sources' (embed_tokens · hidden_r)
  bool joint_kv = false;  // each map reads its sources' keys and values (MapFeatures)
};

// Inputs of a ridge map beyond the sender's cache.
struct MapFeatures {
  // Token-feature rows of the token and the embed_tokens − 1 before it: the receiver's
  // embeddings, or with native_layers > 0 its hidden states entering that layer.
  int64_t embed_tokens = 0;
  // The K and the V map of a layer both read the sender's keys and values of their sources.
  bool joint_kv = false;
  // The receiver's first native_layers layers run natively over the carried tokens; the token
  // features are the hidden states they produce (token_features.h).
  int64_t native_layers = 0;
  nlohmann::json to_json() const {
    return {{"embed_tokens", embed_tokens},
            {"sender_kv", joint_kv ? "joint" : "separate"},
            {"native_layers", native_layers}};
  }
};

struct BoundaryMap {
  int64_t r = 0;
  int64_t sender_hidden = 0;
  std::vector<float> weight;  // [hidden_r × hidden_s]
  std::vector<float> bias;    // [hidden_r]
};

struct MapData {
  std::string method;  // "ridge", "depth-remap", "diagonal"
  RungSpec sender, receiver;
  std::vector<LayerMap> layers;  // one per receiver layer
  std::vector<BoundaryMap> boundaries;
  MapFeatures features;
  // How the ridge / depth-remap weights are stored: F32, or BF16 (what `molt fit` writes: half
  // the bytes, and a loaded map keeps them at 16 bits). The values here are f32 either way
  // (exactly the stored ones); biases, diagonal and boundary maps stay F32.
  DType weight_dtype = DType::F32;
  // Everything else the metadata carries (lambda, k, calibration, corpus, residuals, ...).
  nlohmann::json info = nlohmann::json::object();
};

// Writes map.safetensors and index.json (SHA-256 of every file) into dir (created), as one
// unit (AtomicDir): on any failure the folder is left as it was; other files in it are kept.
// `beside`, when given, writes more files into the staging folder (its argument) after the
// index, so that they appear with the map or not at all.
void write_map_dir(const std::filesystem::path& dir, const MapData& map,
                   const std::function<void(const std::filesystem::path&)>& beside = {});
// Reads and verifies: index.json present and well formed, every listed name a file inside the
// folder, map.safetensors' SHA-256, format and version, every tensor present with the shape the
// metadata implies. Each reader checks the checksum of what it reads (read_token_floor the
// floor's), so loading a map at a switch does not hash the floor beside it.
MapData read_map_dir(const std::filesystem::path& dir);
// Lists dir/name in dir/index.json (a map index, which must exist) with its SHA-256 and size,
// replacing an entry of that name; the index is rewritten whole or not at all. For a folder
// being written (write_map_dir's `beside`).
void add_to_map_index(const std::filesystem::path& dir, const std::string& name);
// Adds (or replaces) one file of an existing map directory as one unit (AtomicDir): `write`
// writes it to the path given, index.json lists it beside the entries already there, and every
// other file (the map itself) is carried over byte for byte.
void add_to_map_dir(const std::filesystem::path& dir, const std::string& name,
                    const std::function<void(const std::filesystem::path&)>& write);
// Whether dir/index.json lists `name` (false when there is no readable index).
bool map_index_lists(const std::filesystem::path& dir, const std::string& name);
// Checks dir/name against its entry in dir/index.json and returns the SHA-256; errors name the
// index and the file (not listed, missing, checksum differs).
std::string verify_map_index_entry(const std::filesystem::path& dir, const std::string& name);
// Refuses a map whose sender / receiver geometry or RoPE spec differs from the models'.
void check_route(const MapData& map, const std::filesystem::path& dir, const Model& sender,
                 const Model& receiver);

// SHA-256 of a file as lowercase hex (OpenSSL EVP).
std::string sha256_file(const std::filesystem::path& path);

// What a runtime needs to know of a map folder before loading it: whether its file is there and
// its size (about what the loaded map holds; loading briefly needs twice that). Its quality is
// the route's evidence in ladder.json (ladder/manifest.h).
struct MapSummary {
  bool present = false;
  double file_bytes = 0;
};
MapSummary summarize_map_dir(const std::filesystem::path& dir);

}  // namespace molt
