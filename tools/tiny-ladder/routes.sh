#!/usr/bin/env bash
# Fits and evaluates the tiny ladder's KV maps (DESIGN.md §3, §6) with the C++ CLI:
#   maps/<from>-<to>/   shipped maps for l → m, m → s, l → s (ridge; the receiver's first layer
#                       run natively over the context, its output the token features; k and
#                       the feature count chosen by held-out prefix NLL; boundary maps for
#                       recompute r = 1, 2), each with its
#                       token-identity floor (floor.safetensors: the receiver's mean K/V per
#                       token id over the calibration windows, never the evaluation text)
#   maps/ablations/     what the shipped maps are compared with, solved from the same
#                       statistics: <from>-<to>-ridge, the ridge map without token features
#                       or native layers (the reference), and <from>-<to>-depth, the depth
#                       remap (k = 1, the proportional sender layer); from the same windows
#                       with statistics of their own: <from>-<to>-embed, the ridge map with the
#                       receiver's embeddings as token features and no native layer (what
#                       shipped before), <from>-<to>-rope, a ridge map on keys as cached (no RoPE
#                       sandwich), and l-l-int8-cross, a cross-size ridge map in place of the
#                       diagonal re-alignment; committed, never a route
#   maps/eval/          per route: `molt transfer eval` at a 768-token prefix (map, map +
#                       recompute r = 1, 2, + anchors, depth remap, zero / token-identity
#                       floors), `molt transfer needle` at ~700 and ~2,000 tokens and, on
#                       the cross-size routes, `molt transfer heal` (the question h tokens
#                       after the switch) at the same contexts
# then writes ladder.json's routes (`molt bench transfer-routes`) and TRANSFER.md from the JSON
# and the maps alone (`molt bench transfer-report`; tests/cli/transfer_trace_test.cc checks it).
# Needs the training corpus (tools/tiny-ladder/work/corpus, made by build.sh) for
# calibration; evaluation reads only the committed held-out split.
# Knobs: SEQUENCES (calibration windows, default 300), THREADS (2), ROUTES ("l:m m:s l:s"),
# MOLT (the binary, build/molt), FLOORS_ONLY=1 (keep the shipped maps and int8 rung byte for
# byte: fit only their floors with `molt fit floor` on the maps' own calibration windows, then
# re-run the evaluations that show the floors), ABLATIONS_ONLY=1 (keep every shipped file: fit
# the comparison maps into maps/ablations and re-run only their evaluations), REPORT_ROUTES
# (the routes ladder.json and TRANSFER.md list; default ROUTES), REUSE_STATS=1 (solve again
# from the calibration statistics an earlier run kept, after a change to the solver or the
# map format; they record the corpus and settings they were collected with), HEAL_ONLY=1 (keep
# every map and run: re-run only `molt transfer heal`), NEW_ABLATIONS_ONLY=1 (with ABLATIONS_ONLY=1:
# fit only maps/ablations/<route>-rope, the RoPE sandwich's ablation, and l-l-int8-cross, the
# diagonal re-alignment's), ROPE_ABLATION=0 (keep the committed maps/ablations/<route>-rope:
# they read no token feature or native layer, so a change to those leaves them as they are).
set -euo pipefail
# Committed figures and transcripts must reproduce on every machine: the f32 GEMM unless asked
# (CPUs with bf16 dot products would otherwise prefill with bf16 activations; kernels/linear.h).
export MOLT_GEMM=${MOLT_GEMM:-f32}
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
ladder="$root/models/tiny-ladder"
work="$here/work"
molt="${MOLT:-$root/build/molt}"
py=/usr/bin/python3
SEQUENCES="${SEQUENCES:-300}"
THREADS="${THREADS:-2}"
ROUTES="${ROUTES:-l:l-int8 l:m m:s l:s}"
FLOORS_ONLY="${FLOORS_ONLY:-0}"
ABLATIONS_ONLY="${ABLATIONS_ONLY:-0}"
REPORT_ROUTES="${REPORT_ROUTES:-$ROUTES}"  # the routes ladder.json and TRANSFER.md list
REUSE_STATS="${REUSE_STATS:-0}"  # 1: re-solve from the statistics kept in work/maps/<route>-stats
HEAL_ONLY="${HEAL_ONLY:-0}"
NEW_ABLATIONS_ONLY="${NEW_ABLATIONS_ONLY:-0}"  # with ABLATIONS_ONLY=1: only the RoPE and cross maps
ROPE_ABLATION="${ROPE_ABLATION:-1}"  # 0: keep the committed RoPE-sandwich ablation maps

