#include "molt/kernels/threads.h"

#include <cblas.h>
#include <omp.h>

namespace molt {

void set_num_threads(int n) {
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
