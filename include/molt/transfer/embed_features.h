// Token features of a richer map (issue 21): the receiver's own embedding rows of the token at
// a position and of the tokens before it, each RMS-normalised (no weight: the ridge absorbs
// any per-channel scale). What induction-style attention keys encode is largely "which token,
// after which tokens"; the receiver already holds its embedding table, so the features cost
// no table in the map and only (lags · hidden_r) more inputs per layer map.
//
// With native layers (MapFeatures::native_layers = b > 0) the rows are instead the receiver's
// hidden states entering layer b, RMS-normalised: the first b layers run natively over the
// carried tokens (their K/V are the receiver's own), and what the tokens have become after
// them (layer 0's MLP and attention) is a feature no linear map of the embeddings can give.
//
// Row p's features are E(t_p), E(t_{p−1}), ..., E(t_{p−n+1}) concatenated; a lag that reaches
// before position 0 contributes zeros. Fitting and applying build them with these functions,
// so the two agree by construction.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace molt {

class KVCache;
class Model;

// The receiver's RMS-normalised embedding rows of `tokens`, [tokens.size() × hidden_size].
std::vector<float> normed_embeddings(const Model& receiver, std::span<const int32_t> tokens);

// The token-feature rows of `tokens` at positions 0 .. n − 1: normed_embeddings() when
// native_layers is 0; else the receiver's layers [0, native_layers) run over them, writing
// their K/V into `cache` rows [0, n) (cache.size() must be ≥ n), and the hidden states entering
// layer native_layers are returned RMS-normalised; `raw`, when not null and native_layers > 0,
// receives those hidden states as they are (heal goes on from them).
std::vector<float> token_feature_rows(const Model& receiver, std::span<const int32_t> tokens,
                                      int64_t native_layers, KVCache& cache,
                                      std::vector<float>* raw = nullptr);

// The same rows from hidden states a forward pass already kept (KVCache::hidden(native_layers),
// [n × hidden_size]): RMS-normalised copies.
std::vector<float> normed_hidden_rows(const Model& receiver, std::span<const float> hidden);

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
