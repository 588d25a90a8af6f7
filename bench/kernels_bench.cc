// Kernel microbenchmarks at the real Qwen2.5 shapes.
//
// Matvec is what decode spends its time in: every weight is read once per token, so the
// figure to watch is GB/s against the machine's STREAM triad (printed as triad_GB/s on each
// row; "best_GB/s" is the fastest pass, as the triad is a best-of). "cold" rotates through enough
// copies of the matrix (>= 256 MiB) that every call reads DRAM, as a real decode step does; "hot"
// reuses one matrix, which may sit in L3. Matmul (prefill) and attention report GFLOP/s.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/matvec.h"
#include "molt/common/aligned_vector.h"
#include "molt/common/dtype.h"
#include "molt/kernels/attention.h"
#include "molt/kernels/bandwidth.h"
#include "molt/kernels/kv_rows.h"
#include "molt/kernels/linear.h"
#include "molt/kernels/threads.h"

namespace molt {
namespace {

constexpr size_t kColdBytes = size_t{256} << 20;

double triad_gbs() {
  static const double gbs = [] {
    set_num_threads(0);
    return measure_triad_bandwidth_gbs(128, 5);
  }();
  return gbs;
}

// Small deterministic values (|v| < 0.5, no denormals); content does not change the speed.
void fill(DType dtype, size_t n, void* out, uint32_t seed) {
  uint32_t s = seed * 2654435761u + 1;
  for (size_t i = 0; i < n; ++i) {
    s = s * 1664525u + 1013904223u;
    const float v = static_cast<float>(static_cast<int32_t>(s >> 8) - (1 << 23)) / (1 << 24);
    if (dtype == DType::F32) {
      static_cast<float*>(out)[i] = v;
    } else {
      static_cast<uint16_t*>(out)[i] = dtype == DType::BF16 ? f32_to_bf16(v) : f32_to_f16(v);
    }
  }
}

struct Matrices {
  std::vector<AlignedVector<uint8_t>> copies;  // at cache lines, as a mapped checkpoint's tensors
  std::vector<WeightMatrix> views;
};

Matrices make_matrices(DType dtype, int64_t rows, int64_t cols, bool cold) {
  Matrices m;
  const size_t bytes = static_cast<size_t>(rows * cols) * dtype_size(dtype);
  const size_t count = cold ? std::max<size_t>(1, (kColdBytes + bytes - 1) / bytes) : 1;
  m.copies.resize(count);
  for (size_t i = 0; i < count; ++i) {
    m.copies[i].resize(bytes);
    if (i == 0) {
      fill(dtype, static_cast<size_t>(rows * cols), m.copies[0].data(), 1);
    } else {
      std::memcpy(m.copies[i].data(), m.copies[0].data(), bytes);
    }
    m.views.push_back({dtype, rows, cols, m.copies[i].data()});
  }
  return m;
}

void add_rate(benchmark::State& state, const char* name, double per_iteration) {
  state.counters[name] =
      benchmark::Counter(per_iteration * static_cast<double>(state.iterations()),
                         benchmark::Counter::kIsRate, benchmark::Counter::kIs1000);
}

// The bound: STREAM triad and a read-only sum over 128 MiB arrays, best of the runs.
void BM_Triad(benchmark::State& state) {
  set_num_threads(static_cast<int>(state.range(0)));
  double best = 0;
  for (auto _ : state) best = std::max(best, measure_triad_bandwidth_gbs(128, 5));
  state.counters["GB/s"] = best;
  set_num_threads(0);
}
BENCHMARK(BM_Triad)->ArgName("thr")->Arg(1)->Arg(2)->Iterations(2)->Unit(benchmark::kMillisecond);

void BM_ReadSum(benchmark::State& state) {
  set_num_threads(static_cast<int>(state.range(0)));
  double best = 0;
  for (auto _ : state) best = std::max(best, measure_read_bandwidth_gbs(256, 5));
  state.counters["GB/s"] = best;
  set_num_threads(0);
}
BENCHMARK(BM_ReadSum)->ArgName("thr")->Arg(1)->Arg(2)->Iterations(2)->Unit(benchmark::kMillisecond);

// Args: dtype, rows, cols, threads, cold.
void BM_Matvec(benchmark::State& state) {
  const auto dtype = static_cast<DType>(state.range(0));
  const int64_t rows = state.range(1), cols = state.range(2);
  const bool cold = state.range(4) != 0;
  const double triad = triad_gbs();
  set_num_threads(static_cast<int>(state.range(3)));
  const Matrices m = make_matrices(dtype, rows, cols, cold);
  std::vector<float> x(static_cast<size_t>(cols)), y(static_cast<size_t>(rows));
  fill(DType::F32, x.size(), x.data(), 2);
  // Besides the mean, keep the fastest full pass over the copies: the machine is shared, and
  // the triad figure it is compared with is a best-of too.
  size_t i = 0;
  double pass = 0.0, best_pass = 1e30;
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    matvec(m.views[i], x.data(), y.data());
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
    pass += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (++i == m.views.size()) {
      best_pass = std::min(best_pass, pass);
      pass = 0.0;
      i = 0;
    }
  }
  const double bytes = static_cast<double>(m.views[0].bytes());
  state.SetBytesProcessed(static_cast<int64_t>(static_cast<double>(state.iterations()) * bytes));
  add_rate(state, "GB/s", bytes / 1e9);
  if (best_pass < 1e30) {
    state.counters["best_GB/s"] = bytes * static_cast<double>(m.views.size()) / best_pass / 1e9;
  }
  state.counters["triad_GB/s"] = triad;
  state.SetLabel(std::string(dtype_name(dtype)) + (cold ? " cold " : " hot ") + simd_target_name());
  set_num_threads(0);
}

void MatvecShapes(benchmark::internal::Benchmark* b) {
  const int64_t shapes[][2] = {{896, 896},   {4864, 896},  {896, 4864},
                               {1536, 8960}, {8960, 1536}, {151936, 896}};
  for (auto dtype : {DType::F32, DType::BF16, DType::F16}) {
    for (const auto& s : shapes) {
      for (int threads : {1, 2}) {
        for (int cold : {1, 0}) {
          b->Args({static_cast<int64_t>(dtype), s[0], s[1], threads, cold});
        }
      }
    }
  }
}
BENCHMARK(BM_Matvec)
    ->Apply(MatvecShapes)
    ->ArgNames({"dtype", "rows", "cols", "thr", "cold"})
    ->UseRealTime()
    ->MinTime(0.2);

// The comparison that matters, robust to a shared machine: each iteration runs one STREAM
// triad pass (3 x 128 MiB) and one cold matvec pass (>= 256 MiB of weights), so both see the
// same background; the best of each is kept. Args: dtype, rows, cols, threads.
void BM_MatvecVsTriad(benchmark::State& state) {
  const auto dtype = static_cast<DType>(state.range(0));
  const int64_t rows = state.range(1), cols = state.range(2);
  set_num_threads(static_cast<int>(state.range(3)));
  const Matrices m = make_matrices(dtype, rows, cols, true);
  std::vector<float> x(static_cast<size_t>(cols)), y(static_cast<size_t>(rows));
  fill(DType::F32, x.size(), x.data(), 2);
  const int64_t n = int64_t{32} << 20;
  static std::vector<float> a(static_cast<size_t>(n)), b(a.size(), 1.0f), c(a.size(), 2.0f);
  using clock = std::chrono::steady_clock;
  double best_triad = 1e30, best_matvec = 1e30;
  for (auto _ : state) {
    auto t0 = clock::now();
    float* pa = a.data();
    const float* pb = b.data();
    const float* pc = c.data();
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) pa[i] = pb[i] + 3.0f * pc[i];
    best_triad = std::min(best_triad, std::chrono::duration<double>(clock::now() - t0).count());
    t0 = clock::now();
    for (const WeightMatrix& w : m.views) matvec(w, x.data(), y.data());
    benchmark::DoNotOptimize(y.data());
    best_matvec = std::min(best_matvec, std::chrono::duration<double>(clock::now() - t0).count());
  }
  const double triad = 12.0 * static_cast<double>(n) / best_triad / 1e9;
  const double matvec_gbs =
      static_cast<double>(m.views[0].bytes() * m.views.size()) / best_matvec / 1e9;
  state.counters["matvec_GB/s"] = matvec_gbs;
  state.counters["triad_GB/s"] = triad;
  state.counters["ratio"] = matvec_gbs / triad;
  state.SetLabel(std::string(dtype_name(dtype)) + " " + simd_target_name());
  set_num_threads(0);
}

