// The sgemm figure prefill is compared with.
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <vector>

#include "molt/common/error.h"
#include "molt/kernels/bandwidth.h"

namespace molt {

double measure_sgemm_gflops(int64_t m, int64_t n, int64_t k, int repeats) {
  if (m <= 0 || n <= 0 || k <= 0 || repeats < 1) fail("sgemm: bad shape or repeat count");
  std::vector<float> a(static_cast<size_t>(m * k), 0.01f), b(static_cast<size_t>(n * k), 0.02f),
      c(static_cast<size_t>(m * n));
  double best = 1e30;
  for (int r = 0; r <= repeats; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(m), static_cast<int>(n),
                static_cast<int>(k), 1.0f, a.data(), static_cast<int>(k), b.data(),
                static_cast<int>(k), 0.0f, c.data(), static_cast<int>(n));
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (r > 0) best = std::min(best, s);
  }
  return 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k) / best /
         1e9;
}

}  // namespace molt
