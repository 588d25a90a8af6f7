#!/usr/bin/env bash
# Rebuilds the tiny ladder from scratch with fixed seeds: corpus -> tokenizer ->
# training (l, m, s) -> export -> needle set -> maps (routes.sh) -> evaluation
# (evaluate.sh) -> curves.
# Training replays recipe.json: each rung's sittings (curriculum arguments and the token count
# each ran to) as the committed ladder was trained.
# Not run in CI: training takes CPU hours. Knobs (environment):
#   THREADS=1             torch threads per training run
#   SIZES="s m l"         rungs to train
#   KEEP_WORK=1           keep tools/tiny-ladder/work (resume training instead of restarting)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
work="$here/work"
out="$root/models/tiny-ladder"
py=/usr/bin/python3   # Debian's python, where python3-torch lives

# Corpus sources and the Python side come from Debian main.
MOLT_EXTRA_PACKAGES="linux-source-6.1 python3.11-doc python3-torch python3-numpy python3-regex python3-matplotlib time" \
  "$root/scripts/install-deps.sh"

THREADS="${THREADS:-1}"
SIZES="${SIZES:-s m l}"
if [[ "${KEEP_WORK:-0}" != 1 ]]; then
  rm -rf "$work/corpus" "$work/tokenizer" "$work/data" "$work/runs" "$work"/logs/train_*.log
fi
mkdir -p "$work/logs" "$out/data"

cd "$here"
"$py" corpus.py --work "$work" --seed 1234
"$py" bpe.py --work "$work" --vocab-size 4096
for size in $SIZES; do
  # One line per sitting: the token count it runs to, then its arguments.
  "$py" -c "
import json, sys
for s in json.load(open('recipe.json'))['sizes'][sys.argv[1]]:
    print(int(s['until']), *s['args'])" "$size" |
    while read -r until args; do
      # shellcheck disable=SC2086  # args is a list of words
      "$py" train.py --size "$size" --work "$work" --threads "$THREADS" --seed 1 \
        --max-tokens "$until" $args </dev/null 2>&1 | tee -a "$work/logs/train_$size.log"
    done
done
"$py" export.py --work "$work" --out "$out" --sizes "$(echo $SIZES | tr ' ' ',')"

# Committed evaluation data: the held-out test split as plain text and a fixed needle set.
"$py" - "$work/corpus/test.jsonl" "$out/data/test.txt" <<'EOF'
import json, sys
docs = [json.loads(l)["text"] for l in open(sys.argv[1], encoding="utf-8")]
open(sys.argv[2], "w", encoding="utf-8").write("\n\n".join(docs) + "\n")
EOF
"$py" episodes.py --work "$work" --out "$out/data/needles.jsonl" --seed 99 --count 30
# Maps for the routes, then every figure from the C++ engine (`molt fit|eval|transfer`).
make -C "$root" build
"$here/routes.sh"
"$here/evaluate.sh"
"$py" plot.py --work "$work" --out "$out"
echo "tiny-ladder: done -> $out"