void VsTriadShapes(benchmark::internal::Benchmark* b) {
  const int64_t shapes[][2] = {{4864, 896}, {896, 4864}, {1536, 8960}, {8960, 1536}, {151936, 896}};
  for (auto dtype : {DType::F32, DType::BF16, DType::F16}) {
    for (const auto& s : shapes) {
      for (int threads : {2, 1}) b->Args({static_cast<int64_t>(dtype), s[0], s[1], threads});
    }
  }
}
BENCHMARK(BM_MatvecVsTriad)
    ->Apply(VsTriadShapes)
    ->ArgNames({"dtype", "rows", "cols", "thr"})
    ->Iterations(8)
    ->Unit(benchmark::kMillisecond);

// Batched decode: one cold pass over the copies with n vectors (matvec_batch) against one with a
// single vector (matvec), alternating in each iteration so both see the same background; the
// best of each is kept. cost_vs_one = time(n) / time(1): 1 means the n dot products of a weight
// row were free beside reading it, n means no gain over n matvecs. Args: dtype, rows, cols, n,
// threads.
void BM_MatvecBatch(benchmark::State& state) {
  const auto dtype = static_cast<DType>(state.range(0));
  const int64_t rows = state.range(1), cols = state.range(2), n = state.range(3);
  set_num_threads(static_cast<int>(state.range(4)));
  const Matrices m = make_matrices(dtype, rows, cols, true);
  std::vector<float> x(static_cast<size_t>(n * cols)), y(static_cast<size_t>(n * rows));
  fill(DType::F32, x.size(), x.data(), 2);
  using clock = std::chrono::steady_clock;
  double best_one = 1e30, best_n = 1e30;
  for (auto _ : state) {
    auto t0 = clock::now();
    for (const WeightMatrix& w : m.views) matvec(w, x.data(), y.data());
    best_one = std::min(best_one, std::chrono::duration<double>(clock::now() - t0).count());
    t0 = clock::now();
    for (const WeightMatrix& w : m.views) matvec_batch(w, x.data(), n, y.data());
    best_n = std::min(best_n, std::chrono::duration<double>(clock::now() - t0).count());
    benchmark::DoNotOptimize(y.data());
  }
  const double bytes = static_cast<double>(m.views[0].bytes() * m.views.size());
  state.counters["one_GB/s"] = bytes / best_one / 1e9;
  state.counters["batch_GB/s"] = bytes / best_n / 1e9;
  state.counters["cost_vs_one"] = best_n / best_one;
  state.SetLabel(std::string(dtype_name(dtype)) + " " + simd_target_name());
  set_num_threads(0);
}

