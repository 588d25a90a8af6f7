#!/usr/bin/env bash
# Measures decode and prefill speed for every precision at the Qwen2.5-0.5B and 1.5B
# geometries, the memory bandwidth and sgemm peak of this same run, the quantised kernels'
# microbenchmarks and the tiny ladder's held-out NLL per precision. Writes the raw figures into
# the committed folder docs/figures/performance/ and docs/PERFORMANCE.md generated from them
# (`molt bench perf-report`; tests/cli/performance_trace_test.cc checks that the page, the JSON
# and the committed tiny ladder agree).
#
#   scripts/performance.sh    # full run (~10 minutes on 2 cores); wants a quiet machine
#   QUICK=1 OUT=/tmp/perf-quick DOC=/tmp/perf-quick/PERFORMANCE.md scripts/performance.sh
#        # fewer decode steps, no microbenchmarks, somewhere other than the committed folder
#   PAUSE='train.py --size' scripts/performance.sh
#        # SIGSTOPs processes matching PAUSE around each timed measurement (and always
#        # SIGCONTs them after, also on failure), so a shared machine's background jobs
#        # do not disturb the figures.
#
# What it writes into OUT: run.json (commit, dirty tree, date, machine, CPU and flags, cores,
# threads, OpenMP wait setting, load average and a standalone STREAM triad at the start and end,
# how each checkpoint was made, the SHA-256 of the tiny ladder files the NLL rows read),
# sgemm.json, decode.jsonl (one `molt bench decode --json` per checkpoint, which records the
# SHA-256 of the files it loaded, each bracketed by a standalone triad just before and after it),
# nll.jsonl and, unless QUICK, the microbenchmarks (only the fields the page shows).
#
# Environment: MOLT (binary, build/molt), OUT (figures, docs/figures/performance), DOC
# (docs/PERFORMANCE.md), CKPT (folder of synthetic checkpoints, /tmp: <CKPT>/q0.5b-f32 ... are
# made with molt synth, and <CKPT>/q0.5b-q4 ... with molt quantize, when absent), WORK (scratch:
# tiny quantised checkpoints, raw benchmark output; /tmp/molt-performance), GEOMETRIES
# ("0.5b 1.5b"), THREADS (2), BENCH (microbenchmark binaries, next to MOLT). OMP_WAIT_POLICY
# and GOMP_SPINCOUNT are passed through (molt runs with GOMP_SPINCOUNT=10000 unless one is set)
# and recorded. Needs jq.
set -euo pipefail
cd "$(dirname "$0")/.."  # the JSON names committed files relative to the repository
MOLT=${MOLT:-build/molt}
OUT=${OUT:-docs/figures/performance}
DOC=${DOC:-docs/PERFORMANCE.md}
CKPT=${CKPT:-/tmp}
WORK=${WORK:-/tmp/molt-performance}
GEOMETRIES=${GEOMETRIES:-0.5b 1.5b}
THREADS=${THREADS:-2}
QUICK=${QUICK:-0}
PAUSE=${PAUSE:-}
TOKENS=60
WAIT="GOMP_SPINCOUNT=10000 (molt default)"
[[ -n "${GOMP_SPINCOUNT:-}" ]] && WAIT="GOMP_SPINCOUNT=$GOMP_SPINCOUNT"
[[ -n "${OMP_WAIT_POLICY:-}" ]] && WAIT="OMP_WAIT_POLICY=$OMP_WAIT_POLICY"
[[ "$QUICK" == 1 ]] && TOKENS=20

resume() { [[ -n "$PAUSE" ]] && pkill -CONT -f "$PAUSE" || true; }
trap resume EXIT INT TERM
# timed CMD...: runs CMD with the background paused.
timed() {
  [[ -n "$PAUSE" ]] && { pkill -STOP -f "$PAUSE" || true; sleep 1; }
  local rc=0
  "$@" || rc=$?
  resume
  return $rc
}

[[ -x "$MOLT" ]] || { echo "performance.sh: $MOLT is missing; run make build" >&2; exit 1; }
BENCH=${BENCH:-$(dirname "$MOLT")/bench}
if [[ "$QUICK" != 1 && ! (-x "$BENCH/molt_quant_bench" && -x "$BENCH/molt_kernels_bench") ]]; then
  echo "performance.sh: a full run needs $BENCH/molt_{quant,kernels}_bench (cmake --build build" \
    "--target molt_quant_bench molt_kernels_bench), or QUICK=1" >&2
  exit 1
fi
command -v jq >/dev/null || { echo "performance.sh: needs jq (install-deps.sh)" >&2; exit 1; }
mkdir -p "$OUT" "$WORK" "$(dirname "$DOC")"
# The tree as measured: before this run rewrites its own outputs.
dirty=false
[[ -z "$(git status --porcelain 2>/dev/null)" ]] || dirty=true
date=$(date -u +%Y-%m-%dT%H:%MZ)
rm -f "$OUT"/run.json "$OUT"/sgemm.json "$OUT"/decode.jsonl "$OUT"/nll.jsonl \
  "$OUT"/quant_bench.json "$OUT"/quant_hot.json "$OUT"/kernels_bench.json \
  "$OUT"/decode_matvecs.json

