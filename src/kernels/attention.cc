// Grouped-query causal attention. Decode (a few queries) streams the cache once: the query
// heads that share a KV head are handled together so each K and V row is loaded once, and
// long caches are split over threads (flash-decoding: partial max / sum / output per split,
// merged at the end). Prefill (many queries) runs two single-threaded GEMMs per head and
// block of queries, the blocks spread over threads. Rows stored as f16 or int8 are read as
// stored by decode (widened in registers) and widened once per layer for prefill.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/attention.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
// Must follow foreach_target.h.
#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

#include "hwy/contrib/math/math-inl.h"
#include "hwy/highway.h"
#include "molt/common/dtype.h"
#include "molt/common/error.h"
#include "molt/kernels/attention.h"
#include "molt/kernels/ops.h"
#include "molt/kernels/team.h"

// Shared by every target; this file is compiled once per target, so guard it.
#ifndef MOLT_KERNELS_ATTENTION_TYPES
#define MOLT_KERNELS_ATTENTION_TYPES
namespace molt {
namespace {

struct Layout {
  int64_t hd, group, q_stride, kvd;  // kvd: n_kv_heads · head_dim
  float scale;
};

// One decode task: the query heads of KV head `kv_head` for query row `i` of sequence `seq`,
// keys [j0, j1).
struct DecodeTask {
  int64_t seq, i, kv_head, j0, j1;
};

// The queries of one decode call: n rows at positions p0 .. of one cache, whose rows are
// kv_stride elements of type kv apart.
struct DecodeSeq {
  const float* q;
  const void *k, *v;
  int64_t p0, n;
  float* out;
  KvDType kv;
  int64_t kv_stride;
};

}  // namespace
}  // namespace molt
#endif  // MOLT_KERNELS_ATTENTION_TYPES

