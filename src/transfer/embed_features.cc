#include "molt/transfer/embed_features.h"

#include <cmath>

#include "molt/model/model.h"

namespace molt {

std::vector<float> normed_embeddings(const Model& receiver, std::span<const int32_t> tokens) {
  const int64_t d = receiver.config().hidden_size, n = static_cast<int64_t>(tokens.size());
  std::vector<float> e(static_cast<size_t>(n * d));
  receiver.embed(tokens, e);
  const double eps = receiver.config().rms_norm_eps;
  for (int64_t i = 0; i < n; ++i) {
    float* row = e.data() + i * d;
    double ss = 0;
    for (int64_t c = 0; c < d; ++c) ss += static_cast<double>(row[c]) * row[c];
    const float inv = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(d) + eps));
    for (int64_t c = 0; c < d; ++c) row[c] *= inv;
  }
  return e;
}

}  // namespace molt
