#include "molt/transfer/embed_features.h"

#include <cmath>

#include "molt/common/error.h"
#include "molt/model/kv_cache.h"
#include "molt/model/model.h"

namespace molt {

namespace {

// RMS-normalises each row of e ([n × d]) in place, no weight.
void rms_rows(const Model& receiver, std::vector<float>& e, int64_t n, int64_t d) {
  const double eps = receiver.config().rms_norm_eps;
  for (int64_t i = 0; i < n; ++i) {
    float* row = e.data() + i * d;
    double ss = 0;
    for (int64_t c = 0; c < d; ++c) ss += static_cast<double>(row[c]) * row[c];
    const float inv = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(d) + eps));
    for (int64_t c = 0; c < d; ++c) row[c] *= inv;
  }
}

}  // namespace

std::vector<float> normed_embeddings(const Model& receiver, std::span<const int32_t> tokens) {
  const int64_t d = receiver.config().hidden_size, n = static_cast<int64_t>(tokens.size());
  std::vector<float> e(static_cast<size_t>(n * d));
  receiver.embed(tokens, e);
  rms_rows(receiver, e, n, d);
  return e;
}

std::vector<float> token_feature_rows(const Model& receiver, std::span<const int32_t> tokens,
                                      int64_t native_layers, KVCache& cache,
                                      std::vector<float>* raw) {
  if (native_layers == 0) return normed_embeddings(receiver, tokens);
  const int64_t d = receiver.config().hidden_size, n = static_cast<int64_t>(tokens.size());
  if (native_layers < 0 || native_layers >= receiver.config().num_hidden_layers) {
    fail("token features: {} native layers for a receiver of {} layers", native_layers,
         receiver.config().num_hidden_layers);
  }
  if (cache.size() < n)
    fail("token features: a cache of {} positions for {} tokens", cache.size(), n);
  std::vector<float> h(static_cast<size_t>(n * d));
  receiver.embed(tokens, h);
  if (n > 0) receiver.forward_layers(0, 0, n, h, cache, native_layers);
  if (raw != nullptr) *raw = h;
  rms_rows(receiver, h, n, d);
  return h;
}

std::vector<float> normed_hidden_rows(const Model& receiver, std::span<const float> hidden) {
  const int64_t d = receiver.config().hidden_size;
  std::vector<float> h(hidden.begin(), hidden.end());
  rms_rows(receiver, h, static_cast<int64_t>(h.size()) / d, d);
  return h;
}

}  // namespace molt
