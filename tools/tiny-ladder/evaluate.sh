#!/usr/bin/env bash
# Scores every rung of the tiny ladder with the C++ engine (`molt eval`) and writes
# models/tiny-ladder/eval.json (`molt bench eval-collect`: the runs, the commit, and the SHA-256
# of every committed file they read) and, from it, EVAL.md and the README blocks that quote it
# (`molt bench eval-report`; tests/cli/eval_trace_test.cc checks that they agree):
#   - NLL per token on the validation split (when tools/tiny-ladder/work has the corpus) and on
#     the committed test split, windows of 512 tokens;
#   - after a 256-token prefix: own cache vs token-identity cache vs zero cache (the proof that
#     the ladder uses context beyond token identity); the token-identity means are fitted on the
#     calibration text (work/calibration.txt, FLOOR_WINDOWS windows of 1,024 tokens, default 150,
#     as l → l-int8's map; the cross-size maps' floors use their own 300), never on the test windows;
#   - native needle accuracy (the rung reads the whole prompt) on data/needles.jsonl at every
#     context it holds, and the longest context up to which every one is at >= 0.8.
set -euo pipefail
# Committed figures and transcripts must reproduce on every machine: the f32 GEMM unless asked
# (CPUs with bf16 dot products would otherwise prefill with bf16 activations; kernels/linear.h).
export MOLT_GEMM=${MOLT_GEMM:-f32}
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
ladder="$root/models/tiny-ladder"
molt="${MOLT:-$root/build/molt}"
THREADS="${THREADS:-2}"
[[ -x "$molt" ]] || { echo "evaluate.sh: build molt first (make build)" >&2; exit 1; }
out="$here/work/eval"
mkdir -p "$out"
rm -f "$out"/*.json
# The tree as measured, before this run rewrites its own outputs.
dirty=false
[[ -z "$(git -C "$root" status --porcelain 2>/dev/null)" ]] || dirty=true
/usr/bin/python3 - "$out/run.json" "$(git -C "$root" rev-parse HEAD)" "$dirty" "$THREADS" <<'PY'
import datetime, json, platform, sys
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")),
           platform.processor())
json.dump({"commit": sys.argv[2], "dirty": sys.argv[3] == "true",
           "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%MZ"),
           "machine": f"{platform.system()} {platform.release()} {platform.machine()}, {cpu}",
           "threads": int(sys.argv[4])}, open(sys.argv[1], "w"))
PY
val="$here/work/validation.txt"
if [[ -f "$here/work/corpus/validation.jsonl" && ! -s "$val" ]]; then
  /usr/bin/python3 - "$here/work/corpus/validation.jsonl" "$val" <<'PY'
import json, sys
docs = [json.loads(l)["text"] for l in open(sys.argv[1], encoding="utf-8")]
open(sys.argv[2], "w", encoding="utf-8").write("\n\n".join(docs) + "\n")
PY
fi
calib="$here/work/calibration.txt"
if [[ ! -s "$calib" ]]; then
  [[ -f "$here/work/corpus/train.jsonl" ]] || {
    echo "evaluate.sh: the token-identity floor needs the calibration text: run the corpus step of" \
      "tools/tiny-ladder/build.sh (corpus.py) first" >&2
    exit 1
  }
  /usr/bin/python3 - "$here/work/corpus/train.jsonl" "$calib" <<'PY'
import json, sys
with open(sys.argv[2], "w", encoding="utf-8") as out:
    for line in open(sys.argv[1], encoding="utf-8"):
        out.write(json.loads(line)["text"] + "\n\n")
PY
fi
rungs=$(/usr/bin/python3 -c "import json; print(' '.join(r['path'] for r in json.load(open('$ladder/ladder.json'))['rungs']))")
contexts=$(/usr/bin/python3 -c "
import json; print(' '.join(str(c) for c in sorted({json.loads(l)['context'] for l in open('$ladder/data/needles.jsonl')})))")
for r in $rungs; do
  echo "evaluate $r" >&2
  "$molt" eval nll --model "$ladder/$r" --text-file "$ladder/data/test.txt" --context 512 \
    --prefix 256 --floor-corpus "$calib" --floor-windows "${FLOOR_WINDOWS:-150}" \
    --threads "$THREADS" --json > "$out/$r.test.json"
  if [[ -s "$val" ]]; then
    "$molt" eval nll --model "$ladder/$r" --text-file "$val" --context 512 --threads "$THREADS" \
      --json > "$out/$r.validation.json"
  fi
  for c in $contexts; do
    "$molt" eval needle --model "$ladder/$r" --needles "$ladder/data/needles.jsonl" --context "$c" \
      --count 30 --threads "$THREADS" --json > "$out/$r.needle-$c.json"
  done
done
"$molt" bench eval-collect --runs "$out" --ladder "$ladder/ladder.json" \
  --training "$here/work/runs" --out "$ladder/eval.json"
"$molt" bench eval-report --in "$ladder/eval.json" --out "$ladder/EVAL.md" \
  --fill "$root/README.md" --fill "$ladder/README.md"
echo "evaluate: wrote $ladder/eval.json, EVAL.md and the README blocks that quote them" >&2
