// Grouped-query attention over a cache laid out [position][kv_head][head_dim], its rows f32,
// f16 or int8 (kernels/kv_rows.h).
#pragma once

#include <cstdint>
#include <span>

#include "molt/kernels/kv_rows.h"

namespace molt {

struct AttentionShape {
  int64_t n_heads = 0;
  int64_t n_kv_heads = 0;  // divides n_heads; query head h reads kv head h / (n_heads / n_kv)
  int64_t head_dim = 0;
};

// Causal attention for `n` new queries at positions p0 .. p0+n-1, each attending to cache
// positions 0 ..= its own. q: [n, n_heads, head_dim]; k, v: [p0 + n, n_kv, head_dim];
// out: [n, n_heads, head_dim]. Scale 1/sqrt(head_dim). n = 1 is the decode step.
void attention(const AttentionShape& s, const float* q, const float* k, const float* v, int64_t p0,
               int64_t n, float* out);
// The same over rows stored as `kv` (kv_row_bytes each). Decode reads them as stored (int8: the
// scales folded into scores and weights); prefill widens the layer's rows to f32 once, into a
// buffer of 2 · (p0 + n) · n_kv_heads · head_dim floats kept by the calling thread.
void attention(const AttentionShape& s, const float* q, const void* k, const void* v, KvDType kv,
               int64_t p0, int64_t n, float* out);

// One decode query of each of several sequences, each against its own cache: q [n_heads,
// head_dim] at position `pos` attends to rows 0 ..= pos of k, v; out [n_heads, head_dim].
struct AttentionQuery {
  const float* q;
  const void* k;  // rows of type kv
  const void* v;
  int64_t pos;
  float* out;
  KvDType kv = KvDType::kF32;
};
// Batched decode: all the queries in one parallel region (the threads woken once, not once per
// sequence); each result equals attention(s, q, k, v, pos, 1, out) of that query bit for bit.
void attention_batch(const AttentionShape& s, std::span<const AttentionQuery> queries);

}  // namespace molt
