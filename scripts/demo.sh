#!/usr/bin/env bash
# `make demo`: molt's main job — the bundled tiny ladder on the spike_mid_answer trace with the
# molt policy, then one line per condition (A hold, B small, C reprefill, D molt, heal, auto).
set -euo pipefail
# Committed figures and transcripts must reproduce on every machine: the f32 GEMM unless asked
# (CPUs with bf16 dot products would otherwise prefill with bf16 activations; kernels/linear.h).
export MOLT_GEMM=${MOLT_GEMM:-f32}
cd "$(dirname "$0")/.."
build/molt demo
