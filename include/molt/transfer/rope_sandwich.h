// The RoPE sandwich (DESIGN.md §3). Caches hold keys after RoPE; two rungs with different
// head_dim or θ rotate by different angles, so every key map runs between two rotations:
// un-rotate at the sender's angles, map, re-rotate at the receiver's. Values carry no rotation.
#pragma once

#include <cstdint>
#include <vector>

#include "molt/kernels/ops.h"

namespace molt {

// cos / sin of every RoPE angle for positions p0 .. p0+n-1, precomputed once for many rows:
// filled by the kernels' rope_cos_sin and applied by their rope_rotate (the one RoPE
// implementation), so rotating through a table equals rope_apply bit for bit.
class RopeTable {
 public:
  RopeTable(const RopeSpec& spec, int64_t p0, int64_t n);
  const RopeSpec& spec() const { return spec_; }
  int64_t first() const { return p0_; }
  int64_t size() const { return n_; }

  // Rotates `rows` rows of x, laid out [position][head][head_dim] with `n_heads` heads per
  // position; x's first row is table row i0, i.e. position first() + i0. inverse = un-rotation.
  void rotate(float* x, int64_t i0, int64_t rows, int64_t n_heads, bool inverse) const;

 private:
  RopeSpec spec_;
  int64_t p0_ = 0, n_ = 0;
  std::vector<float> cos_, sin_;  // [n × head_dim/2]
};

// Keys of positions 0 .. n-1 of one layer ([pos][head][dim]), rotated in place.
void unrotate_keys(const RopeSpec& spec, float* k, int64_t n, int64_t n_heads);
void rotate_keys(const RopeSpec& spec, float* k, int64_t n, int64_t n_heads);

}  // namespace molt
