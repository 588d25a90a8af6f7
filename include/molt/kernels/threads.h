// One thread count for every kernel (OpenMP) and for BLAS, so the two never oversubscribe.
#pragma once

namespace molt {

void set_num_threads(int n);  // n <= 0: all cores
int num_threads();

}  // namespace molt