[[ -x "$molt" ]] || { echo "routes.sh: build molt first (make build)" >&2; exit 1; }
# Calibration text (the training corpus) for everything but HEAL_ONLY, which reads only the
# committed maps and held-out files.
[[ "$HEAL_ONLY" == 1 || -f "$work/corpus/train.jsonl" ]] || {
  echo "routes.sh: $work/corpus/train.jsonl missing; run tools/tiny-ladder/build.sh first" >&2
  exit 1
}
calib="$work/calibration.txt"
if [[ "$HEAL_ONLY" != 1 && ! -s "$calib" ]]; then
  "$py" - "$work/corpus/train.jsonl" "$calib" <<'PY'
import json, sys
with open(sys.argv[2], "w", encoding="utf-8") as out:
    for line in open(sys.argv[1], encoding="utf-8"):
        out.write(json.loads(line)["text"] + "\n\n")
PY
fi
mkdir -p "$ladder/maps/eval" "$ladder/maps/ablations" "$work/maps"

# The precision rung: l at int8 (per output channel), the route from l re-aligned diagonally.
if [[ " $ROUTES " == *" l:l-int8 "* && "$FLOORS_ONLY" != 1 && "$ABLATIONS_ONLY" != 1 &&
      "$HEAL_ONLY" != 1 ]]; then
  rm -rf "$ladder/l-int8"
  "$molt" quantize --model "$ladder/l" --out "$ladder/l-int8" --int8 --group-size 0 >&2
  "$py" - "$ladder/ladder.json" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
if not any(r["name"] == "l-int8" for r in m["rungs"]):
    i = next(i for i, r in enumerate(m["rungs"]) if r["name"] == "l")
    m["rungs"].insert(i + 1, {"name": "l-int8", "path": "l-int8", "precision": "int8"})
json.dump(m, open(sys.argv[1], "w"), indent=2)
PY
fi
test_txt="$ladder/data/test.txt"
needles="$ladder/data/needles.jsonl"

