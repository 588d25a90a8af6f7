// Quantised matvec microbenchmarks at the real Qwen2.5 shapes: GB/s of weights (packed data
// plus scales and biases) read by the fused-dequantisation kernels, each pass beside a STREAM
// triad pass so both see the same background load (best of each kept), and the ratio.
// Also the load-time quantisers' speed. Run: build/bench/molt_quant_bench (or via ctest-free
// scripts/performance.sh).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "kernels/matvec.h"
#include "molt/kernels/linear.h"
#include "molt/kernels/quant.h"
#include "molt/kernels/team.h"
#include "molt/kernels/threads.h"
#include "molt/model/synth.h"

namespace molt {
namespace {

constexpr size_t kColdBytes = size_t{256} << 20;

// 0: MLX 4-bit group 64 (bf16 scales), 1: MLX 8-bit group 64, 2: int8 per channel; 3 and 4:
// kinds 0 and 1 with rows interleaved by 8 (interleave_rows8).
const char* kind_name(int k) {
  const char* names[] = {"q4g64", "q8g64", "int8", "q4g64-rows8", "q8g64-rows8"};
  return names[k];
}

QuantizedMatrix make_matrix(int kind, int64_t rows, int64_t cols) {
  std::vector<float> w(static_cast<size_t>(rows * cols));
  uint32_t s = 12345;
  for (float& v : w) {
    s = s * 1664525u + 1013904223u;
    v = static_cast<float>(static_cast<int32_t>(s >> 8) - (1 << 23)) / (1 << 26);
  }
  const WeightMatrix dense{DType::F32, rows, cols, w.data()};
  if (kind == 2) return quantize_int8(dense, 0);
  QuantizedMatrix q = quantize_affine(dense, kind == 1 || kind == 4 ? 8 : 4, 64, DType::BF16);
  return kind >= 3 ? interleave_rows8(q.view()) : q;
}

// Enough copies of one matrix that a pass over them leaves every cache cold.
std::deque<QuantizedMatrix> make_copies(int kind, int64_t rows, int64_t cols) {
  std::deque<QuantizedMatrix> copies;
  copies.push_back(make_matrix(kind, rows, cols));
  const size_t bytes = copies[0].view().bytes();
  const size_t count = std::max<size_t>(1, (kColdBytes + bytes - 1) / bytes);
  for (size_t i = 1; i < count; ++i) copies.push_back(copies[0]);
  return copies;
}

// A STREAM triad pass over three arrays of 32 Mi floats (128 MiB each: far beyond any cache), run
// beside each timed pass of a benchmark so that both see the same background load. Its GB/s
// counts 12 bytes per element, as STREAM does. The arrays are made once for every benchmark.
class TriadPass {
 public:
  static TriadPass& arrays() {
    static TriadPass t;
    return t;
  }
  // One pass; its seconds.
  double run() {
    const auto t0 = std::chrono::steady_clock::now();
    float* pa = a_.data();
    const float* pb = b_.data();
    const float* pc = c_.data();
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < kN; ++i) pa[i] = pb[i] + 3.0f * pc[i];
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  static double gb_s(double seconds) {
    return 12.0 * static_cast<double>(kN) / seconds / 1e9;
  }