# How each checkpoint is made when absent (bench decode records the SHA-256 of what it loads).
checkpoints='{}'
made() {  # name geometry dtype-or-source made_by [seed]
  checkpoints=$(jq -c --arg n "$1" --arg g "$2" --arg d "$3" --arg by "$4" --arg seed "${5:-}" \
    '. + {($n): ({geometry: $g, made_by: $by} +
       if $seed == "" then {from: $d} else {dtype: $d, seed: ($seed | tonumber)} end)}' \
    <<<"$checkpoints")
}
for geo in $GEOMETRIES; do
  for dt in f32 bf16; do
    d="$CKPT/q$geo-$dt"
    args=(synth --geometry "qwen2.5-$geo" --dtype "$dt" --seed 1)
    [[ -f "$d/config.json" ]] || "$MOLT" "${args[@]}" --out "$d" >/dev/null
    made "q$geo-$dt" "qwen2.5-$geo" "$dt" "molt ${args[*]}" 1
  done
  # The quantised rungs as a ladder ships them: files written by molt quantize from the bf16
  # checkpoint (MLX layout, or rows interleaved by 8), mapped from disk like any checkpoint.
  # The rows-by-8 ones are the MLX files re-laid out (molt quantize --interleave on them).
  for q in "int8 bf16 --int8 --group-size 0" "q8 bf16 --bits 8 --group-size 64" \
    "q8r8 q8 --interleave" "q4 bf16 --bits 4 --group-size 64" "q4r8 q4 --interleave"; do
    set -- $q
    name="q$geo-$1" from="q$geo-$2"
    shift 2
    [[ -f "$CKPT/$name/config.json" ]] ||
      "$MOLT" quantize --model "$CKPT/$from" --out "$CKPT/$name" "$@" >/dev/null
    made "$name" "qwen2.5-$geo" "$from" "molt quantize --model $from $*"
  done
done