HWY_BEFORE_NAMESPACE();
namespace molt {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;

// A vector of f32 from stored K or V elements.
HWY_INLINE hn::Vec<DF> LoadRow(DF d, const float* p) {
  return hn::LoadU(d, p);
}
HWY_INLINE hn::Vec<DF> LoadRow(DF d, const hwy::float16_t* p) {
  return hn::PromoteTo(d, hn::LoadU(hn::Rebind<hwy::float16_t, DF>(), p));
}
HWY_INLINE hn::Vec<DF> LoadRow(DF d, const int8_t* p) {
  const hn::Rebind<int32_t, DF> di;
  return hn::ConvertTo(d, hn::PromoteTo(di, hn::LoadU(hn::Rebind<int8_t, DF>(), p)));
}
HWY_INLINE float ToF32(float x) {
  return x;
}
HWY_INLINE float ToF32(hwy::float16_t x) {
  uint16_t bits;
  std::memcpy(&bits, &x, 2);
  return f16_to_f32(bits);
}
HWY_INLINE float ToF32(int8_t x) {
  return static_cast<float>(x);
}

// q · k over one head. Four accumulators: with one, the dependent FMAs of a 64-wide head
// would take longer than the loads.
template <class T>
HWY_INLINE float DotHd(const float* q, const T* k, int64_t n) {
  const DF d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  auto s0 = hn::Zero(d), s1 = s0, s2 = s0, s3 = s0;
  int64_t i = 0;
  for (; i + 4 * lanes <= n; i += 4 * lanes) {
    s0 = hn::MulAdd(hn::LoadU(d, q + i), LoadRow(d, k + i), s0);
    s1 = hn::MulAdd(hn::LoadU(d, q + i + lanes), LoadRow(d, k + i + lanes), s1);
    s2 = hn::MulAdd(hn::LoadU(d, q + i + 2 * lanes), LoadRow(d, k + i + 2 * lanes), s2);
    s3 = hn::MulAdd(hn::LoadU(d, q + i + 3 * lanes), LoadRow(d, k + i + 3 * lanes), s3);
  }
  for (; i + lanes <= n; i += lanes) s0 = hn::MulAdd(hn::LoadU(d, q + i), LoadRow(d, k + i), s0);
  float r = hn::GetLane(hn::SumOfLanes(d, hn::Add(hn::Add(s0, s1), hn::Add(s2, s3))));
  // Explicit FMAs in the tails: whether the compiler contracts a * b + c must not depend on
  // the stored type (f16 rows equal their widened f32 rows bit for bit).
  for (; i < n; ++i) r = std::fma(q[i], ToF32(k[i]), r);
  return r;
}

#if HWY_TARGET != HWY_SCALAR
// The lane sums of four vectors as the four lanes of one 128-bit vector: a transpose-and-add
// that costs about as much as one SumOfLanes instead of four.
template <class D>
HWY_INLINE hn::Vec<hn::Full128<float>> FoldBlocks(D d, hn::Vec<D> v) {
  if constexpr (hn::MaxLanes(D()) > 4) {
    const hn::Half<D> dh;
    return FoldBlocks(dh, hn::Add(hn::LowerHalf(dh, v), hn::UpperHalf(dh, v)));
  } else {
    (void)d;
    return v;
  }
}

template <class D, class V = hn::Vec<D>>
HWY_INLINE hn::Vec<hn::Full128<float>> Sum4(D d, V a0, V a1, V a2, V a3) {
  const hn::Repartition<uint64_t, D> d64;
  const V t0 = hn::Add(hn::InterleaveLower(d, a0, a1), hn::InterleaveUpper(d, a0, a1));
  const V t1 = hn::Add(hn::InterleaveLower(d, a2, a3), hn::InterleaveUpper(d, a2, a3));
  const auto u0 = hn::BitCast(d64, t0), u1 = hn::BitCast(d64, t1);
  const V lo = hn::BitCast(d, hn::InterleaveLower(d64, u0, u1));
  const V hi = hn::BitCast(d, hn::InterleaveUpper(d64, u0, u1));
  return FoldBlocks(d, hn::Add(lo, hi));
}

// out[0..4) = scale · (q · k_r) for the four keys k + r · kv_stride; hd a multiple of N.
template <class T>
HWY_INLINE void Dot4(const float* q, const T* k, int64_t kv_stride, int64_t hd, float scale,
                     float* out) {
  const DF d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  auto s0 = hn::Zero(d), s1 = s0, s2 = s0, s3 = s0;
  for (int64_t i = 0; i < hd; i += lanes) {
    const auto qv = hn::LoadU(d, q + i);
    s0 = hn::MulAdd(qv, LoadRow(d, k + i), s0);
    s1 = hn::MulAdd(qv, LoadRow(d, k + kv_stride + i), s1);
    s2 = hn::MulAdd(qv, LoadRow(d, k + 2 * kv_stride + i), s2);
    s3 = hn::MulAdd(qv, LoadRow(d, k + 3 * kv_stride + i), s3);
  }
  const hn::Full128<float> d4;
  hn::StoreU(hn::Mul(Sum4(d, s0, s1, s2, s3), hn::Set(d4, scale)), d4, out);
}
#endif

// scores[j] = scale · (q · k_j) for j in [0, len).
template <class T>
HWY_INLINE void Scores(const float* q, const T* k, int64_t kv_stride, int64_t len, int64_t hd,
                       float scale, float* scores) {
  int64_t j = 0;
#if HWY_TARGET != HWY_SCALAR
  if (hd % static_cast<int64_t>(hn::Lanes(DF())) == 0) {
    for (; j + 4 <= len; j += 4) Dot4(q, k + j * kv_stride, kv_stride, hd, scale, scores + j);
  }
#endif
  for (; j < len; ++j) scores[j] = DotHd(q, k + j * kv_stride, hd) * scale;
}

// For H heads h: acc_h[c0, c0 + V·N) += Σ_j p_h[j] · v_j[c0, ...) over j in [0, len). Each
// load of v serves H heads, and the H·V accumulators stay in registers across the keys.
template <int H, int V, class T>
HWY_INLINE void AccumulateChunk(const float* p, int64_t p_stride, const T* v, int64_t kv_stride,
                                int64_t len, int64_t c0, float* acc, int64_t acc_stride) {
  const DF d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  hn::Vec<DF> a[H][V];
  for (int h = 0; h < H; ++h) {
    for (int i = 0; i < V; ++i) a[h][i] = hn::LoadU(d, acc + h * acc_stride + c0 + i * lanes);
  }
  for (int64_t j = 0; j < len; ++j) {
    const T* vj = v + j * kv_stride + c0;
    hn::Vec<DF> vv[V];
    for (int i = 0; i < V; ++i) vv[i] = LoadRow(d, vj + i * lanes);
    for (int h = 0; h < H; ++h) {
      const auto ph = hn::Set(d, p[h * p_stride + j]);
      for (int i = 0; i < V; ++i) a[h][i] = hn::MulAdd(ph, vv[i], a[h][i]);
    }
  }
  for (int h = 0; h < H; ++h) {
    for (int i = 0; i < V; ++i) hn::StoreU(a[h][i], d, acc + h * acc_stride + c0 + i * lanes);
  }
}

// acc_h[hd] += Σ_j p_h[j] · v_j for H heads, head_dim cut into register-sized chunks.
template <int H, class T>
HWY_INLINE void AccumulateValues(const float* p, int64_t p_stride, const T* v, int64_t kv_stride,
                                 int64_t len, int64_t hd, float* acc, int64_t acc_stride) {
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(DF()));
  int64_t c0 = 0;
  for (; c0 + 4 * lanes <= hd; c0 += 4 * lanes) {
    AccumulateChunk<H, 4>(p, p_stride, v, kv_stride, len, c0, acc, acc_stride);
  }
  if (c0 + 2 * lanes <= hd) {
    AccumulateChunk<H, 2>(p, p_stride, v, kv_stride, len, c0, acc, acc_stride);
    c0 += 2 * lanes;
  }
  if (c0 + lanes <= hd) {
    AccumulateChunk<H, 1>(p, p_stride, v, kv_stride, len, c0, acc, acc_stride);
    c0 += lanes;
  }
  for (; c0 < hd; ++c0) {
    for (int h = 0; h < H; ++h) {
      float s = acc[h * acc_stride + c0];
      for (int64_t j = 0; j < len; ++j)
        s = std::fma(p[h * p_stride + j], ToF32(v[j * kv_stride + c0]), s);
      acc[h * acc_stride + c0] = s;
    }
  }
}