void BatchShapes(benchmark::internal::Benchmark* b) {
  const int64_t shapes[][2] = {{4864, 896}, {896, 4864}, {151936, 896}};
  for (auto dtype : {DType::BF16, DType::F32, DType::F16}) {
    for (const auto& s : shapes) {
      for (int64_t n : {2, 3, 4, 8}) b->Args({static_cast<int64_t>(dtype), s[0], s[1], n, 2});
    }
  }
}
BENCHMARK(BM_MatvecBatch)
    ->Apply(BatchShapes)
    ->ArgNames({"dtype", "rows", "cols", "n", "thr"})
    ->Iterations(6)
    ->Unit(benchmark::kMillisecond);

// Args: dtype, rows, cols, n (tokens). Prefill: GFLOP/s = 2 n rows cols / s.
void BM_Matmul(benchmark::State& state) {
  const auto dtype = static_cast<DType>(state.range(0));
  const int64_t rows = state.range(1), cols = state.range(2), n = state.range(3);
  set_num_threads(0);
  const Matrices m = make_matrices(dtype, rows, cols, false);
  std::vector<float> x(static_cast<size_t>(n * cols)), y(static_cast<size_t>(n * rows));
  fill(DType::F32, x.size(), x.data(), 3);
  for (auto _ : state) {
    matmul(m.views[0], x.data(), n, y.data());
    benchmark::DoNotOptimize(y.data());
  }
  add_rate(state, "GFLOP/s", 2.0 * static_cast<double>(n * rows * cols) / 1e9);
  state.SetLabel(std::string(dtype_name(dtype)));
}
BENCHMARK(BM_Matmul)
    ->ArgNames({"dtype", "rows", "cols", "n"})
    ->Args({static_cast<int64_t>(DType::F32), 896, 4864, 512})
    ->Args({static_cast<int64_t>(DType::BF16), 896, 4864, 512})
    ->Args({static_cast<int64_t>(DType::F16), 896, 4864, 512})
    ->Args({static_cast<int64_t>(DType::F32), 4864, 896, 512})
    ->Args({static_cast<int64_t>(DType::BF16), 4864, 896, 512})
    ->Args({static_cast<int64_t>(DType::BF16), 151936, 896, 64})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

