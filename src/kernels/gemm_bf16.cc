#include "kernels/gemm_bf16.h"

#include <omp.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <tuple>
#include <vector>
#if MOLT_HAVE_DNNL
#include <oneapi/dnnl/dnnl.hpp>
#endif

#include "molt/common/dtype.h"
#include "molt/common/error.h"

namespace molt {

#if MOLT_HAVE_DNNL
bool bf16_gemm_supported() {
#if defined(__x86_64__) || defined(__i386__)
  static const bool supported = [] {
    try {
      const dnnl::cpu_isa isa = dnnl::get_effective_cpu_isa();
      return isa == dnnl::cpu_isa::avx512_core_bf16 || isa == dnnl::cpu_isa::avx512_core_amx;
    } catch (const dnnl::error&) {
      return false;
    }
  }();
  return supported;
#else
  return false;  // Debian's arm64 oneDNN has no bf16 matmul kernels; sgemm it is
#endif
}

namespace {

// n, cols, rows, ldy, and the threads the primitive was built for.
using Shape = std::tuple<int64_t, int64_t, int64_t, int64_t, int>;

struct Engine {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  // One primitive per shape: building one costs ~0.1 ms, a prefill chunk calls the same few
  // shapes hundreds of times. The last chunk of every prompt (and a recompute over the whole
  // context) has a shape of its own, so the map is bounded: past kGemmBf16CachedShapes the
  // least recently used goes (a tick per use; a linear scan over 64 entries is nothing beside
  // a GEMM). Only the map is guarded: each call brings its own scratchpad (below).
  struct Entry {
    dnnl::matmul primitive;
    dnnl::memory::desc scratchpad;
    uint64_t last_use = 0;
  };
  std::map<Shape, Entry> primitives;
  uint64_t tick = 0;
  std::mutex mutex;
};

Engine& engine() {
  static Engine e;
  return e;
}

dnnl::memory::desc desc(int64_t rows, int64_t cols, int64_t row_stride, dnnl::memory::data_type t,
                        bool transposed = false) {
  // transposed: the logical [rows × cols] matrix lies column-major (W as [out × in] read as Wᵀ).
  return transposed ? dnnl::memory::desc({rows, cols}, t, {1, row_stride})
                    : dnnl::memory::desc({rows, cols}, t, {row_stride, 1});
}

}  // namespace

int gemm_bf16_cached_shapes() {
  Engine& e = engine();
  std::lock_guard<std::mutex> lock(e.mutex);
  return static_cast<int>(e.primitives.size());
}

void gemm_bf16(const uint16_t* x, int64_t n, int64_t cols, const uint16_t* w, int64_t rows,
               float* y, int64_t ldy) {
  if (n <= 0 || rows <= 0) return;
  if (cols <= 0 || ldy < rows)
    fail("gemm_bf16: bad shape n {} cols {} rows {} ldy {}", n, cols, rows, ldy);
  using dt = dnnl::memory::data_type;
  const dnnl::memory::desc src = desc(n, cols, cols, dt::bf16);
  const dnnl::memory::desc wei = desc(cols, rows, cols, dt::bf16, /*transposed=*/true);
  const dnnl::memory::desc dst = desc(n, rows, ldy, dt::f32);
  Engine& e = engine();
  // oneDNN splits a primitive's work for the threads it sees when built (omp_get_max_threads)
  // and expects as many when it runs. Inside a parallel region (a map applying its layers, one
  // GEMM per thread) a nested region gets one thread, so there it is built for one, and the
  // cache keeps those apart from the ones built outside.
  const bool nested = omp_in_parallel() != 0;
  const int threads = nested ? 1 : omp_get_max_threads();
  struct OneThread {  // this thread's own nthreads-var only; restored on every way out
    int saved = 0;
    explicit OneThread(bool on) : saved(on ? omp_get_max_threads() : 0) {
      if (on) omp_set_num_threads(1);
    }
    ~OneThread() {
      if (saved > 0) omp_set_num_threads(saved);
    }
    OneThread(const OneThread&) = delete;
    OneThread& operator=(const OneThread&) = delete;
  } one_thread(nested);
  try {
    dnnl::matmul primitive;
    dnnl::memory::desc scratch_desc;
    {
      std::lock_guard<std::mutex> lock(e.mutex);
      const Shape shape{n, cols, rows, ldy, threads};
      auto it = e.primitives.find(shape);
      if (it == e.primitives.end()) {
        if (e.primitives.size() >= static_cast<size_t>(kGemmBf16CachedShapes)) {
          e.primitives.erase(std::min_element(
              e.primitives.begin(), e.primitives.end(),
              [](const auto& a, const auto& b) { return a.second.last_use < b.second.last_use; }));
        }
        // The library's own scratchpad is one buffer shared by every primitive (Debian builds
        // oneDNN without DNNL_ENABLE_CONCURRENT_EXEC): two threads multiplying at once (a map's
        // layers) wrote into each other's copies of x and read past its end. The caller's
        // thread brings its own instead.
        dnnl::primitive_attr attr;
        attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
        const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(src, wei, dst), attr, e.engine);
        it = e.primitives.emplace(shape, Engine::Entry{dnnl::matmul(pd), pd.scratchpad_desc()})
                 .first;
      }
      it->second.last_use = ++e.tick;
      primitive = it->second.primitive;  // a shared handle: an eviction does not free it under us
      scratch_desc = it->second.scratchpad;
    }
    // This thread's scratchpad, grown to the largest seen and kept (64-byte aligned, as oneDNN
    // prefers).
    thread_local std::vector<uint8_t> scratch;
    const size_t need = scratch_desc.get_size() + 64;
    if (scratch.size() < need) scratch.resize(need);
    void* aligned = scratch.data() + (64 - reinterpret_cast<uintptr_t>(scratch.data()) % 64) % 64;
    // oneDNN takes non-const handles; it only reads src and weights.
    dnnl::memory s(src, e.engine, const_cast<uint16_t*>(x));
    dnnl::memory m(wei, e.engine, const_cast<uint16_t*>(w));
    dnnl::memory d(dst, e.engine, y);
    dnnl::memory sp(scratch_desc, e.engine, aligned);
    dnnl::stream stream(e.engine);  // per call: a CPU stream is a thin handle
    primitive.execute(
        stream,
        {{DNNL_ARG_SRC, s}, {DNNL_ARG_WEIGHTS, m}, {DNNL_ARG_DST, d}, {DNNL_ARG_SCRATCHPAD, sp}});
    stream.wait();
  } catch (const dnnl::error& err) {
    fail("gemm_bf16 [{} × {}] · [{} × {}]ᵀ: oneDNN: {}", n, cols, rows, cols, err.what());
  }
}
#else
// Built without oneDNN (MOLT_DNNL=OFF, as on arm64): prefill takes sgemm.
bool bf16_gemm_supported() {
  return false;
}

int gemm_bf16_cached_shapes() {
  return 0;
}

void gemm_bf16(const uint16_t*, int64_t n, int64_t cols, const uint16_t*, int64_t rows, float*,
               int64_t) {
  fail("gemm_bf16 [{} × {}] · [{} × {}]ᵀ: this build has no oneDNN (MOLT_DNNL=OFF)", n, cols, rows,
       cols);
}
#endif

void round_to_bf16(const float* src, int64_t count, uint16_t* dst) {
#pragma omp parallel for schedule(static) if (count > (int64_t{1} << 16))
  for (int64_t i = 0; i < count; ++i) dst[i] = f32_to_bf16(src[i]);
}

}  // namespace molt
