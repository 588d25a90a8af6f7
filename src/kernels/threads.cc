#include "molt/kernels/threads.h"

#include <cblas.h>
#include <omp.h>

#include <cstdlib>

namespace molt {

namespace {

// OpenMP's own knob: honoured where no count is given, so that a user (or a test run under
// emulation, where idle threads spinning at barriers cost a hundred times more) can set it.
int env_threads() {
  const char* s = std::getenv("OMP_NUM_THREADS");
  if (s == nullptr) return 0;
  char* end = nullptr;
  const long n = std::strtol(s, &end, 10);
  return end != s && *end == '\0' && n > 0 && n <= 4096 ? static_cast<int>(n) : 0;
}

}  // namespace

void set_num_threads(int n) {
  if (n <= 0) n = env_threads();
  if (n <= 0) n = omp_get_num_procs();
  omp_set_num_threads(n);
  // OpenBLAS (OpenMP flavour) shares the OpenMP runtime; pin it to the same count so a
  // GEMM never starts more threads than the kernels use.
  openblas_set_num_threads(n);
}

int num_threads() {
  return omp_get_max_threads();
}

}  // namespace molt
