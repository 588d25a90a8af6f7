#!/usr/bin/env bash
# Measures decode and prefill speed for every precision at the Qwen2.5-0.5B and 1.5B
# geometries, the memory bandwidth and sgemm peak of this same run, the quantised kernels'
# microbenchmarks and the tiny ladder's held-out NLL per precision, then generates
# docs/PERFORMANCE.md from those outputs alone (scripts/performance_report.py).
#
#   scripts/performance.sh                 # full run (~10 minutes on 2 cores)
#   QUICK=1 scripts/performance.sh         # fewer decode steps, no microbenchmarks
#   PAUSE='train.py --size' scripts/performance.sh
#        # SIGSTOPs processes matching PAUSE around each timed measurement (and always
#        # SIGCONTs them after, also on failure), so a shared machine's background jobs
#        # do not disturb the figures.
#
# Environment: MOLT (binary, build/molt), OUT (raw outputs, build/performance), CKPT
# (folder of synthetic checkpoints, /tmp: <CKPT>/q0.5b-f32 ... are made with molt synth, and
# <CKPT>/q0.5b-q4 ... with molt quantize, when absent), THREADS (2), DOC
# (docs/PERFORMANCE.md), BENCH (microbenchmark binaries, next to MOLT). OMP_WAIT_POLICY and
# GOMP_SPINCOUNT are passed through (molt runs with GOMP_SPINCOUNT=10000 unless one is set)
# and recorded.
set -euo pipefail
cd "$(dirname "$0")/.."
MOLT=${MOLT:-build/molt}
OUT=${OUT:-build/performance}
CKPT=${CKPT:-/tmp}
THREADS=${THREADS:-2}
DOC=${DOC:-docs/PERFORMANCE.md}
QUICK=${QUICK:-0}
PAUSE=${PAUSE:-}
PY=${PY:-$(command -v /usr/bin/python3 || command -v python3)}
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
mkdir -p "$OUT" "$(dirname "$DOC")"
rm -f "$OUT"/decode.jsonl "$OUT"/nll.jsonl "$OUT"/*bench*.json "$OUT"/quant_hot.json

for geo in 0.5b 1.5b; do
  for dt in f32 bf16; do
    d="$CKPT/q$geo-$dt"
    if [[ ! -f "$d/config.json" ]]; then
      "$MOLT" synth --geometry "qwen2.5-$geo" --dtype "$dt" --seed 1 --out "$d" >/dev/null
    fi
  done
  # The quantised rungs as a ladder ships them: files written by molt quantize from the bf16
  # checkpoint (MLX layout, or rows interleaved by 8), mapped from disk like any checkpoint.
  # The rows-by-8 ones are the MLX files re-laid out (molt quantize --interleave on them).
  for q in "int8 bf16 --int8 --group-size 0" "q8 bf16 --bits 8 --group-size 64" \
    "q8r8 q8 --interleave" "q4 bf16 --bits 4 --group-size 64" "q4r8 q4 --interleave"; do
    set -- $q
    d="$CKPT/q$geo-$1"
    from="$CKPT/q$geo-$2"
    shift 2
    if [[ ! -f "$d/config.json" ]]; then
      "$MOLT" quantize --model "$from" --out "$d" "$@" >/dev/null
    fi
  done
done

# Each checkpoint starts from a cold page cache, as after a reboot (dropped just before its
# run, so memory is not full of other checkpoints being evicted meanwhile): it is read through
# molt's own mapping (2 MiB-aligned, advised for huge pages), and where the filesystem caches
# files in 2 MiB folios its weights are mapped with huge pages, whoever wrote the file and how.
# bench decode touches every weight once before timing, so the reading itself is not timed.
drop_cache() {
  "$PY" - "$1" <<'PYEOF'
import glob, os, sys
for f in glob.glob(os.path.join(sys.argv[1], "*.safetensors")):
    fd = os.open(f, os.O_RDONLY)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    os.close(fd)
PYEOF
}

{
  echo "{\"date\": \"$(date -u +%Y-%m-%dT%H:%MZ)\", \"commit\": \"$(git rev-parse --short HEAD 2>/dev/null || echo unknown)\","
  echo " \"cpu\": \"$(lscpu | sed -n 's/^Model name: *//p' | head -1)\", \"cores\": $(nproc),"
  echo " \"flags\": \"$(grep -o -w -E 'avx2|fma|f16c|avx512f|avx512_bf16|avx512_vnni|avx_vnni' /proc/cpuinfo | sort -u | tr '\n' ' ')\","
  echo " \"omp_wait_policy\": \"$WAIT\","
  echo " \"threads\": $THREADS}"
} >"$OUT/machine.json"

