// What a loaded rung costs in memory, computed from its config and checkpoint (DESIGN.md §2
// "footprint"): the weights resident once every page is touched, the KV cache per token, and
// the scratch of one forward pass. A test checks the sum against the measured RSS within 5%.
#pragma once

#include <cstddef>
#include <cstdint>

#include "molt/common/dtype.h"
#include "molt/formats/hf_config.h"
#include "molt/kernels/kv_rows.h"

namespace molt {

// The shape of the work a session runs on a rung, which sizes the scratch.
struct FootprintShape {
  int64_t prefill_chunk = 64;  // tokens per prefill call (the runtime chunks longer prompts)
  int64_t max_context = 2048;  // longest cache the attention scratch must cover
  int threads = 1;             // threads that each hold attention scratch
  KvDType kv = KvDType::kF16;  // element type of the cache's K and V rows (SessionOptions')
};

struct Footprint {
  size_t weight_bytes = 0;        // stored tensors, mmapped; leave RSS when parked
  size_t heap_weight_bytes = 0;   // norms and biases widened to f32 at load; stay when parked
  size_t kv_bytes_per_token = 0;  // K and V of every layer, as stored (shape.kv)
  size_t scratch_bytes = 0;       // peak transient buffers of a prefill chunk (decode is less)

  // Loaded with a cache of `kv_tokens` positions (the cache is allocated at capacity).
  size_t total(int64_t kv_tokens) const {
    return weight_bytes + heap_weight_bytes + kv_bytes(kv_tokens) + scratch_bytes;
  }
  // Parked: the weights' pages are released, the cache stays.
  size_t parked(int64_t kv_tokens) const { return heap_weight_bytes + kv_bytes(kv_tokens); }
  size_t kv_bytes(int64_t kv_tokens) const {
    return kv_bytes_per_token * static_cast<size_t>(kv_tokens);
  }
};

// `stored_weight_bytes`: bytes of the checkpoint's tensors (WeightStore::total_bytes());
// `dtype`: their dtype (16-bit weights add the widening tile of matmul to the scratch).
Footprint compute_footprint(const ModelConfig& c, size_t stored_weight_bytes, DType dtype,
                            const FootprintShape& shape);

}  // namespace molt
