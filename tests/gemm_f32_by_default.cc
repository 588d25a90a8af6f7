// Linked into every test binary: the tests run the f32 GEMM unless MOLT_GEMM says otherwise.
// Their references (golden logits, committed transcripts and figures) are f32 and must hold on
// every machine, with or without bf16 dot products; the bf16 path has its own tests, which set
// the precision themselves (tests/kernels/gemm_bf16_test.cc, tests/model/bf16_prefill_test.cc).
// Set here, before main, so that the molt processes the CLI tests start inherit it too.
#include <cstdlib>

namespace {
[[maybe_unused]] const bool kPinned = setenv("MOLT_GEMM", "f32", /*overwrite=*/0) == 0;
}  // namespace
