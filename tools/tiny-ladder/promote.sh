#!/usr/bin/env bash
# Puts the rungs trained in tools/tiny-ladder/work/runs onto the ladder and regenerates every
# committed page measured on them, in the order they depend on each other, each step on a clean
# tree and committed before the next (the pages record the commit they were measured at):
#   1 export    export.py (rungs, logits fixtures, ladder.json), recipe.json gains the runs'
#               sittings (sittings.py), plot.py (curves/, training_curves.svg)
#   2 routes    routes.sh: l-int8 from the new l, every map refitted, TRANSFER.md, ladder.json routes
#   3 eval      evaluate.sh: eval.json, EVAL.md and the README blocks quoting it
#   4 switch    scripts/switch-figures.sh: docs/figures/switch, docs/SWITCHING.md
#   5 results   molt bench run --out docs/results (the full run)
#   6 perf      scripts/performance.sh: docs/figures/performance, docs/PERFORMANCE.md
#   7 demo      the README's `make demo` transcript from `molt demo`
#   8 test      the whole suite (ctest --preset release)
# About 2 hours on 2 cores, most of it steps 2 and 5; wants a quiet machine for the wall-clock
# figures (4, 5, 6). Resumable: a step that committed is recorded in work/promote/ and skipped
# when the script runs again, so an interrupted run goes on where it stopped.
#   tools/tiny-ladder/promote.sh                 every step not yet done
#   STEPS="routes eval" tools/tiny-ladder/promote.sh    only these (done or not)
# Before: `make build`; each rung in work/runs/SIZE/ with ckpt.pt, state.json and log.csv
# (train.py's, or import_ckpt.py --handover handover for a rung handed over by an earlier
# session). The models/tiny-ladder/README.md training paragraph is prose: update it by hand.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
work="$here/work"
py=/usr/bin/python3
molt="$root/build/molt"
SIZES="l m s"
ALL="export routes eval switch results perf demo test"
done_dir="$work/promote"
mkdir -p "$done_dir"
cd "$root"

[[ -x "$molt" ]] || { echo "promote: build molt first (make build)" >&2; exit 1; }
for size in $SIZES; do
  for f in ckpt.pt state.json log.csv; do
    [[ -f "$work/runs/$size/$f" ]] || {
      echo "promote: $work/runs/$size/$f missing (train.py, or import_ckpt.py --handover)" >&2
      exit 1
    }
  done
done

clean() {
  [[ -z "$(git status --porcelain)" ]] || {
    echo "promote: the tree has uncommitted changes before step '$1'; commit or stash them:" >&2
    git status --short >&2
    exit 1
  }
}
commit() {  # step, message: commit what the step changed (nothing changed is not an error)
  git add -A models/tiny-ladder docs README.md tools/tiny-ladder/recipe.json
  if git diff --cached --quiet; then
    echo "promote: step '$1' changed nothing"
  else
    git commit -q -m "$2"
  fi
  git rev-parse HEAD > "$done_dir/$1"
}

step_export() {
  "$py" "$here/export.py" --work "$work" --out models/tiny-ladder --sizes "$(echo "$SIZES" | tr ' ' ',')"
  local what=""
  for size in $SIZES; do
    # A rung trained further than the recipe says gains its sittings; one already there is left.
    "$py" "$here/sittings.py" --size "$size" --state "$work/runs/$size/state.json" --append
    local tokens
    tokens=$("$py" -c "import json,sys; print(json.load(open(sys.argv[1]))['tokens'])" \
      "$work/runs/$size/state.json")
    what+="${what:+, }$size at $tokens tokens"
  done
  "$py" "$here/plot.py" --work "$work" --out models/tiny-ladder
  # Rungs handed over by an earlier session are on the ladder now.
  if [[ -n "$(git ls-files tools/tiny-ladder/handover)" ]]; then
    git rm -rq tools/tiny-ladder/handover
  fi
  commit export "Tiny ladder: rungs from tools/tiny-ladder/work/runs ($what); recipe.json gains their sittings, curves re-plotted (promote.sh step 1: maps and pages follow)"
}
step_routes() {
  "$here/routes.sh"
  commit routes "Tiny ladder: maps refitted on the new rungs, TRANSFER.md and ladder.json routes regenerated (promote.sh step 2: routes.sh)"
}
step_eval() {
  "$here/evaluate.sh"
  commit eval "Tiny ladder: eval.json, EVAL.md and the README blocks re-measured on the new rungs (promote.sh step 3: evaluate.sh)"
}
step_switch() {
  scripts/switch-figures.sh
  commit switch "docs/SWITCHING.md re-measured on the new rungs (promote.sh step 4: scripts/switch-figures.sh)"
}
step_results() {
  MOLT_GEMM=f32 "$molt" bench run --out docs/results
  commit results "docs/results: molt bench run on the new rungs (promote.sh step 5)"
}
step_perf() {
  cmake --build --preset release --target molt_quant_bench molt_kernels_bench
  scripts/performance.sh
  commit perf "docs/PERFORMANCE.md re-measured (its NLL rows read the new rungs; promote.sh step 6: scripts/performance.sh)"
}
step_demo() {
  local out
  out="$(mktemp)"
  OMP_NUM_THREADS=2 MOLT_GEMM=f32 "$molt" demo > "$out"
  # The transcript is the first ```text block under the heading; tests/cli/readme_demo_test.cc
  # compares it with what molt demo prints.
  "$py" - README.md "$out" <<'PY'
import sys
path, transcript = sys.argv[1], open(sys.argv[2], encoding="utf-8").read()
text = open(path, encoding="utf-8").read()
head = text.index("## What `make demo` shows")
start = text.index("```text\n", head) + len("```text\n")
end = text.index("```\n", start)
open(path, "w", encoding="utf-8").write(text[:start] + transcript.rstrip("\n") + "\n" + text[end:])
PY
  rm -f "$out"
  commit demo "README: the make demo transcript from molt demo on the new rungs (promote.sh step 7)"
}
step_test() {
  ctest --preset release -j "$(nproc)"
  git rev-parse HEAD > "$done_dir/test"
}

steps="${STEPS:-$ALL}"
for step in $steps; do
  [[ " $ALL " == *" $step "* ]] || { echo "promote: unknown step '$step' ($ALL)" >&2; exit 2; }
  if [[ -z "${STEPS:-}" && -f "$done_dir/$step" ]]; then
    echo "promote: $step done at $(cat "$done_dir/$step"), skipped"
    continue
  fi
  [[ "$step" == test ]] || clean "$step"
  echo "promote: $step ($(date -u +%H:%M:%S))"
  "step_$step"
done
echo "promote: done ($(date -u +%H:%M:%S)); now update the training paragraph of models/tiny-ladder/README.md"