// s[0, len) ← exp(s - max s); returns {max, Σ exp}.
HWY_INLINE std::pair<float, float> ExpShifted(float* s, int64_t len) {
  const DF d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  float m = s[0];
  int64_t j = 0;
  if (len >= lanes) {
    auto vm = hn::LoadU(d, s);
    for (j = lanes; j + lanes <= len; j += lanes) vm = hn::Max(vm, hn::LoadU(d, s + j));
    m = hn::GetLane(hn::MaxOfLanes(d, vm));
  }
  for (; j < len; ++j) m = s[j] > m ? s[j] : m;
  const auto vm = hn::Set(d, m);
  auto vsum = hn::Zero(d);
  for (j = 0; j + lanes <= len; j += lanes) {
    const auto e = hn::Exp(d, hn::Sub(hn::LoadU(d, s + j), vm));
    hn::StoreU(e, d, s + j);
    vsum = hn::Add(vsum, e);
  }
  float sum = hn::GetLane(hn::SumOfLanes(d, vsum));
  for (; j < len; ++j) sum += (s[j] = std::exp(s[j] - m));
  return {m, sum};
}

// The f32 scale of an int8 row's head (kernels/kv_rows.h: the scales follow the kvd values).
HWY_INLINE float RowScale(const int8_t* row, int64_t kvd, int64_t head) {
  float s;
  std::memcpy(&s, row + kvd + 4 * head, sizeof(float));
  return s;
}

// For each of the `group` query heads of one KV head: partial[g] = {max score m,
// Σ exp(s - m), Σ exp(s - m) v} over keys [j0, j1). `scores` holds group × (j1 - j0) floats.
// int8 rows: the K scale multiplies the scores, the V scale the weights of the values.
template <class T>
HWY_INLINE void DecodePartialOf(const Layout& l, const DecodeSeq& sq, const DecodeTask& t,
                                float* scores, float* partial) {
  const int64_t len = t.j1 - t.j0, hd = l.hd, stride = sq.kv_stride;
  const T* k = static_cast<const T*>(sq.k);
  const T* v = static_cast<const T*>(sq.v);
  const float* qi = sq.q + t.i * l.q_stride + t.kv_head * l.group * hd;
  const T* kg = k + t.j0 * stride + t.kv_head * hd;
  const T* vg = v + t.j0 * stride + t.kv_head * hd;
  constexpr bool kScaled = std::is_same_v<T, int8_t>;
  // Blocks of keys (8 KiB of K or V) stay in L1 while every head of the group reads them.
  const int64_t block = std::max<int64_t>(16, 2048 / hd);
  for (int64_t b0 = 0; b0 < len; b0 += block) {
    const int64_t b1 = std::min(len, b0 + block);
    for (int64_t g = 0; g < l.group; ++g) {
      Scores(qi + g * hd, kg + b0 * stride, stride, b1 - b0, hd, l.scale, scores + g * len + b0);
    }
  }
  if constexpr (kScaled) {
    for (int64_t j = 0; j < len; ++j) {
      const float ks = RowScale(k + (t.j0 + j) * stride, l.kvd, t.kv_head);
      for (int64_t g = 0; g < l.group; ++g) scores[g * len + j] *= ks;
    }
  }
  for (int64_t g = 0; g < l.group; ++g) {
    float* part = partial + g * (hd + 2);
    const auto [m, sum] = ExpShifted(scores + g * len, len);
    part[0] = m;
    part[1] = sum;
    std::fill(part + 2, part + 2 + hd, 0.0f);
  }
  if constexpr (kScaled) {
    for (int64_t j = 0; j < len; ++j) {
      const float vs = RowScale(v + (t.j0 + j) * stride, l.kvd, t.kv_head);
      for (int64_t g = 0; g < l.group; ++g) scores[g * len + j] *= vs;
    }
  }
  for (int64_t b0 = 0; b0 < len; b0 += block) {
    const int64_t b1 = std::min(len, b0 + block);
    // Two heads per pass over the block of V.
    int64_t g = 0;
    for (; g + 2 <= l.group; g += 2) {
      AccumulateValues<2>(scores + g * len + b0, len, vg + b0 * stride, stride, b1 - b0, hd,
                          partial + g * (hd + 2) + 2, hd + 2);
    }
    if (g < l.group) {
      AccumulateValues<1>(scores + g * len + b0, len, vg + b0 * stride, stride, b1 - b0, hd,
                          partial + g * (hd + 2) + 2, hd + 2);
    }
  }
}

