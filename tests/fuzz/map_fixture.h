// Map folders for the map harnesses: a tiny ridge map (with a boundary map) written by
// write_map_dir, and the tiny ladder's diagonal map l → l-int8 as committed.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "fuzz_util.h"
#include "molt/formats/safetensors.h"
#include "molt/transfer/map_file.h"

namespace molt::fuzz {

// The tensors of a map file, held open so that TensorToWrite can point into them.
struct MapTemplate {
  std::unique_ptr<SafetensorsFile> file;
  std::vector<TensorToWrite> tensors;
};

inline MapTemplate load_template(const std::filesystem::path& path) {
  MapTemplate t;
  t.file = SafetensorsFile::open(path);
  for (const TensorView& v : t.file->tensors()) {
    t.tensors.push_back({v.name, v.dtype, v.shape, {v.data, v.nbytes}});
  }
  return t;
}

// Receiver and sender: 2 layers, 1 KV head of 2, hidden 4; receiver layer 1 reads both sender
// layers; one boundary map (r = 1).
inline std::filesystem::path write_ridge_map() {
  const std::filesystem::path dir = scratch_subdir("ridge-template");
  MapData m;
  m.method = "ridge";
  m.sender = {"a", {2, 1, 2, 4}, {2, 10000.0}};
  m.receiver = {"b", {2, 1, 2, 4}, {2, 10000.0}};
  for (int j = 0; j < 2; ++j) {
    LayerMap L;
    L.kv_s = 2;
    L.k_sources = j == 0 ? std::vector<int64_t>{0} : std::vector<int64_t>{0, 1};
    L.v_sources = {static_cast<int64_t>(j)};
    L.k_weight.assign(static_cast<size_t>(2 * L.k_in()), 0.5f);
    L.v_weight.assign(static_cast<size_t>(2 * L.v_in()), 0.25f);
    L.k_bias = {0.1f, 0.2f};
    L.v_bias = {0.3f, 0.4f};
    m.layers.push_back(L);
  }
  m.boundaries.push_back({1, 1, std::vector<float>(16, 1.0f), std::vector<float>(4, 0.0f)});
  m.info["residuals"] = {{"total", {{"k", {{"rel_rms", 0.1}}}, {"v", {{"rel_rms", 0.2}}}}}};
  m.info["lambda"] = 0.01;
  write_map_dir(dir, m);
  return dir / "map.safetensors";
}

}  // namespace molt::fuzz
