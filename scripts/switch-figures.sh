#!/usr/bin/env bash
# Switch cost (DESIGN.md §6) of molt's carried cache against re-prefill, measured through the
# runtime's own migrate(): on the tiny ladder's routes and at the real Qwen2.5 1.5B → 0.5B
# geometry (synthetic bf16 weights, a k = 16 shape map: apply cost does not depend on the
# values). Writes docs/figures/switch/*.json* and docs/SWITCHING.md generated from them
# (`molt bench switch-report`; tests/cli/docs_trace_test.cc checks that they agree with each
# other and with the committed ladder). Each *.jsonl opens with the SHA-256 of every model and
# map file it was measured on; run.json records the commit, the machine, its load and the
# STREAM triad before and after. Wall times want a quiet machine; FLOPs and peaks do not.
# Knobs: THREADS (2), WORK (/tmp/molt-figures), CONTEXTS ("256 1024 2000"), REPEAT (3),
# MOLT (build/molt).
set -euo pipefail
# Committed figures and transcripts must reproduce on every machine: the f32 GEMM unless asked
# (CPUs with bf16 dot products would otherwise prefill with bf16 activations; kernels/linear.h).
export MOLT_GEMM=${MOLT_GEMM:-f32}
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"  # the JSON names files relative to the repository
molt="${MOLT:-$root/build/molt}"
THREADS="${THREADS:-2}"
WORK="${WORK:-/tmp/molt-figures}"
CONTEXTS="${CONTEXTS:-256 1024 2000}"
REPEAT="${REPEAT:-3}"
out="docs/figures/switch"
mkdir -p "$out" "$WORK"
[[ -x "$molt" ]] || { echo "switch-figures: build molt first (make build)" >&2; exit 1; }
load() { cut -d' ' -f1 /proc/loadavg; }

load_before="$(load)"
# The tree as measured, before this run rewrites its own outputs.
dirty=false
[[ -z "$(git status --porcelain 2>/dev/null)" ]] || dirty=true
bandwidth_before="$("$molt" bench bandwidth --json --threads "$THREADS")"

tiny="models/tiny-ladder/ladder.json"
rm -f "$out"/tiny-*.jsonl
# Routes with maps, as `molt ladder show` prints them ("  route l → m: maps ...").
for route in $("$molt" ladder show "$tiny" | sed -n 's/^  route \(.*\) → \(.*\): maps .*/\1:\2/p'); do
  from="${route%%:*}" to="${route##*:}"
  echo "tiny $from → $to" >&2
  "$molt" bench switch --ladder "$tiny" --from "$from" --to "$to" --contexts $CONTEXTS \
    --policies molt heal reprefill release-reprefill --repeat "$REPEAT" --threads "$THREADS" \
    --json > "$out/tiny-$from-$to.jsonl"
done

# The real geometry: 1.5B and 0.5B at bf16, written once into WORK.
real="$WORK/qwen2.5-1.5b-0.5b"
if [[ ! -f "$real/ladder.json" ]]; then
  mkdir -p "$real"
  "$molt" synth --geometry qwen2.5-1.5b --dtype bf16 --seed 1 --out "$real/1.5b" >&2
  "$molt" synth --geometry qwen2.5-0.5b --dtype bf16 --seed 2 --out "$real/0.5b" >&2
  cat > "$real/ladder.json" <<'JSON'
{"name": "qwen2.5-1.5b-0.5b-synthetic",
 "rungs": [{"name": "1.5b", "path": "1.5b", "precision": "bf16"},
           {"name": "0.5b", "path": "0.5b", "precision": "bf16"}],
 "routes": [{"from": "1.5b", "to": "0.5b", "maps": "maps/1.5b-0.5b"}]}
JSON
fi
echo "real 1.5b → 0.5b" >&2
"$molt" bench switch --ladder "$real/ladder.json" --from 1.5b --to 0.5b --contexts $CONTEXTS \
  --policies molt reprefill release-reprefill --repeat 1 --shape-map 16 --fill-sender \
  --threads "$THREADS" --json > "$out/real-1.5b-0.5b.jsonl"
"$molt" bench transfer --from "$real/1.5b" --to "$real/0.5b" --maps "$real/maps/1.5b-0.5b" \
  --context 1024 --threads "$THREADS" --repeat 3 --prefill-repeat 1 --json \
  > "$out/real-transfer-1024.json"

bandwidth_after="$("$molt" bench bandwidth --json --threads "$THREADS")"
cpu="$(grep -m1 "model name" /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//; s/["\\]//g' || true)"
cat > "$out/run.json" <<JSON
{"commit": "$(git rev-parse HEAD 2>/dev/null || echo unknown)", "dirty": $dirty,
 "machine": "$(uname -m)", "cpu": "${cpu:-unknown}", "nproc": $(nproc),
 "molt": "$("$molt" --version)", "threads": $THREADS,
 "load_before": $load_before, "load_after": $(load),
 "bandwidth_before": $bandwidth_before,
 "bandwidth_after": $bandwidth_after}
JSON
rm -f "$out/bandwidth.json" "$out/machine.txt" "$out/version.txt"  # now in run.json

"$molt" bench switch-report --in "$out" --out docs/SWITCHING.md
echo "switch-figures: wrote $root/docs/SWITCHING.md" >&2