void DecodePartialF32(const Layout& l, const DecodeSeq& sq, const DecodeTask& t, float* scores,
                      float* partial) {
  DecodePartialOf<float>(l, sq, t, scores, partial);
}
void DecodePartialF16(const Layout& l, const DecodeSeq& sq, const DecodeTask& t, float* scores,
                      float* partial) {
  DecodePartialOf<hwy::float16_t>(l, sq, t, scores, partial);
}
void DecodePartialI8(const Layout& l, const DecodeSeq& sq, const DecodeTask& t, float* scores,
                     float* partial) {
  DecodePartialOf<int8_t>(l, sq, t, scores, partial);
}

// Rows [r0, r1) of stored K or V, each `stride` elements apart, widened to f32 rows of kvd.
template <class T>
HWY_INLINE void WidenOf(const void* rows, int64_t stride, int64_t kvd, int64_t hd, int64_t r0,
                        int64_t r1, float* out) {
  const DF d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  for (int64_t r = r0; r < r1; ++r) {
    const T* x = static_cast<const T*>(rows) + r * stride;
    float* y = out + r * kvd;
    int64_t i = 0;
    for (; i + lanes <= kvd; i += lanes) hn::StoreU(LoadRow(d, x + i), d, y + i);
    for (; i < kvd; ++i) y[i] = ToF32(x[i]);
    if constexpr (std::is_same_v<T, int8_t>) {
      for (int64_t h = 0; h < kvd / hd; ++h) {
        const float sc = RowScale(x, kvd, h);
        for (int64_t c = 0; c < hd; ++c) y[h * hd + c] *= sc;
      }
    }
  }
}

