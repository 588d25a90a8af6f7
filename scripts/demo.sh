#!/usr/bin/env bash
# `make demo`: molt's main job on a bundled model. Until the elastic runtime lands this
# generates from a synthetic checkpoint at a small Qwen2 geometry.
set -euo pipefail
cd "$(dirname "$0")/.."
model=build/demo/synthetic-small
if [[ ! -f $model/config.json ]]; then
  build/molt synth --geometry qwen2.5-0.5b --layers 4 --hidden 256 --heads 4 --kv-heads 2 \
    --intermediate 512 --vocab 4096 --dtype bf16 --seed 1 --out "$model"
fi
build/molt generate --model "$model" --ids "1 2 3 4" --max-tokens 16 --seed 7
