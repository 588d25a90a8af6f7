#!/usr/bin/env bash
# Switch cost (DESIGN.md §6) of molt's carried cache against re-prefill, measured through the
# runtime's own migrate(): on the tiny ladder's routes and at the real Qwen2.5 1.5B → 0.5B
# geometry (synthetic bf16 weights, a k = 16 shape map: apply cost does not depend on the
# values). Writes docs/figures/switch/*.json and docs/SWITCHING.md generated from them.
# Run on a quiet machine: it measures wall time. Knobs: THREADS (2), WORK (/tmp/molt-figures),
# CONTEXTS ("256 1024 2000"), REPEAT (3).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
molt="$root/build/molt"
THREADS="${THREADS:-2}"
WORK="${WORK:-/tmp/molt-figures}"
CONTEXTS="${CONTEXTS:-256 1024 2000}"
REPEAT="${REPEAT:-3}"
out="$root/docs/figures/switch"
mkdir -p "$out" "$WORK"
[[ -x "$molt" ]] || { echo "switch-figures: build molt first (make build)" >&2; exit 1; }

tiny="$root/models/tiny-ladder/ladder.json"
for route in $(/usr/bin/python3 -c "
import json; m = json.load(open('$tiny'))
print(' '.join(r['from'] + ':' + r['to'] for r in m['routes'] if 'maps' in r))"); do
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
"$molt" bench bandwidth --json > "$out/bandwidth.json"
"$molt" --version > "$out/version.txt"
uname -m > "$out/machine.txt"
grep -m1 "model name" /proc/cpuinfo | cut -d: -f2- >> "$out/machine.txt" || true

/usr/bin/python3 "$root/scripts/switch_report.py" "$out" "$root/docs/SWITCHING.md"
echo "switch-figures: wrote $root/docs/SWITCHING.md" >&2
