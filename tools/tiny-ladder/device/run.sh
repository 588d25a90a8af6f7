#!/usr/bin/env bash
# One GPU sitting for the tiny ladder (issue: native needles at ~2,000 tokens), from the
# repository root: `bash tools/tiny-ladder/device/run.sh`, $OUT an empty folder.
# Continues the committed rungs (import_ckpt.py: models/tiny-ladder/SIZE -> a checkpoint with a
# fresh optimizer) at 2,048-token sequences on a needle-heavy mix with a cooldown, once per token
# budget in BUDGETS (rungs and budgets all in parallel on the one GPU), then device/finish.py
# exports and scores every result. Needs python3 with torch + numpy and tools/tiny-ladder/work as
# device/prepare.sh leaves it (git-ignored: carry it); nothing else.
# The working tree travels too, and the committed tree is over the device's 64 MiB: move
# models/tiny-ladder/maps, models/tiny-ladder/l-int8 and docs/results/results.json aside for the
# call (none is read here) and back after it. Writes, flat, into $OUT:
#   SIZE-TAG.tar  the exported rung, its fixture logits, train log, CSV curve and state.json
#   summary.json  needle accuracy per context and validation/test NLL of every rung, before
#                 (tag "committed") and after; checks l < m < s and needles at 2048 >= 0.8
#   run.log       this script's output
# The sitting stops itself after MINUTES of training and decays its learning rate by tokens or
# wall time, whichever is further along, so it ends cooled down at any speed.
# Knobs (environment): MINUTES=4.5, BUDGETS="24e6 64e6", SIZES="s m l", BATCH_TOKENS=16384,
# DEVICE (cuda when there is one), PYTHON=python3, PARALLEL=1 (0: one sitting at a time),
# NEEDLE_COUNT=30, NEEDLE_CONTEXTS (default: all), NLL_WINDOWS=0 (all), EVAL_EVERY=200.
set -uo pipefail  # not -e: one failed rung must not keep the others from being written
here="$(cd "$(dirname "$0")/.." && pwd)"
: "${OUT:?set OUT to the folder the results go to}"
mkdir -p "$OUT"
py="${PYTHON:-python3}"
MINUTES="${MINUTES:-4.5}"
BUDGETS="${BUDGETS:-24e6 64e6}"
SIZES="${SIZES:-s m l}"
export OMP_NUM_THREADS=1 PYTHONUNBUFFERED=1
scratch="$(mktemp -d "${TMPDIR:-/tmp}/tiny-ladder-sitting.XXXXXX")"

main() {
device="${DEVICE:-$("$py" -c 'import torch; print("cuda" if torch.cuda.is_available() else "cpu")')}"
echo "run.sh: $(date -u +%FT%TZ) device $device, $MINUTES min, budgets $BUDGETS, scratch $scratch"
[[ -s "$here/work/data/train.u16.npy" ]] || { echo "run.sh: $here/work is not prepared (device/prepare.sh)"; return 1; }
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv
# A backstop past train.py's own --max-minutes (startup, the last evaluation and save).
stop_after=$("$py" -c "print(int(float('$MINUTES') * 60 + 150))")
tmo=()
command -v timeout >/dev/null && tmo=(timeout -k 10 "$stop_after")

for budget in $BUDGETS; do
  tag=$("$py" -c "print(f'{float(\"$budget\") / 1e6:g}M')")
  mkdir -p "$scratch/$tag/logs"
  for size in $SIZES; do
    # The committed rung's token count (recipe.json's last 'until'; import_ckpt.py checks it).
    start=$("$py" -c "import json; print(int(json.load(open('$here/recipe.json'))['sizes']['$size'][-1]['until']))")
    until=$("$py" -c "print($start + int(float('$budget')))")
    (
      "$py" "$here/import_ckpt.py" --size "$size" --work "$here/work" --run "$scratch/$tag/runs/$size" &&
      ${tmo[@]+"${tmo[@]}"} "$py" "$here/train.py" --size "$size" --work "$here/work" \
        --run "$scratch/$tag/runs/$size" --device "$device" --threads 1 --seed 1 \
        --mix prose=0.15,needle=0.55,dense=0.2,copy=0.1 --seq-len 2048 \
        --batch-tokens "${BATCH_TOKENS:-16384}" --max-tokens "$until" \
        --cooldown-tokens "$budget" --new-cooldown --cooldown-minutes "$MINUTES" \
        --max-minutes "$MINUTES" --warmup-steps 50 --eval-every "${EVAL_EVERY:-200}" \
        --ckpt-seconds 60 </dev/null
      echo $? > "$scratch/$tag/rc_$size"
    ) > "$scratch/$tag/logs/train_$size.log" 2>&1 &
    [[ "${PARALLEL:-1}" == 1 ]] || wait
  done
done
wait
for d in "$scratch"/*/; do
  for size in $SIZES; do
    echo "== $d $size: rc $(cat "$d/rc_$size" 2>/dev/null)"
    tail -n 3 "$d/logs/train_$size.log"
  done
done
"$py" "$here/device/finish.py" --scratch "$scratch" --work "$here/work" --out "$OUT" \
  --device "$device" --sizes "${SIZES// /,}" --python "$py" \
  --needle-count "${NEEDLE_COUNT:-30}" ${NEEDLE_CONTEXTS:+--contexts "$NEEDLE_CONTEXTS"} \
  --nll-windows "${NLL_WINDOWS:-0}"
ls -l "$OUT"
echo "run.sh: done $(date -u +%FT%TZ)"
}
# A pipe, not exec > >(tee): the script ends only once run.log has everything.
main 2>&1 | tee -a "$OUT/run.log"
