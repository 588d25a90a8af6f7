#include "molt/kernels/attention.h"

#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "molt/common/error.h"
#include "molt/kernels/ops.h"

namespace molt {
namespace {

struct Layout {
  int64_t hd, group, q_stride, kv_stride;
  float scale;
};

// One query row against cache positions [0, len): scores, softmax, weighted sum of values.
void attend_row(const Layout& l, const float* q, const float* k, const float* v, int64_t len,
                float* scores, float* out) {
  for (int64_t j = 0; j < len; ++j) scores[j] = dot(q, k + j * l.kv_stride, l.hd) * l.scale;
  softmax(scores, len);
  std::fill(out, out + l.hd, 0.0f);
  for (int64_t j = 0; j < len; ++j) {
    const float p = scores[j];
    const float* vj = v + j * l.kv_stride;
    for (int64_t d = 0; d < l.hd; ++d) out[d] += p * vj[d];
  }
}

// Queries [q0, q1) of head h (positions p0+q0 ..) as two single-threaded GEMMs:
// S = Q Kᵀ over the keys the last row may see, causal mask + softmax per row, O = P V.
void attend_block(const Layout& l, const float* q, const float* k, const float* v, int64_t p0,
                  int64_t h, int64_t q0, int64_t q1, std::vector<float>& s, float* out) {
  const int64_t rows = q1 - q0, len = p0 + q1;
  s.resize(static_cast<size_t>(rows * len));
  const int64_t g = h / l.group;
  const float* qb = q + q0 * l.q_stride + h * l.hd;
  const float* kg = k + g * l.hd;
  const float* vg = v + g * l.hd;
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(rows),
              static_cast<int>(len), static_cast<int>(l.hd), l.scale, qb,
              static_cast<int>(l.q_stride), kg, static_cast<int>(l.kv_stride), 0.0f, s.data(),
              static_cast<int>(len));
  for (int64_t r = 0; r < rows; ++r) {
    float* row = s.data() + r * len;
    const int64_t valid = p0 + q0 + r + 1;
    softmax(row, valid);
    std::fill(row + valid, row + len, 0.0f);
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(rows),
              static_cast<int>(l.hd), static_cast<int>(len), 1.0f, s.data(), static_cast<int>(len),
              vg, static_cast<int>(l.kv_stride), 0.0f, out + q0 * l.q_stride + h * l.hd,
              static_cast<int>(l.q_stride));
}

}  // namespace

void attention(const AttentionShape& s, const float* q, const float* k, const float* v, int64_t p0,
               int64_t n, float* out) {
  if (s.n_heads <= 0 || s.n_kv_heads <= 0 || s.head_dim <= 0) {
    fail("attention: shape n_heads={} n_kv_heads={} head_dim={} must be positive", s.n_heads,
         s.n_kv_heads, s.head_dim);
  }
  if (s.n_heads % s.n_kv_heads != 0) {
    fail("attention: n_kv_heads {} does not divide n_heads {}", s.n_kv_heads, s.n_heads);
  }
  if (p0 < 0 || n < 0) fail("attention: p0 {} and n {} must be non-negative", p0, n);
  if (n == 0) return;
  const Layout l{s.head_dim, s.n_heads / s.n_kv_heads, s.n_heads * s.head_dim,
                 s.n_kv_heads * s.head_dim,
                 static_cast<float>(1.0 / std::sqrt(static_cast<double>(s.head_dim)))};

  // Few queries (decode): a dot per cached position. Many (prefill): GEMM blocks, with
  // BLAS single-threaded inside the parallel region (OpenBLAS checks omp_in_parallel).
  constexpr int64_t kBlock = 64;
  if (n < 16) {
    const int64_t tasks = s.n_heads * n;
#pragma omp parallel
    {
      std::vector<float> scores(static_cast<size_t>(p0 + n));
#pragma omp for schedule(dynamic)
      for (int64_t t = 0; t < tasks; ++t) {
        const int64_t i = t / s.n_heads, h = t % s.n_heads;
        const int64_t g = h / l.group;
        attend_row(l, q + i * l.q_stride + h * l.hd, k + g * l.hd, v + g * l.hd, p0 + i + 1,
                   scores.data(), out + i * l.q_stride + h * l.hd);
      }
    }
    return;
  }
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  const int64_t tasks = s.n_heads * blocks;
#pragma omp parallel
  {
    std::vector<float> scratch;
    // Later blocks see more keys: hand them out first so the threads finish together.
#pragma omp for schedule(dynamic)
    for (int64_t t = 0; t < tasks; ++t) {
      const int64_t b = blocks - 1 - t / s.n_heads, h = t % s.n_heads;
      attend_block(l, q, k, v, p0, h, b * kBlock, std::min(n, (b + 1) * kBlock), scratch, out);
    }
  }
}

}  // namespace molt