// Args: n_heads, n_kv, head_dim, p0 (cached positions), n (new queries), KV rows (0 f32,
// 1 f16, 2 int8: kernels/kv_rows.h).
// GFLOP/s counts QKᵀ and PV over the causal triangle: 4 · head_dim · heads · Σ visible keys.
void BM_Attention(benchmark::State& state) {
  const AttentionShape s{state.range(0), state.range(1), state.range(2)};
  const int64_t p0 = state.range(3), n = state.range(4), total = p0 + n;
  const auto kv = static_cast<KvDType>(state.range(5));
  set_num_threads(0);
  std::vector<float> q(static_cast<size_t>(n * s.n_heads * s.head_dim));
  std::vector<float> k(static_cast<size_t>(total * s.n_kv_heads * s.head_dim)), v(k.size());
  std::vector<float> out(q.size());
  fill(DType::F32, q.size(), q.data(), 4);
  fill(DType::F32, k.size(), k.data(), 5);
  fill(DType::F32, v.size(), v.data(), 6);
  const size_t row = kv_row_bytes(kv, s.n_kv_heads, s.head_dim);
  std::vector<std::byte> ks(row * static_cast<size_t>(total)), vs(ks.size());
  kv_encode_rows(kv, s.n_kv_heads, s.head_dim, k.data(), total, ks.data());
  kv_encode_rows(kv, s.n_kv_heads, s.head_dim, v.data(), total, vs.data());
  for (auto _ : state) {
    attention(s, q.data(), ks.data(), vs.data(), kv, p0, n, out.data());
    benchmark::DoNotOptimize(out.data());
  }
  const double keys = static_cast<double>(n) * static_cast<double>(p0) +
                      static_cast<double>(n) * static_cast<double>(n + 1) / 2.0;
  add_rate(state, "GFLOP/s", 4.0 * static_cast<double>(s.head_dim * s.n_heads) * keys / 1e9);
  // Decode reads the whole cache once: K and V as stored.
  add_rate(state, "cache_GB/s", 2.0 * static_cast<double>(row * static_cast<size_t>(total)) / 1e9);
}
BENCHMARK(BM_Attention)
    ->ArgNames({"heads", "kv", "hd", "p0", "n", "rows"})
    ->ArgsProduct({{14}, {2}, {64}, {0}, {512, 2048}, {0, 1, 2}})
    ->ArgsProduct({{12}, {2}, {128}, {0}, {512, 2048}, {0, 1, 2}})
    ->ArgsProduct({{14}, {2}, {64}, {2047}, {1}, {0, 1, 2}})
    ->ArgsProduct({{12}, {2}, {128}, {2047, 8191, 32767}, {1}, {0, 1, 2}})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace molt