for route in $ROUTES; do
  from="${route%%:*}" to="${route##*:}" name="${route/:/-}"
  echo "== $from → $to" >&2
  # Same model at another precision: per-channel diagonal re-alignment, no depth choice, no
  # recompute or anchors to compare.
  eval_extra=(--recompute-layers 1,2 --anchors 16) needle_extra=(--recompute-layers 2)
  [[ "$to" == "$from-int8" ]] && eval_extra=() needle_extra=()
  # The comparisons, fitted on the same calibration windows as the shipped map (one set of
  # statistics) and evaluated without floors: the ridge map without token features (the
  # reference) and the depth remap.
  ablations() {
    local stats="$work/maps/$name-stats"
    "$molt" fit merge "$stats" --embed-tokens 0 --native-layers 0 --no-floor \
      --out "$ladder/maps/ablations/$name-ridge" >&2
    "$molt" fit merge "$stats" --method depth-remap --no-floor --out "$ladder/maps/ablations/$name-depth" >&2
    embed_ablation
    for kind in ridge:reference-ridge depth:depth-remap embed:embedding-features; do
      "$molt" transfer eval --from "$ladder/$from" --to "$ladder/$to" \
        --maps "$ladder/maps/ablations/$name-${kind%%:*}" --text-file "$test_txt" --prefix 768 \
        --continuation 256 --windows 16 --no-floors --threads "$THREADS" --json \
        > "$ladder/maps/eval/$name.${kind##*:}.json"
    done
    [[ "$ROPE_ABLATION" == 0 ]] || rope_ablation
  }
  # What the native layer buys: the route's ridge map with the receiver's embeddings as token
  # features (k and their count chosen by held-out prefix NLL), no native layer.
  embed_ablation() {
    "$molt" fit --from "$ladder/$from" --to "$ladder/$to" --corpus "$calib" --k auto \
      --embed-tokens auto --native-layers 0 --no-floor --sequences "$SEQUENCES" --seq-len 1024 \
      --threads "$THREADS" --out "$ladder/maps/ablations/$name-embed" >&2
  }
  # The RoPE sandwich's ablation: a ridge map (no token features, k chosen by held-out prefix
  # NLL, as the reference's) fitted and applied on keys as cached, after RoPE. Its own statistics (rotated keys), on
  # the same calibration text and windows; `molt bench run` evaluates it.
  rope_ablation() {
    "$molt" fit --from "$ladder/$from" --to "$ladder/$to" --corpus "$calib" --k auto \
      --embed-tokens 0 --no-rope-sandwich --no-floor --sequences "$SEQUENCES" --seq-len 1024 \
      --threads "$THREADS" --out "$ladder/maps/ablations/$name-rope" >&2
  }
  # The diagonal re-alignment's ablation on a precision route: the cross-size ridge map (no
  # token features, k chosen by held-out prefix NLL) between the same model at two precisions.
  cross_ablation() {
    "$molt" fit --from "$ladder/$from" --to "$ladder/$to" --corpus "$calib" --k auto \
      --embed-tokens 0 --no-floor --sequences "$SEQUENCES" --seq-len 1024 \
      --threads "$THREADS" --out "$ladder/maps/ablations/$name-cross" >&2
  }
  # The calibration statistics of a ridge route, kept in the work folder (they re-solve the
  # shipped map and its comparisons).
  route_stats() {
    /usr/bin/time -v "$molt" fit --from "$ladder/$from" --to "$ladder/$to" --corpus "$calib" \
      --k auto --embed-tokens auto --native-layers 1 --sequences "$SEQUENCES" --seq-len 1024 \
      --recompute-layers 2 \
      --keep-stats --threads "$THREADS" --out "$work/maps/$name-stats" 2>&1 |
      tee "$work/maps/fit-$name.log" >&2
  }
  # Heal, measured: the question h tokens after the switch, beside the map alone.
  heal_runs() {
    [[ "$to" == "$from-int8" ]] && return 0
    for ctx in 700 2048; do
      "$molt" transfer heal --from "$ladder/$from" --to "$ladder/$to" --maps "$ladder/maps/$name" \
        --needles "$needles" --filler "$test_txt" --context "$ctx" --count 30 \
        --after 0,8,32,128,512 --chunk 64 --cost-chunks 16,64,256,1024 --cost-needles 5 \
        --threads "$THREADS" --json > "$ladder/maps/eval/$name.heal-$ctx.json"
    done
  }
  if [[ "$HEAL_ONLY" == 1 ]]; then
    heal_runs
    continue
  elif [[ "$ABLATIONS_ONLY" == 1 ]]; then
    if [[ "$to" == "$from-int8" ]]; then
      cross_ablation
    elif [[ "$NEW_ABLATIONS_ONLY" == 1 ]]; then
      rope_ablation
    else
      [[ -f "$work/maps/$name-stats/stats-1-of-1.molt-stats" ]] || route_stats
      ablations
    fi
    continue
  elif [[ "$FLOORS_ONLY" == 1 ]]; then
    "$molt" fit floor "$ladder/maps/$name" --to "$ladder/$to" --corpus "$calib" \
      --threads "$THREADS" >&2
  elif [[ "$to" == "$from-int8" ]]; then
    /usr/bin/time -v "$molt" fit --from "$ladder/$from" --to "$ladder/$to" --corpus "$calib" \
      --method diagonal --sequences "$SEQUENCES" --seq-len 1024 --threads "$THREADS" \
      --out "$ladder/maps/$name" 2>&1 | tee "$work/maps/fit-$name.log" >&2
    echo '{"conditions": []}' > "$ladder/maps/eval/$name.depth-remap.json"
    echo '{"conditions": []}' > "$ladder/maps/eval/$name.reference-ridge.json"
    cross_ablation
  else
    if [[ "$REUSE_STATS" != 1 || ! -f "$work/maps/$name-stats/stats-1-of-1.molt-stats" ]]; then
      route_stats
    fi
    "$molt" fit merge "$work/maps/$name-stats" --out "$ladder/maps/$name" >&2
    ablations
  fi
  # The floors' means come from the map directory's floor.safetensors (calibration text).
  "$molt" transfer eval --from "$ladder/$from" --to "$ladder/$to" --maps "$ladder/maps/$name" \
    --text-file "$test_txt" --prefix 768 --continuation 256 --windows 16 "${eval_extra[@]}" \
    --threads "$THREADS" --json > "$ladder/maps/eval/$name.transfer.json"
  for ctx in 700 2048; do
    "$molt" transfer needle --from "$ladder/$from" --to "$ladder/$to" --maps "$ladder/maps/$name" \
      --needles "$needles" --context "$ctx" --count 30 "${needle_extra[@]}" \
      --threads "$THREADS" --json > "$ladder/maps/eval/$name.needle-$ctx.json"
  done
  heal_runs
done

"$molt" bench transfer-routes --ladder "$ladder" --routes "$REPORT_ROUTES"
"$molt" bench transfer-report --ladder "$ladder" --routes "$REPORT_ROUTES" --out "$ladder/TRANSFER.md"
echo "routes: done -> $ladder/maps, $ladder/ladder.json, $ladder/TRANSFER.md" >&2