 private:
  static constexpr int64_t kN = int64_t{32} << 20;
  std::vector<float> a_ = std::vector<float>(kN), b_ = std::vector<float>(kN, 1.0f),
                     c_ = std::vector<float>(kN, 2.0f);
};

// Args: kind, rows, cols, threads.
void BM_QMatvecVsTriad(benchmark::State& state) {
  const int kind = static_cast<int>(state.range(0));
  const int64_t rows = state.range(1), cols = state.range(2);
  set_num_threads(static_cast<int>(state.range(3)));
  const std::deque<QuantizedMatrix> copies = make_copies(kind, rows, cols);
  std::vector<WeightMatrix> views;
  for (const auto& q : copies) views.push_back(q.view());
  std::vector<float> x(static_cast<size_t>(cols), 0.25f), y(static_cast<size_t>(rows));
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 17) * 0.1f - 0.8f;
  using clock = std::chrono::steady_clock;
  double best_triad = 1e30, best_matvec = 1e30;
  for (auto _ : state) {
    best_triad = std::min(best_triad, TriadPass::arrays().run());
    const auto t0 = clock::now();
    for (const WeightMatrix& w : views) matvec(w, x.data(), y.data());
    benchmark::DoNotOptimize(y.data());
    best_matvec = std::min(best_matvec, std::chrono::duration<double>(clock::now() - t0).count());
  }
  const double triad = TriadPass::gb_s(best_triad);
  const double gbs = static_cast<double>(views[0].bytes() * views.size()) / best_matvec / 1e9;
  state.counters["matvec_GB/s"] = gbs;
  state.counters["triad_GB/s"] = triad;
  state.counters["ratio"] = gbs / triad;
  state.counters["us_per_call"] = best_matvec / static_cast<double>(views.size()) * 1e6;
  state.counters["Gweights/s"] =
      static_cast<double>(rows * cols) * static_cast<double>(views.size()) / best_matvec / 1e9;
  state.SetLabel(std::string(kind_name(kind)) + " " + simd_target_name());
  set_num_threads(0);
}

void Shapes(benchmark::internal::Benchmark* b) {
  const int64_t shapes[][2] = {{4864, 896}, {896, 4864}, {8960, 1536}, {1536, 8960}, {151936, 896}};
  for (int kind : {0, 3, 1, 4, 2}) {
    for (const auto& s : shapes) {
      for (int threads : {2, 1}) b->Args({kind, s[0], s[1], threads});
    }
  }
}
BENCHMARK(BM_QMatvecVsTriad)
    ->Apply(Shapes)
    ->ArgNames({"kind", "rows", "cols", "thr"})
    ->Iterations(8)
    ->Unit(benchmark::kMillisecond);

// The kernel's compute ceiling: one matrix small enough to stay in cache (about 0.4 MB at
// 896 x 896, 4-bit), called back to back. Against BM_QMatvecVsTriad it says whether decode
// waits on memory or on the arithmetic.
void BM_QMatvecHot(benchmark::State& state) {
  const int kind = static_cast<int>(state.range(0));
  const int64_t rows = state.range(1), cols = state.range(2);
  set_num_threads(static_cast<int>(state.range(3)));
  const QuantizedMatrix q = make_matrix(kind, rows, cols);
  const WeightMatrix w = q.view();
  std::vector<float> x(static_cast<size_t>(cols)), y(static_cast<size_t>(rows));
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 17) * 0.1f - 0.8f;
  constexpr int kCalls = 64;
  for (auto _ : state) {
    for (int i = 0; i < kCalls; ++i) matvec(w, x.data(), y.data());
    benchmark::DoNotOptimize(y.data());
  }
  const double calls = static_cast<double>(state.iterations()) * kCalls;
  state.counters["GB/s"] =
      benchmark::Counter(static_cast<double>(w.bytes()) * calls / 1e9, benchmark::Counter::kIsRate);
  state.counters["us_per_call"] =
      benchmark::Counter(calls / 1e6, benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
  state.SetLabel(std::string(kind_name(kind)) + " " + simd_target_name());
  set_num_threads(0);
}
BENCHMARK(BM_QMatvecHot)
    ->Args({0, 896, 896, 2})
    ->Args({0, 896, 896, 1})
    ->Args({0, 4864, 896, 2})
    ->Args({0, 4864, 896, 1})
    ->Args({3, 896, 896, 2})
    ->Args({3, 896, 896, 1})
    ->Args({3, 4864, 896, 2})
    ->Args({3, 4864, 896, 1})
    ->Args({3, 896, 4864, 2})
    ->Args({3, 896, 4864, 1})
    ->Args({1, 896, 896, 2})
    ->Args({4, 896, 896, 2})
    ->Args({2, 896, 896, 2})
    ->ArgNames({"kind", "rows", "cols", "thr"})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

// Per-call cost: 4-bit matvec time (MLX layout and rows by 8) against rows at cols 896, so the
// intercept of time over bytes (thread wake-up, x rounding, stream start-up, the last block's wait)
// shows. Decode makes ~100 such calls per token at the 0.5B geometry.
void RowsSweep(benchmark::internal::Benchmark* b) {
  for (int kind : {0, 3}) {
    for (int64_t rows : {128, 512, 1216, 2432, 4864, 9728, 19456}) b->Args({kind, rows, 896, 2});
  }
}
BENCHMARK(BM_QMatvecVsTriad)
    ->Name("BM_QMatvecRows")
    ->Apply(RowsSweep)
    ->ArgNames({"kind", "rows", "cols", "thr"})
    ->Iterations(8)
    ->Unit(benchmark::kMicrosecond);

// The matvecs of one decoded token and nothing else, in decode's order and grouping, at a real
// geometry in MLX 4-bit g64 read rows by 8 (what decode reads after the layout cache): per
// layer q/k/v in one call, o, gate/up in one call, down; then the LM head. No attention, norms,
// RoPE or activation between them. Beside `molt bench decode` of the same geometry it splits a
// token's time into the matrices' and everything else's; per stage it gives the rate each call
// shape reaches. Every layer's matrices are copies at their own addresses (one quantisation per
// shape), so a token reads all of its bytes from memory, as decode does, and its calls share
// one thread team, as decode's do. Each token is timed beside a standalone triad pass; the best
// of each is kept. Args: geometry (0: Qwen2.5 0.5B, 1: 1.5B), threads.
void BM_DecodeMatvecs(benchmark::State& state) {
  const ModelConfig c = qwen25_geometry(state.range(0) == 0 ? "qwen2.5-0.5b" : "qwen2.5-1.5b");
  set_num_threads(static_cast<int>(state.range(1)));
  const int64_t d = c.hidden_size, ff = c.intermediate_size, L = c.num_hidden_layers;
  // Stage s of a layer: the shapes [rows, cols] of the matrices one call reads.
  const std::vector<std::pair<int64_t, int64_t>> stages[] = {
      {{c.q_dim(), d}, {c.kv_dim(), d}, {c.kv_dim(), d}},
      {{d, c.q_dim()}},
      {{ff, d}, {ff, d}},
      {{d, ff}}};
  const char* names[] = {"qkv", "o", "gate_up", "down", "lm_head"};
  constexpr int kStages = 5;
  std::map<std::pair<int64_t, int64_t>, QuantizedMatrix> shapes;
  auto proto = [&](int64_t rows, int64_t cols) -> const QuantizedMatrix& {
    auto it = shapes.find({rows, cols});
    if (it == shapes.end())
      it = shapes.emplace(std::pair{rows, cols}, make_matrix(3, rows, cols)).first;
    return it->second;
  };
  std::deque<QuantizedMatrix> store;
  // [layer][stage]: the weights of one call.
  std::vector<std::vector<std::vector<WeightMatrix>>> calls(static_cast<size_t>(L));
  double stage_bytes[kStages] = {};
  for (auto& layer : calls) {
    for (int s = 0; s < 4; ++s) {
      layer.emplace_back();
      for (const auto& [rows, cols] : stages[s]) {
        store.push_back(proto(rows, cols));
        layer.back().push_back(store.back().view());
        stage_bytes[s] += static_cast<double>(store.back().view().bytes());
      }
    }
  }
  store.push_back(make_matrix(3, c.vocab_size, d));
  const WeightMatrix lm_head = store.back().view();
  stage_bytes[4] = static_cast<double>(lm_head.bytes());
  double token_bytes = 0;
  for (double b : stage_bytes) token_bytes += b;

  std::vector<float> x(static_cast<size_t>(std::max(ff, c.q_dim())));
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 17) * 0.1f - 0.8f;
  std::vector<float> out(static_cast<size_t>(c.vocab_size + 2 * ff + 2 * c.q_dim()));
  using clock = std::chrono::steady_clock;
  auto since = [](clock::time_point t) {
    return std::chrono::duration<double>(clock::now() - t).count();
  };
  double best_triad = 1e30, best_token = 1e30, best_stages[kStages] = {};
  for (auto _ : state) {
    best_triad = std::min(best_triad, TriadPass::arrays().run());
    double st[kStages] = {};
    const auto start = clock::now();
    // As decode runs a token: one team for all of its calls (kernels/team.h).
    run_as_team([&] {
      for (const auto& layer : calls) {
        for (int s = 0; s < 4; ++s) {
          const auto& ws = layer[static_cast<size_t>(s)];
          const WeightMatrix* wp[3];
          float* yp[3];
          float* y = out.data();
          for (size_t i = 0; i < ws.size(); ++i) {
            wp[i] = &ws[i];
            yp[i] = y;
            y += ws[i].rows;
          }
          auto t = clock::now();
          matvec_batch(std::span(wp, ws.size()), x.data(), 1, std::span(yp, ws.size()));
          st[s] += since(t);
        }
      }
      const auto t = clock::now();
      matvec(lm_head, x.data(), out.data());
      st[4] = since(t);
    });
    const double token = since(start);
    benchmark::DoNotOptimize(out.data());
    if (token < best_token) {
      best_token = token;
      std::copy_n(st, kStages, best_stages);
    }
  }
  const double triad = TriadPass::gb_s(best_triad);
  const double gbs = token_bytes / best_token / 1e9;
  state.counters["tok/s"] = 1.0 / best_token;
  state.counters["GB/s"] = gbs;
  state.counters["triad_GB/s"] = triad;
  state.counters["x_triad"] = gbs / triad;
  for (int s = 0; s < kStages; ++s) {
    const double calls_per_token = s < 4 ? static_cast<double>(L) : 1.0;
    state.counters[std::string(names[s]) + "_us"] = best_stages[s] / calls_per_token * 1e6;
    state.counters[std::string(names[s]) + "_x_triad"] =
        stage_bytes[s] / best_stages[s] / 1e9 / triad;
  }
  state.SetLabel(std::string(state.range(0) == 0 ? "0.5B" : "1.5B") + " q4g64-rows8 " +
                 simd_target_name());
  set_num_threads(0);
}
BENCHMARK(BM_DecodeMatvecs)
    ->Args({0, 2})
    ->Args({1, 2})
    ->ArgNames({"geometry", "thr"})
    ->Iterations(12)
    ->Unit(benchmark::kMillisecond);

// Load-time quantisation speed, GB/s of f32 input.
void BM_Quantize(benchmark::State& state) {
  const int kind = static_cast<int>(state.range(0));
  const int64_t rows = 4864, cols = 896;
  set_num_threads(0);
  std::vector<float> w(static_cast<size_t>(rows * cols), 0.01f);
  for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>(i % 251) * 1e-3f - 0.12f;
  const WeightMatrix dense{DType::F32, rows, cols, w.data()};
  for (auto _ : state) {
    QuantizedMatrix q = kind == 2 ? quantize_int8(dense, 0)
                                  : quantize_affine(dense, kind == 0 ? 4 : 8, 64, DType::BF16);
    benchmark::DoNotOptimize(q.data.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * rows * cols * 4);
  state.SetLabel(kind_name(kind));
}
BENCHMARK(BM_Quantize)->Arg(0)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace molt
