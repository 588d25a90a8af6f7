// A crash says where it happened. `molt serve` runs for hours under a moving budget; a bare
// "Segmentation fault" from a CI run or a user's terminal cannot be acted on, a stack can.
#pragma once

namespace molt::cli {

// On SIGSEGV, SIGBUS, SIGFPE, SIGILL or SIGABRT: writes "molt: fatal signal NAME …" and the
// stack (addresses, and symbols the binary exports) to stderr, then dies of the same signal, so
// the exit status is what it would have been. Not installed under a sanitizer, which reports
// better.
void install_crash_report();

}  // namespace molt::cli