void WidenF16(const void* rows, int64_t stride, int64_t kvd, int64_t hd, int64_t r0, int64_t r1,
              float* out) {
  WidenOf<hwy::float16_t>(rows, stride, kvd, hd, r0, r1, out);
}
void WidenI8(const void* rows, int64_t stride, int64_t kvd, int64_t hd, int64_t r0, int64_t r1,
             float* out) {
  WidenOf<int8_t>(rows, stride, kvd, hd, r0, r1, out);
}

}  // namespace HWY_NAMESPACE
}  // namespace molt
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace molt {

HWY_EXPORT(DecodePartialF32);
HWY_EXPORT(DecodePartialF16);
HWY_EXPORT(DecodePartialI8);
HWY_EXPORT(WidenF16);
HWY_EXPORT(WidenI8);

namespace {

// The decode path for one or several sequences (batched decode: one query each, own caches) in
// one parallel region. A sequence's splits depend only on its own rows and length, so each
// gets the same tasks, partials and merge, bit for bit, as when it is attended alone.
void attention_decode(const AttentionShape& s, const Layout& l, std::span<const DecodeSeq> seqs) {
  const int64_t threads = omp_get_max_threads();
  // The calling thread's working memory, kept between calls: a decode step allocates only when
  // its context is longer than any this thread has attended over (geometric growth).
  thread_local std::vector<DecodeTask> tasks;
  thread_local std::vector<float> partial, scores;
  tasks.clear();
  int64_t longest = 0;
  for (size_t q = 0; q < seqs.size(); ++q) {
    const DecodeSeq& sq = seqs[q];
    // Enough tasks to feed every thread; splits of at least 256 keys so merging stays cheap.
    const int64_t rows = s.n_kv_heads * sq.n;
    const int64_t splits =
        std::max<int64_t>(1, std::min((threads + rows - 1) / rows, (sq.p0 + 1) / 256));
    for (int64_t i = 0; i < sq.n; ++i) {
      const int64_t len = sq.p0 + i + 1;
      for (int64_t g = 0; g < s.n_kv_heads; ++g) {
        for (int64_t sp = 0; sp < splits; ++sp) {
          tasks.push_back(
              {static_cast<int64_t>(q), i, g, len * sp / splits, len * (sp + 1) / splits});
          longest = std::max(longest, tasks.back().j1 - tasks.back().j0);
        }
      }
    }
  }
  const int64_t part_size = l.group * (l.hd + 2), per_thread = l.group * longest;
  if (partial.size() < tasks.size() * static_cast<size_t>(part_size)) {
    partial.resize(tasks.size() * static_cast<size_t>(part_size));
  }
  if (scores.size() < static_cast<size_t>(threads * per_thread)) {
    scores.resize(static_cast<size_t>(threads * per_thread));
  }
  using Kernel = void (*)(const Layout&, const DecodeSeq&, const DecodeTask&, float*, float*);
  const Kernel kernels[] = {HWY_DYNAMIC_DISPATCH(DecodePartialF32),
                            HWY_DYNAMIC_DISPATCH(DecodePartialF16),
                            HWY_DYNAMIC_DISPATCH(DecodePartialI8)};
  const auto count = static_cast<int64_t>(tasks.size());
  const DecodeTask* task_list = tasks.data();
  const DecodeSeq* seq_list = seqs.data();
  float* partials = partial.data();
  float* all_scores = scores.data();
  // Tasks are claimed from one counter (no barrier at the end: the region's, or the team's
  // wait for every thread, follows).
  std::atomic<int64_t> next{0};
  parallel([&] {
    float* mine = all_scores + omp_get_thread_num() * per_thread;
    for (int64_t t = next.fetch_add(1, std::memory_order_relaxed); t < count;
         t = next.fetch_add(1, std::memory_order_relaxed)) {
      const DecodeSeq& sq = seq_list[task_list[t].seq];
      kernels[static_cast<int>(sq.kv)](l, sq, task_list[t], mine, partials + t * part_size);
    }
  });
  // Merge the splits of each (sequence, row, kv head), consecutive in the task list: rescale
  // each to the overall max.
  for (int64_t t0 = 0; t0 < count;) {
    const DecodeTask& first = tasks[static_cast<size_t>(t0)];
    int64_t t1 = t0 + 1;
    while (t1 < count && tasks[static_cast<size_t>(t1)].seq == first.seq &&
           tasks[static_cast<size_t>(t1)].i == first.i &&
           tasks[static_cast<size_t>(t1)].kv_head == first.kv_head) {
      ++t1;
    }
    const int64_t splits = t1 - t0;
    float* out = seq_list[first.seq].out;
    for (int64_t g = 0; g < l.group; ++g) {
      float m = -INFINITY;
      for (int64_t sp = 0; sp < splits; ++sp) {
        m = std::fmax(m, partial[static_cast<size_t>((t0 + sp) * part_size + g * (l.hd + 2))]);
      }
      float* o = out + first.i * l.q_stride + (first.kv_head * l.group + g) * l.hd;
      std::fill(o, o + l.hd, 0.0f);
      float sum = 0.0f;
      for (int64_t sp = 0; sp < splits; ++sp) {
        const float* part = partial.data() + (t0 + sp) * part_size + g * (l.hd + 2);
        const float w = std::exp(part[0] - m);
        sum += w * part[1];
        for (int64_t c = 0; c < l.hd; ++c) o[c] += w * part[2 + c];
      }
      const float inv = 1.0f / sum;
      for (int64_t c = 0; c < l.hd; ++c) o[c] *= inv;
    }
    t0 = t1;
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
              static_cast<int>(l.kvd), 0.0f, s.data(), static_cast<int>(len));
  for (int64_t r = 0; r < rows; ++r) {
    float* row = s.data() + r * len;
    const int64_t valid = p0 + q0 + r + 1;
    softmax(row, valid);
    std::fill(row + valid, row + len, 0.0f);
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(rows),
              static_cast<int>(l.hd), static_cast<int>(len), 1.0f, s.data(), static_cast<int>(len),
              v + g * l.hd, static_cast<int>(l.kvd), 0.0f, out + q0 * l.q_stride + h * l.hd,
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
    // Each thread's own, kept between calls (the pool's threads live on).
    thread_local std::vector<float> scratch;
    // Later blocks see more keys: hand them out first so the threads finish together.
#pragma omp for schedule(dynamic)
    for (int64_t t = 0; t < tasks; ++t) {
      const int64_t b = blocks - 1 - t / s.n_heads, h = t % s.n_heads;
      attend_block(l, q, k, v, p0, h, b * kBlock, std::min(n, (b + 1) * kBlock), scratch, out);
    }
  }
}

Layout checked_layout(const AttentionShape& s, const char* op) {
  if (s.n_heads <= 0 || s.n_kv_heads <= 0 || s.head_dim <= 0) {
    fail("{}: shape n_heads={} n_kv_heads={} head_dim={} must be positive", op, s.n_heads,
         s.n_kv_heads, s.head_dim);
  }
  if (s.n_heads % s.n_kv_heads != 0) {
    fail("{}: n_kv_heads {} does not divide n_heads {}", op, s.n_kv_heads, s.n_heads);
  }
  return {s.head_dim, s.n_heads / s.n_kv_heads, s.n_heads * s.head_dim, s.n_kv_heads * s.head_dim,
          static_cast<float>(1.0 / std::sqrt(static_cast<double>(s.head_dim)))};
}

// Elements of type kv from one stored row to the next.
int64_t element_stride(const AttentionShape& s, KvDType kv) {
  const auto bytes = static_cast<int64_t>(kv_row_bytes(kv, s.n_kv_heads, s.head_dim));
  return kv == KvDType::kF32 ? bytes / 4 : kv == KvDType::kF16 ? bytes / 2 : bytes;
}

}  // namespace

void attention(const AttentionShape& s, const float* q, const float* k, const float* v, int64_t p0,
               int64_t n, float* out) {
  attention(s, q, k, v, KvDType::kF32, p0, n, out);
}

void attention(const AttentionShape& s, const float* q, const void* k, const void* v, KvDType kv,
               int64_t p0, int64_t n, float* out) {
  const Layout l = checked_layout(s, "attention");
  if (p0 < 0 || n < 0) fail("attention: p0 {} and n {} must be non-negative", p0, n);
  if (n == 0) return;
  const int64_t stride = element_stride(s, kv);
  if (n < 16) {
    const DecodeSeq one{q, k, v, p0, n, out, kv, stride};
    attention_decode(s, l, std::span(&one, 1));
  } else if (kv == KvDType::kF32) {
    attention_prefill(s, l, q, static_cast<const float*>(k), static_cast<const float*>(v), p0, n,
                      out);
  } else {
    // The calling thread's, kept between calls: prefill of a long context allocates once.
    thread_local std::vector<float> wide;
    const int64_t rows = p0 + n;
    wide.resize(static_cast<size_t>(2 * rows * l.kvd));
    const auto widen =
        kv == KvDType::kF16 ? HWY_DYNAMIC_DISPATCH(WidenF16) : HWY_DYNAMIC_DISPATCH(WidenI8);
    float* wk = wide.data();
    float* wv = wk + rows * l.kvd;
#pragma omp parallel for schedule(static) if (rows * l.kvd > 65536)
    for (int64_t r = 0; r < rows; r += 64) {
      const int64_t r1 = std::min(rows, r + 64);
      widen(k, stride, l.kvd, l.hd, r, r1, wk);
      widen(v, stride, l.kvd, l.hd, r, r1, wv);
    }
    attention_prefill(s, l, q, wk, wv, p0, n, out);
  }
}

void attention_batch(const AttentionShape& s, std::span<const AttentionQuery> queries) {
  const Layout l = checked_layout(s, "attention_batch");
  // The calling thread's list, kept between calls (a decode step allocates nothing).
  thread_local std::vector<DecodeSeq> seqs;
  seqs.clear();
  for (const AttentionQuery& a : queries) {
    if (a.pos < 0) fail("attention_batch: position {} must be non-negative", a.pos);
    seqs.push_back({a.q, a.k, a.v, a.pos, 1, a.out, a.kv, element_stride(s, a.kv)});
  }
  if (!seqs.empty()) attention_decode(s, l, seqs);
}

}  // namespace molt
#endif  // HWY_ONCE
