// Memory bandwidth probes. The triad is plain C++ as STREAM is; the read probe is Highway
// code (compiled per CPU target) reading four streams per thread, the pattern matvec uses,
// so that it measures memory and not the adder.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/bandwidth.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
// Must follow foreach_target.h.
#include <omp.h>

#include <chrono>
#include <cstdint>
#include <memory>

#include "hwy/highway.h"
#include "molt/common/error.h"
#include "molt/kernels/bandwidth.h"

HWY_BEFORE_NAMESPACE();
namespace molt {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Sum of p[0, n) read as four sequential streams.
float SumStreams(const float* p, int64_t n) {
  const hn::ScalableTag<float> d;
  const auto lanes = static_cast<int64_t>(hn::Lanes(d));
  const int64_t q = n / 4 / lanes * lanes;
  auto a0 = hn::Zero(d), a1 = a0, a2 = a0, a3 = a0;
  for (int64_t i = 0; i < q; i += lanes) {
    a0 = hn::Add(a0, hn::LoadU(d, p + i));
    a1 = hn::Add(a1, hn::LoadU(d, p + q + i));
    a2 = hn::Add(a2, hn::LoadU(d, p + 2 * q + i));
    a3 = hn::Add(a3, hn::LoadU(d, p + 3 * q + i));
  }
  float s = hn::GetLane(hn::SumOfLanes(d, hn::Add(hn::Add(a0, a1), hn::Add(a2, a3))));
  for (int64_t i = 4 * q; i < n; ++i) s += p[i];
  return s;
}

}  // namespace HWY_NAMESPACE
}  // namespace molt
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace molt {
HWY_EXPORT(SumStreams);

namespace {

struct FreeDeleter {
  void operator()(float* p) const { std::free(p); }
};
using Buffer = std::unique_ptr<float[], FreeDeleter>;

Buffer allocate(size_t n, const char* op) {
  // 2 MiB alignment lets the kernel back the arrays with huge pages.
  const size_t bytes = (n * sizeof(float) + (size_t{2} << 20) - 1) & ~((size_t{2} << 20) - 1);
  auto* p = static_cast<float*>(std::aligned_alloc(size_t{2} << 20, bytes));
  if (p == nullptr) fail("{}: cannot allocate {} MiB", op, bytes >> 20);
  return Buffer(p);
}

void check_args(size_t mib, int repeats, const char* op) {
  if (mib == 0) fail("{}: array size must be at least 1 MiB", op);
  if (mib > (size_t{1} << 20)) fail("{}: array size {} MiB is too large", op, mib);
  if (repeats < 1) fail("{}: repeats {} must be at least 1", op, repeats);
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

struct TriadProbe::Arrays {
  int64_t n = 0;
  Buffer a, b, c;
};

TriadProbe::TriadProbe(size_t mib) : arrays_(std::make_unique<Arrays>()) {
  check_args(mib, 1, "bandwidth triad");
  Arrays& t = *arrays_;
  t.n = static_cast<int64_t>(mib * (size_t{1} << 20) / sizeof(float));
  t.a = allocate(t.n, "bandwidth triad");
  t.b = allocate(t.n, "bandwidth triad");
  t.c = allocate(t.n, "bandwidth triad");
  float* pa = t.a.get();
  float* pb = t.b.get();
  float* pc = t.c.get();
  const int64_t n = t.n;
  // First touch with the same static split as the timed loop: pages land near their thread.
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    pa[i] = 0.0f;
    pb[i] = 1.0f;
    pc[i] = 2.0f;
  }
}

TriadProbe::~TriadProbe() = default;

double TriadProbe::pass() {
  float* pa = arrays_->a.get();
  const float* pb = arrays_->b.get();
  const float* pc = arrays_->c.get();
  const int64_t n = arrays_->n;
  const float s = 3.0f;
  const auto t0 = std::chrono::steady_clock::now();
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) pa[i] = pb[i] + s * pc[i];
  const double t = seconds_since(t0);
  if (pa[n / 2] != 7.0f) fail("bandwidth triad: wrong result {} (expected 7)", pa[n / 2]);
  return t;
}

double TriadProbe::bytes_per_pass() const {
  return 3.0 * sizeof(float) * static_cast<double>(arrays_->n);
}

double measure_triad_bandwidth_gbs(size_t mib, int repeats) {
  check_args(mib, repeats, "bandwidth triad");
  TriadProbe probe(mib);
  double best = 1e30;
  for (int r = 0; r < repeats + 1; ++r) {  // the first run warms up and is not counted
    const double t = probe.pass();
    if (r > 0 && t < best) best = t;
  }
  return probe.bytes_per_pass() / best / 1e9;
}

double measure_read_bandwidth_gbs(size_t mib, int repeats) {
  check_args(mib, repeats, "bandwidth read");
  const auto n = static_cast<int64_t>(mib * (size_t{1} << 20) / sizeof(float));
  Buffer a = allocate(n, "bandwidth read");
  float* pa = a.get();
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) pa[i] = 1.0f;
  const auto sum_streams = HWY_DYNAMIC_DISPATCH(SumStreams);
  double best = 1e30;
  double total = 0.0;
  for (int r = 0; r < repeats + 1; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    float sum = 0.0f;
#pragma omp parallel reduction(+ : sum)
    {
      const int64_t nt = omp_get_num_threads(), t = omp_get_thread_num();
      const int64_t i0 = n * t / nt, i1 = n * (t + 1) / nt;
      sum += sum_streams(pa + i0, i1 - i0);
    }
    const double t = seconds_since(t0);
    total += sum;
    if (r > 0 && t < best) best = t;
  }
  if (total <= 0.0) fail("bandwidth read: wrong sum");
  return sizeof(float) * static_cast<double>(n) / best / 1e9;
}

}  // namespace molt
#endif  // HWY_ONCE
