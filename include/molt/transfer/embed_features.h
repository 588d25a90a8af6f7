// Token features of a richer map (issue 21): the receiver's own embedding rows of the token at
// a position and of the tokens before it, each RMS-normalised (no weight: the ridge absorbs
// any per-channel scale). What induction-style attention keys encode is largely "which token,
// after which tokens"; the receiver already holds its embedding table, so the features cost
// no table in the map and only (lags · hidden_r) more inputs per layer map.
//
// Row p's features are E(t_p), E(t_{p−1}), ..., E(t_{p−n+1}) concatenated; a lag that reaches
// before position 0 contributes zeros. Fitting and applying build them with these functions,
// so the two agree by construction.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace molt {

class Model;

// The receiver's RMS-normalised embedding rows of `tokens`, [tokens.size() × hidden_size].
std::vector<float> normed_embeddings(const Model& receiver, std::span<const int32_t> tokens);

// Writes the `lags` feature rows of position p (lags · hidden values) from `e` ([T × hidden]).
template <typename T>
void embed_features(const std::vector<float>& e, int64_t hidden, int64_t lags, int64_t p, T* out) {
  for (int64_t j = 0; j < lags; ++j) {
    T* dst = out + j * hidden;
    if (p - j < 0) {
      for (int64_t c = 0; c < hidden; ++c) dst[c] = T(0);
      continue;
    }
    const float* row = e.data() + (p - j) * hidden;
    for (int64_t c = 0; c < hidden; ++c) dst[c] = static_cast<T>(row[c]);
  }
}

}  // namespace molt
