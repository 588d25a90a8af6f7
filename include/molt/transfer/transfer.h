// Carrying a KV cache from a sender rung to a receiver rung (DESIGN.md §3).
// This is the contract the runtime codes against; the transfer part owns the rest
// (fitting, statistics, map files) behind it.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "molt/model/kv_cache.h"
#include "molt/model/model.h"

namespace molt {

struct MapData;

// How the cache crosses, per route.
struct TransferOptions {
  int recompute_layers =
      0;            // r: receiver's last r layers recomputed natively (needs a boundary map)
  int anchors = 0;  // a: last a context tokens re-run natively on the receiver
};

// A loaded, verified map file set for one route (sender geometry → receiver geometry).
class CacheMap {
 public:
  virtual ~CacheMap() = default;
  // Loads <dir>/map.safetensors after checking <dir>/index.json's SHA-256 and that both
  // geometries and RoPE specs match the given models; errors name the file and field.
  static std::unique_ptr<CacheMap> load(const std::filesystem::path& dir, const Model& sender,
                                        const Model& receiver);
  // A map held in memory (fitting evaluates candidates without writing files).
  static std::unique_ptr<CacheMap> from_data(MapData map);

  // Fills `dst` (receiver geometry) with positions [0, src.size()) carried over from `src`
  // (sender geometry). `tokens` are the ids at those positions (anchors re-run the last ones).
  // On return dst.size() == src.size() and the receiver can decode the next position.
  // Order: receiver layers [0, L_r − r) are mapped (keys through the RoPE sandwich); with
  // r = options.recompute_layers > 0 the boundary map projects the sender's hidden state to
  // the receiver's residual stream entering layer L_r − r (src must keep hidden states) and
  // the last r layers run natively over all positions; with a = options.anchors > 0 the last
  // a positions are then re-run natively, attending to the mapped cache.
  void apply(const Model& sender, const KVCache& src, const Model& receiver,
             std::span<const int32_t> tokens, const TransferOptions& options, KVCache& dst) const {
    apply(sender, src, receiver, tokens, options, dst, nullptr);
  }
  // As above; where the map runs native layers (MapFeatures::native_layers = b > 0) and
  // `native_hidden` is not null, it also receives the hidden states entering receiver layer b,
  // [n × hidden_size]: layers [0, b) of dst are already the receiver's own, so heal goes on
  // from there. Left empty otherwise.
  virtual void apply(const Model& sender, const KVCache& src, const Model& receiver,
                     std::span<const int32_t> tokens, const TransferOptions& options, KVCache& dst,
                     std::vector<float>* native_hidden) const = 0;

  virtual std::string method() const = 0;  // "ridge", "depth-remap", "diagonal", ...
  // FLOPs of apply() per position, to report "FLOPs saved" against the receiver's re-prefill.
  virtual double flops_per_position() const = 0;
  // The map data behind it (metadata, sources, tensors).
  virtual const MapData& data() const = 0;
};

}  // namespace molt
