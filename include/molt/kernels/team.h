// A decode step's threads held in one OpenMP region from its first kernel to its last.
//
// A decode token is ~120 short parallel kernel calls at 0.5B (q/k/v, attention, o, gate/up,
// down per layer; the LM head). Each `#pragma omp parallel` costs libgomp a fork and a join:
// 2.6 us on a 2-core Zen 5 (its barrier alone 1.4 us), against 0.04 us for a barrier on one
// atomic counter, and a 0.5B 4-bit token is ~7 ms. run_as_team opens the region once: the
// calling thread runs the step, and each parallel part of it (team_parallel) is handed to the
// other threads, which wait spinning on one counter between parts. Outside a step,
// team_parallel is an ordinary parallel region, so the kernels are the same code either way.
#pragma once

#include <type_traits>

namespace molt {

// Runs step(ctx) on the calling thread with the kernel threads held as a team for all of it.
// Where there is one thread, or the caller is already inside a parallel region or a step, it
// runs as it is. An exception from step leaves the region and reaches the caller.
void team_step(void (*step)(void*), void* ctx);

namespace team_detail {
// A callable as a function pointer and its argument: no std::function, so nothing is allocated
// (a decode step must not allocate).
template <class Fn>
void call(void* f) {
  (*static_cast<Fn*>(f))();
}
template <class Fn>
void* context(Fn& f) {
  return const_cast<void*>(static_cast<const void*>(&f));
}
}  // namespace team_detail

// team_step of a callable: run_as_team([&] { ... the step ... }).
template <class F>
void run_as_team(F&& step) {
  using Fn = std::remove_reference_t<F>;
  team_step(&team_detail::call<Fn>, team_detail::context(step));
}

// Runs fn(ctx) once on every thread of the running step's team, or of a new parallel region
// when no step is running on this thread, and returns when all are done. Inside fn,
// omp_get_thread_num() and omp_get_num_threads() give the thread's share, as in any region, and
// fn must not throw. Worksharing (`omp for`) inside fn binds to the team's region.
void team_parallel(void (*fn)(void*), void* ctx);

// team_parallel of a callable: parallel([&] { ... this thread's share ... }).
template <class F>
void parallel(F&& f) {
  using Fn = std::remove_reference_t<F>;
  team_parallel(&team_detail::call<Fn>, team_detail::context(f));
}

// Whether the calling thread is running a step as a team (for tests).
bool in_team();

}  // namespace molt
