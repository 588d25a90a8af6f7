// Footprint arithmetic. Every term mirrors an allocation in model/ or kernels/; when those
// change, the RSS test in tests/ladder catches the drift.
#include "molt/ladder/footprint.h"

#include <algorithm>

#include "molt/kernels/linear.h"

namespace molt {
namespace {

constexpr size_t kF32 = sizeof(float);

}  // namespace

Footprint compute_footprint(const ModelConfig& c, size_t stored_weight_bytes, DType dtype,
                            const FootprintShape& shape) {
  const int64_t d = c.hidden_size, q = c.q_dim(), kv = c.kv_dim(), ff = c.intermediate_size,
                L = c.num_hidden_layers, V = c.vocab_size;
  Footprint f;
  f.weight_bytes = stored_weight_bytes;
  // model.cc keeps two RMSNorm weights per layer, the final norm and the q/k/v biases in f32.
  int64_t heap = L * 2 * d + d;
  if (c.attention_bias) heap += L * (q + 2 * kv);
  f.heap_weight_bytes = static_cast<size_t>(heap) * kF32;
  f.kv_bytes_per_token =
      static_cast<size_t>(2 * L) * kv_row_bytes(shape.kv, c.num_key_value_heads, c.head_dim);

  // One forward over n = prefill_chunk tokens (model.cc): x, xn, q, att, tmp, gate, up.
  const int64_t n = std::max<int64_t>(1, shape.prefill_chunk);
  size_t scratch = static_cast<size_t>(n * (3 * d + 2 * q + 2 * ff)) * kF32;
  // Attention prefill: per thread, a block of 64 query rows over every key it may see.
  scratch += static_cast<size_t>(std::max(1, shape.threads)) *
             static_cast<size_t>(std::min<int64_t>(64, n) * shape.max_context) * kF32;
  // A cache not stored as f32: prefill widens one layer's K and V over the whole context to
  // f32 (kernels/attention.h), in the calling thread's buffer.
  if (shape.kv != KvDType::kF32) {
    scratch += static_cast<size_t>(2 * shape.max_context * kv) * kF32;
  }
  // Last-position logits and the sampler's (logit, id) pairs.
  scratch += static_cast<size_t>(V) * (kF32 + 8);
  // matmul's kept buffers (kernels/linear.h), each the largest over the layer's linears, on the
  // GEMM path this process takes.
  MatmulBuffers most;
  for (auto [rows, cols] : {std::pair{q, d}, {kv, d}, {d, q}, {ff, d}, {d, ff}}) {
    const MatmulBuffers b = matmul_buffers(dtype, rows, cols, n);
    most.x_bytes = std::max(most.x_bytes, b.x_bytes);
    most.tile_bytes = std::max(most.tile_bytes, b.tile_bytes);
  }
  scratch += most.x_bytes + most.tile_bytes;
  f.scratch_bytes = scratch;
  return f;
}

}  // namespace molt
