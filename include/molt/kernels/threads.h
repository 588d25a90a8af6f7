// One thread count for every kernel (OpenMP) and for BLAS, so the two never oversubscribe.
#pragma once

namespace molt {

// n <= 0: OMP_NUM_THREADS where it is set to a positive count, else all cores.
void set_num_threads(int n);
int num_threads();

}  // namespace molt
