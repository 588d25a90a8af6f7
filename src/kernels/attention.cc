// Grouped-query causal attention. Decode (a few queries) streams the cache once: the query
// heads that share a KV head are handled together so each K and V row is loaded once, and
// long caches are split over threads (flash-decoding: partial max / sum / output per split,
// merged at the end). Prefill (many queries) runs two single-threaded GEMMs per head and
// block of queries, the blocks spread over threads.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/attention.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
// Must follow foreach_target.h.
#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "hwy/contrib/math/math-inl.h"
#include "hwy/highway.h"
#include "molt/common/error.h"
#include "molt/kernels/attention.h"
#include "molt/kernels/ops.h"

// Shared by every target; this file is compiled once per target, so guard it.
#ifndef MOLT_KERNELS_ATTENTION_TYPES
#define MOLT_KERNELS_ATTENTION_TYPES
namespace molt {
namespace {

struct Layout {
  int64_t hd, group, q_stride, kv_stride;
  float scale;
};

// One decode task: query heads [h0, h0 + group) of query row `i`, keys [j0, j1).
struct DecodeTask {
  int64_t i, kv_head, j0, j1;
};

}  // namespace
}  // namespace molt
#endif  // MOLT_KERNELS_ATTENTION_TYPES

HWY_BEFORE_NAMESPACE();
namespace molt {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;

HWY_INLINE float DotHd(const float* a, const float* b, int64_t n) {
  const DF d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  auto s = hn::Zero(d);
  int64_t i = 0;
  for (; i + lanes <= n; i += lanes) s = hn::MulAdd(hn::LoadU(d, a + i), hn::LoadU(d, b + i), s);
  float r = hn::GetLane(hn::SumOfLanes(d, s));
  for (; i < n; ++i) r += a[i] * b[i];
  return r;
}

// out[n] += p * v[n]
HWY_INLINE void Axpy(float p, const float* v, int64_t n, float* out) {
  const DF d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  const auto vp = hn::Set(d, p);
  int64_t i = 0;
  for (; i + lanes <= n; i += lanes) {
    hn::StoreU(hn::MulAdd(vp, hn::LoadU(d, v + i), hn::LoadU(d, out + i)), d, out + i);
  }
  for (; i < n; ++i) out[i] += p * v[i];
}

// For each of the `group` heads: partial[g] = {max score m, Σ exp(s - m), Σ exp(s - m) v}
// over keys [j0, j1). `scores` holds group × (j1 - j0) floats.
void DecodePartial(const Layout& l, const float* q, const float* k, const float* v,
                   const DecodeTask& t, float* scores, float* partial) {
  const DF d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  const int64_t len = t.j1 - t.j0, hd = l.hd;
  const float* qi = q + t.i * l.q_stride + t.kv_head * l.group * hd;
  const float* kg = k + t.kv_head * hd;
  const float* vg = v + t.kv_head * hd;
  // Blocks of keys small enough to stay in L1 while every head of the group reads them.
  constexpr int64_t kBlock = 32;
  for (int64_t b0 = 0; b0 < len; b0 += kBlock) {
    const int64_t b1 = std::min(len, b0 + kBlock);
    for (int64_t g = 0; g < l.group; ++g) {
      for (int64_t j = b0; j < b1; ++j) {
        scores[g * len + j] = DotHd(qi + g * hd, kg + (t.j0 + j) * l.kv_stride, hd) * l.scale;
      }
    }
  }
  for (int64_t g = 0; g < l.group; ++g) {
    float* s = scores + g * len;
    float* part = partial + g * (hd + 2);
    float m = s[0];
    for (int64_t j = 1; j < len; ++j) m = std::fmax(m, s[j]);
    const auto vm = hn::Set(d, m);
    auto vsum = hn::Zero(d);
    int64_t j = 0;
    for (; j + lanes <= len; j += lanes) {
      const auto e = hn::Exp(d, hn::Sub(hn::LoadU(d, s + j), vm));
      hn::StoreU(e, d, s + j);
      vsum = hn::Add(vsum, e);
    }
    float sum = hn::GetLane(hn::SumOfLanes(d, vsum));
    for (; j < len; ++j) sum += (s[j] = std::exp(s[j] - m));
    part[0] = m;
    part[1] = sum;
    std::fill(part + 2, part + 2 + hd, 0.0f);
  }
  for (int64_t b0 = 0; b0 < len; b0 += kBlock) {
    const int64_t b1 = std::min(len, b0 + kBlock);
    for (int64_t g = 0; g < l.group; ++g) {
      float* acc = partial + g * (hd + 2) + 2;
      for (int64_t j = b0; j < b1; ++j) {
        Axpy(scores[g * len + j], vg + (t.j0 + j) * l.kv_stride, hd, acc);
      }
    }
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace molt
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace molt {

HWY_EXPORT(DecodePartial);

namespace {

void attention_decode(const AttentionShape& s, const Layout& l, const float* q, const float* k,
                      const float* v, int64_t p0, int64_t n, float* out) {
  // Enough tasks to feed every thread; splits of at least 256 keys so merging stays cheap.
  const int64_t rows = s.n_kv_heads * n, threads = omp_get_max_threads();
  const int64_t splits =
      std::max<int64_t>(1, std::min((threads + rows - 1) / rows, (p0 + 1) / 256));
  std::vector<DecodeTask> tasks;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t len = p0 + i + 1;
    for (int64_t g = 0; g < s.n_kv_heads; ++g) {
      for (int64_t sp = 0; sp < splits; ++sp) {
        tasks.push_back({i, g, len * sp / splits, len * (sp + 1) / splits});
      }
    }
  }
  const int64_t part_size = l.group * (l.hd + 2);
  std::vector<float> partial(tasks.size() * static_cast<size_t>(part_size));
  const auto kernel = HWY_DYNAMIC_DISPATCH(DecodePartial);
  const auto count = static_cast<int64_t>(tasks.size());
#pragma omp parallel
  {
    std::vector<float> scores;
#pragma omp for schedule(dynamic)
    for (int64_t t = 0; t < count; ++t) {
      const DecodeTask& task = tasks[static_cast<size_t>(t)];
      scores.resize(static_cast<size_t>(l.group * (task.j1 - task.j0)));
      kernel(l, q, k, v, task, scores.data(), partial.data() + t * part_size);
    }
  }
  // Merge the splits of each (row, kv head): rescale each to the overall max.
  for (int64_t r = 0; r < rows; ++r) {
    const DecodeTask& first = tasks[static_cast<size_t>(r * splits)];
    for (int64_t g = 0; g < l.group; ++g) {
      float m = -INFINITY;
      for (int64_t sp = 0; sp < splits; ++sp) {
        m = std::fmax(m,
                      partial[static_cast<size_t>((r * splits + sp) * part_size + g * (l.hd + 2))]);
      }
      float* o = out + first.i * l.q_stride + (first.kv_head * l.group + g) * l.hd;
      std::fill(o, o + l.hd, 0.0f);
      float sum = 0.0f;
      for (int64_t sp = 0; sp < splits; ++sp) {
        const float* part = partial.data() + (r * splits + sp) * part_size + g * (l.hd + 2);
        const float w = std::exp(part[0] - m);
        sum += w * part[1];
        for (int64_t c = 0; c < l.hd; ++c) o[c] += w * part[2 + c];
      }
      const float inv = 1.0f / sum;
      for (int64_t c = 0; c < l.hd; ++c) o[c] *= inv;
    }
  }
}

// Queries [q0, q1) of head h (positions p0+q0 ..): S = Q Kᵀ over the keys the last row may
// see, causal mask + softmax per row, O = P V.
void attend_block(const Layout& l, const float* q, const float* k, const float* v, int64_t p0,
                  int64_t h, int64_t q0, int64_t q1, std::vector<float>& s, float* out) {
  const int64_t rows = q1 - q0, len = p0 + q1;
  s.resize(static_cast<size_t>(rows * len));
  const int64_t g = h / l.group;
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(rows),
              static_cast<int>(len), static_cast<int>(l.hd), l.scale,
              q + q0 * l.q_stride + h * l.hd, static_cast<int>(l.q_stride), k + g * l.hd,
              static_cast<int>(l.kv_stride), 0.0f, s.data(), static_cast<int>(len));
  for (int64_t r = 0; r < rows; ++r) {
    float* row = s.data() + r * len;
    const int64_t valid = p0 + q0 + r + 1;
    softmax(row, valid);
    std::fill(row + valid, row + len, 0.0f);
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(rows),
              static_cast<int>(l.hd), static_cast<int>(len), 1.0f, s.data(), static_cast<int>(len),
              v + g * l.hd, static_cast<int>(l.kv_stride), 0.0f, out + q0 * l.q_stride + h * l.hd,
              static_cast<int>(l.q_stride));
}

void attention_prefill(const AttentionShape& s, const Layout& l, const float* q, const float* k,
                       const float* v, int64_t p0, int64_t n, float* out) {
  constexpr int64_t kBlock = 64;
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  const int64_t tasks = s.n_heads * blocks;
  // BLAS runs single-threaded inside the region (OpenBLAS checks omp_in_parallel).
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
  if (n < 16) {
    attention_decode(s, l, q, k, v, p0, n, out);
  } else {
    attention_prefill(s, l, q, k, v, p0, n, out);
  }
}

}  // namespace molt
#endif  // HWY_ONCE
