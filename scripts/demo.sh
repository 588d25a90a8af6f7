#!/usr/bin/env bash
# `make demo`: molt's main job — the bundled tiny ladder on the spike_mid_answer trace with the
# molt policy, then one line per condition (A hold, B small, C reprefill, D molt, heal, auto).
set -euo pipefail
cd "$(dirname "$0")/.."
build/molt demo