# Each checkpoint starts from a cold page cache, as after a reboot (dropped just before its
# run, so memory is not full of other checkpoints being evicted meanwhile): it is read through
# molt's own mapping (2 MiB-aligned, advised for huge pages), and where the filesystem caches
# files in 2 MiB folios its weights are mapped with huge pages, whoever wrote the file and how.
# bench decode touches every weight once before timing, so the reading itself is not timed.
drop_cache() {
  local f
  for f in "$1"/*.safetensors; do dd if="$f" iflag=nocache count=0 status=none; done
}
bandwidth() { "$MOLT" bench bandwidth --threads "$THREADS" --json; }
load() { cut -d' ' -f1 /proc/loadavg; }

echo "== bandwidth, sgemm peak" >&2
load_before=$(load)
bandwidth_before=$(timed bandwidth)
timed "$MOLT" bench sgemm --threads "$THREADS" --tokens 512 --json >"$OUT/sgemm.json"

# decode_run CHECKPOINT GEOMETRY PROMPT: one decode between two standalone triads (STREAM's
# best pass, in the same minute), as one line of decode.jsonl.
# Checkpoints other than f32 also time the same prefill on the f32 GEMM (--gemm f32) just before,
# recorded as prefill_f32_gemm: the A/B of the GEMM the run chose (kernels/linear.h).
decode_run() {
  local t0 t1 before after ab='null' layout=()
  # q4 rows are the MLX layout as stored; the MLX file as published loads as the q4r8 rows
  # (molt's layout cache) unless told otherwise.
  [[ "$1" == *-q4 ]] && layout=(--layout stored)
  if [[ "$1" != *-f32 ]]; then
    "$MOLT" bench decode --model "$CKPT/$1" --threads "$THREADS" --prompt-tokens "$3" \
      --tokens 1 --gemm f32 "${layout[@]}" --json >"$WORK/prefill-f32-gemm.json"
    ab=$(jq -c '{prefill_s, prefill_tok_s, gemm}' "$WORK/prefill-f32-gemm.json")
  fi
  t0=$(date +%s.%N)
  before=$(bandwidth)
  "$MOLT" bench decode --model "$CKPT/$1" --threads "$THREADS" --prompt-tokens "$3" \
    --tokens "$TOKENS" --bandwidth "${layout[@]}" --json >"$WORK/decode.json"
  after=$(bandwidth)
  t1=$(date +%s.%N)
  jq -c --arg c "$1" --arg g "$2" --argjson b "$before" --argjson a "$after" \
    --argjson t0 "$t0" --argjson t1 "$t1" --argjson ab "$ab" \
    '. + {checkpoint: $c, geometry: $g, stream_before: $b, stream_after: $a,
          stream_span_s: ((($t1 - $t0) * 10 | round) / 10)}
       + (if $ab == null then {} else {prefill_f32_gemm: $ab} end)' \
    "$WORK/decode.json" >>"$OUT/decode.jsonl"
}
# Decode and a 512-token prefill at each precision.
for geo in $GEOMETRIES; do
  for run in "f32 512" "bf16 512" "int8 512" "q8 512" "q8r8 512" "q4 512" "q4r8 512"; do
    set -- $run
    echo "== decode qwen2.5-$geo $1" >&2
    drop_cache "$CKPT/q$geo-$1"
    timed decode_run "q$geo-$1" "qwen2.5-$geo" "$2"
  done
done

# Held-out NLL of the tiny ladder per precision (checkpoints written by molt quantize into WORK).
test_text=models/tiny-ladder/data/test.txt
tiny_files=("$test_text")
for size in s m; do
  src=models/tiny-ladder/$size
  [[ -f "$src/model.safetensors" ]] || continue
  for f in "$src"/*; do [[ -f "$f" ]] && tiny_files+=("$f"); done
  for q in "int8 --int8 --group-size 0" "q8 --bits 8 --group-size 64" \
    "q4 --bits 4 --group-size 64"; do
    set -- $q
    rm -rf "${WORK:?}/tiny-$size-$1"
    "$MOLT" quantize --model "$src" --out "$WORK/tiny-$size-$1" "${@:2}" >/dev/null
  done
  for p in native int8 q8 q4; do
    dir="$WORK/tiny-$size-$p"
    [[ "$p" == native ]] && dir=$src
    echo "== nll tiny-$size $p" >&2
    # f32 GEMM: the rows compare weight precisions, the same on every machine
    MOLT_GEMM=f32 "$MOLT" eval nll --model "$dir" --text-file "$test_text" --threads "$THREADS" --json |
      jq -c --arg r "$size" --arg p "$p" --slurpfile cfg "$dir/config.json" \
        '. + {rung: $r, precision: $p, quantization: ($cfg[0].quantization // null)}' \
        >>"$OUT/nll.jsonl"
  done
done
tiny_sha=$(sha256sum "${tiny_files[@]}" |
  jq -R -n '[inputs | capture("^(?<sha>[0-9a-f]{64}) [ *](?<file>.*)$") | {(.file): .sha}] | add')

# Google Benchmark JSON, cut to what the page shows.
keep() {
  jq -c '{benchmarks: [.benchmarks[] | with_entries(select(.key |
    IN("name", "label", "matvec_GB/s", "triad_GB/s", "ratio", "GB/s", "us_per_call", "tok/s",
      "x_triad") or endswith("_us") or endswith("_x_triad")))]}' \
    "$WORK/$1" >"$OUT/$1"
}
if [[ "$QUICK" != 1 ]]; then
  echo "== microbenchmarks" >&2
  timed "$BENCH/molt_quant_bench" --benchmark_filter='BM_QMatvecVsTriad/.*/thr:2' \
    --benchmark_format=json --benchmark_out="$WORK/quant_bench.json" >/dev/null
  timed "$BENCH/molt_quant_bench" --benchmark_filter='BM_QMatvecHot' \
    --benchmark_format=json --benchmark_out="$WORK/quant_hot.json" >/dev/null
  timed "$BENCH/molt_kernels_bench" --benchmark_filter='BM_MatvecVsTriad/.*/thr:2' \
    --benchmark_format=json --benchmark_out="$WORK/kernels_bench.json" >/dev/null
  timed "$BENCH/molt_quant_bench" --benchmark_filter='BM_DecodeMatvecs' \
    --benchmark_format=json --benchmark_out="$WORK/decode_matvecs.json" >/dev/null
  keep quant_bench.json
  keep quant_hot.json
  keep kernels_bench.json
  keep decode_matvecs.json
fi

bandwidth_after=$(timed bandwidth)
quick=false
[[ "$QUICK" == 1 ]] && quick=true
jq -n --arg date "$date" --arg commit "$(git rev-parse HEAD 2>/dev/null || echo unknown)" \
  --argjson dirty "$dirty" --arg machine "$(uname -m)" \
  --arg cpu "$(lscpu | sed -n 's/^Model name: *//p' | head -1)" --argjson cores "$(nproc)" \
  --arg flags "$(grep -o -w -E 'avx2|fma|f16c|avx512f|avx512_bf16|avx512_vnni|avx_vnni' \
    /proc/cpuinfo | sort -u | tr '\n' ' ' | sed 's/ $//')" \
  --argjson threads "$THREADS" --arg omp "$WAIT" --arg molt "$("$MOLT" --version)" \
  --argjson quick "$quick" --argjson tokens "$TOKENS" \
  --argjson load_before "$load_before" --argjson load_after "$(load)" \
  --argjson bandwidth_before "$bandwidth_before" --argjson bandwidth_after "$bandwidth_after" \
  --argjson checkpoints "$checkpoints" --argjson tiny "$tiny_sha" \
  '{date: $date, commit: $commit, dirty: $dirty, machine: $machine, cpu: $cpu, cores: $cores,
    flags: $flags, threads: $threads, omp_wait_policy: $omp, molt: $molt, quick: $quick,
    decode_tokens: $tokens, load_before: $load_before, load_after: $load_after,
    bandwidth_before: $bandwidth_before, bandwidth_after: $bandwidth_after,
    checkpoints: $checkpoints, tiny_ladder: $tiny}' >"$OUT/run.json"

"$MOLT" bench perf-report --in "$OUT" --out "$DOC"
echo "wrote $OUT and $DOC" >&2