echo "== bandwidth, sgemm peak" >&2
timed "$MOLT" bench bandwidth --threads "$THREADS" --json >"$OUT/bandwidth.json"
timed "$MOLT" bench sgemm --threads "$THREADS" --tokens 512 --json >"$OUT/sgemm.json"

# Decode at each precision; f32 and bf16 also time a 512-token prefill.
for geo in 0.5b 1.5b; do
  for run in "f32 f32 512" "bf16 bf16 512" "int8 bf16 32" "q8 bf16 32" "q8r8 bf16 32" \
    "q4 bf16 32" "q4r8 bf16 32"; do
    set -- $run
    echo "== decode qwen2.5-$geo $1" >&2
    drop_cache "$CKPT/q$geo-$1"
    timed "$MOLT" bench decode --model "$CKPT/q$geo-$1" --threads "$THREADS" \
      --prompt-tokens "$3" --tokens "$TOKENS" --bandwidth --json |
      "$PY" -c "import json,sys; j=json.loads(sys.stdin.read()); j['geometry']='qwen2.5-$geo'; j['kind']='$1'; j['source_dtype']='$2'; print(json.dumps(j))" \
        >>"$OUT/decode.jsonl"
  done
done

# Held-out NLL of the tiny ladder per precision (checkpoints written by molt quantize).
for size in s m; do
  src=models/tiny-ladder/$size
  [[ -f "$src/model.safetensors" ]] || continue
  "$MOLT" quantize --model "$src" --out "$OUT/tiny-$size-int8" --int8 --group-size 0 >/dev/null
  "$MOLT" quantize --model "$src" --out "$OUT/tiny-$size-q8" --bits 8 --group-size 64 >/dev/null
  "$MOLT" quantize --model "$src" --out "$OUT/tiny-$size-q4" --bits 4 --group-size 64 >/dev/null
  for p in native int8 q8 q4; do
    dir="$OUT/tiny-$size-$p"
    [[ "$p" == native ]] && dir=$src
    echo "== nll tiny-$size $p" >&2
    "$MOLT" eval nll --model "$dir" --text-file models/tiny-ladder/data/test.txt \
      --threads "$THREADS" --json |
      "$PY" -c "import json,sys; j=json.loads(sys.stdin.read()); j['rung']='$size'; j['precision']='$p'; print(json.dumps(j))" \
        >>"$OUT/nll.jsonl"
  done
done

BENCH=${BENCH:-$(dirname "$MOLT")/bench}
if [[ "$QUICK" != 1 && -x "$BENCH/molt_quant_bench" ]]; then
  echo "== microbenchmarks" >&2
  timed "$BENCH/molt_quant_bench" --benchmark_filter='BM_QMatvecVsTriad/.*/thr:2' \
    --benchmark_format=json --benchmark_out="$OUT/quant_bench.json" >/dev/null
  timed "$BENCH/molt_quant_bench" --benchmark_filter='BM_QMatvecHot' \
    --benchmark_format=json --benchmark_out="$OUT/quant_hot.json" >/dev/null
  timed "$BENCH/molt_kernels_bench" --benchmark_filter='BM_MatvecVsTriad/.*/thr:2' \
    --benchmark_format=json --benchmark_out="$OUT/kernels_bench.json" >/dev/null
fi

"$PY" scripts/performance_report.py "$OUT" >"$DOC"
echo "wrote $DOC" >&2
