#!/usr/bin/env bash
# make fuzz: builds the libFuzzer harnesses (preset `fuzz`: clang, ASan + UBSan) and runs each
# for FUZZ_SECONDS (default 30) on a copy of its seed corpus, after replaying the committed
# regression inputs. Fails when any harness finds a crash, leak, UB, timeout or out-of-memory.
#   scripts/fuzz.sh [harness...]      (default: every tests/fuzz/*_fuzz.cc)
#   FUZZ_RUNS=1000000 FUZZ_SECONDS=1800 scripts/fuzz.sh   # a campaign: each harness stops at
#                                     # FUZZ_RUNS executions or FUZZ_SECONDS, whichever is first
# Findings land in build-fuzz/artifacts/<harness>/; see README "Fuzzing" for what to do next.
# The run's table (executions, corpus, edges covered, CPU seconds) goes to build-fuzz/summary.md
# (FUZZ_SUMMARY names another file).
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=${FUZZ_SECONDS:-30}
runs=${FUZZ_RUNS:--1}  # -1: no cap on executions
jobs=${JOBS:-$(nproc)}
build=build-fuzz
src=tests/fuzz

MOLT_EXTRA_PACKAGES="clang libclang-rt-dev libomp-dev ${MOLT_EXTRA_PACKAGES:-}" scripts/install-deps.sh
cmake --preset fuzz >/dev/null
cmake --build --preset fuzz -j "$jobs"

# Which dictionary each harness takes (json.dict is added to every JSON one).
declare -A dict=(
  [safetensors]=safetensors [safetensors_index]=safetensors [hf_config]=hf_config
  [generation_config]=hf_config [tokenizer_json]=tokenizer [vocab_merges]=tokenizer
  [tiktoken]=tokenizer [chat_template]=chat [ladder_manifest]=ladder [pressure_trace]=ladder
  [map_meta]=map [map_index]=map [token_floor]=map [options]=options [server_request]=server
)

if [[ $# -gt 0 ]]; then
  harnesses=("$@")
else
  harnesses=()
  for f in "$src"/*_fuzz.cc; do
    n=$(basename "$f" _fuzz.cc)
    harnesses+=("$n")
  done
fi

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:allocator_may_return_null=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
failed=()
summary=${FUZZ_SUMMARY:-$build/summary.md}  # several campaigns at once each need their own
mkdir -p "$build"
{
  echo "| harness | executions | exec/s | corpus (files) | edges (cov) | features (ft) | CPU s | result |"
  echo "|---|---|---|---|---|---|---|---|"
} >"$summary"
# row NAME LOG RESULT: a table row from libFuzzer's final statistics and its last status line.
row() {
  local execs rate cov ft corp cpu
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$2" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$2" | tail -1)
  cov=$(grep -oE 'cov: [0-9]+' "$2" | tail -1 | cut -d' ' -f2)
  ft=$(grep -oE 'ft: [0-9]+' "$2" | tail -1 | cut -d' ' -f2)
  corp=$(find "$build/corpus/$1" -type f | wc -l)
  cpu=$(sed -n 's/^cpu_seconds: *//p' "$2" | tail -1)
  echo "| $1 | ${execs:-?} | ${rate:-?} | $corp | ${cov:-?} | ${ft:-?} | ${cpu:-?} | $3 |" >>"$summary"
}
for n in "${harnesses[@]}"; do
  exe=$build/tests/fuzz/${n}_fuzz
  [[ -x $exe ]] || { echo "fuzz: no harness $exe" >&2; exit 1; }
  corpus=$build/corpus/$n
  artifacts=$build/artifacts/$n
  mkdir -p "$corpus" "$artifacts" "$build/dict"
  cp -rn "$src/corpus/$n/." "$corpus/"  # the committed seeds stay as they are
  # Seeds from the real Qwen2.5 reference data, read from ../shared at run time (it is never
  # copied into the repository).
  qwen=../shared/data/qwen2.5
  if [[ -d $qwen ]]; then
    case $n in
      hf_config) cp -n "$qwen"/configs/*.json "$corpus/" ;;
      tiktoken) head -n 2500 "$qwen/qwen.tiktoken" >"$corpus/qwen-first-2500.tiktoken" ;;
      vocab_merges) head -n 2001 "$qwen/merges.txt" >"$corpus/qwen-merges-first-2000.txt" ;;
    esac
  fi
  [[ -n ${dict[$n]:-} ]] || { echo "fuzz: no dictionary for $n (add it to scripts/fuzz.sh)" >&2; exit 1; }
  d=$build/dict/$n.dict
  cat "$src/dict/json.dict" "$src/dict/${dict[$n]}.dict" >"$d"

  # Every committed regression input must pass first (each runs once).
  if compgen -G "$src/regressions/$n/*" >/dev/null; then
    if ! "$exe" -runs=1 "$src/regressions/$n"/* >"$build/$n.regressions.log" 2>&1; then
      echo "fuzz: $n: a committed regression input fails again (see $build/$n.regressions.log)"
      failed+=("$n (regression)")
      continue
    fi
  fi
  echo "fuzz: $n for ${seconds}s${FUZZ_RUNS:+ or $runs runs}"
  rc=0
  { TIMEFORMAT='cpu_seconds: %U'; time nice -n "${FUZZ_NICE:-10}" "$exe" "$corpus" -dict="$d" \
      -max_total_time="$seconds" -runs="$runs" -timeout=10 -rss_limit_mb=2048 \
      -malloc_limit_mb=1024 -print_final_stats=1 -artifact_prefix="$artifacts/" \
      >"$build/$n.log" 2>&1; } 2>>"$build/$n.log" || rc=$?
  if [[ $rc -eq 0 ]]; then
    grep -E "^stat::(number_of_executed_units|average_exec_per_sec)" "$build/$n.log" |
      sed "s/^/  /"
    row "$n" "$build/$n.log" clean
  else
    row "$n" "$build/$n.log" "FOUND A PROBLEM"
    echo "fuzz: $n FOUND A PROBLEM (log $build/$n.log, input in $artifacts/):"
    grep -E "ERROR|SUMMARY|runtime error|uncaught|property failed" "$build/$n.log" | head -5 |
      sed "s/^/  /"
    failed+=("$n")
  fi
done
cat "$summary"
if [[ ${#failed[@]} -gt 0 ]]; then
  echo "fuzz: findings in ${failed[*]}"
  exit 1
fi
echo "fuzz: ${#harnesses[@]} harness(es), ${seconds}s${FUZZ_RUNS:+ or $runs runs} each: nothing found"
