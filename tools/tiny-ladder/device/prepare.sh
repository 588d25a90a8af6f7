#!/usr/bin/env bash
# Prepares tools/tiny-ladder/work on this machine for device/run.sh on one without Debian packages
# or network (python3 with torch, numpy and regex only), which gets the folder as a carried path (64 MiB
# at most). Rebuilds the corpus and tokenizer (build.sh's seeds) and stops if the tokenizer is not
# byte for byte the committed rungs'; writes the prose token caches train.py reads; leaves nothing else (no runs, no test split).
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
root="$(cd "$here/../.." && pwd)"
work="$here/work"
py=/usr/bin/python3   # Debian's python, where python3-torch lives
# Corpus sources and the Python side, from Debian main (only these: not the C++ build's list).
need=()
for p in linux-source-6.1 python3.11-doc python3-torch python3-numpy python3-regex; do
  status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  [[ "$status" == "install ok installed"* ]] || need+=("$p")
done
if [[ ${#need[@]} -gt 0 ]]; then
  apt-get update -q
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${need[@]}"
fi
# The folder travels whole: anything else in it (runs, logs, eval) would travel too, and a
# training checkpoint is not this script's to delete.
extra=$(find "$work" -mindepth 1 -maxdepth 1 ! -name corpus ! -name tokenizer ! -name data ! -name src 2>/dev/null || true)
[[ -z "$extra" ]] || { echo "prepare.sh: move these out of $work first: $extra" >&2; exit 1; }
rm -rf "$work/corpus" "$work/tokenizer" "$work/data"
cd "$here"
"$py" corpus.py --work "$work" --seed 1234
"$py" bpe.py --work "$work" --vocab-size 4096
for f in tokenizer.json tokenizer_config.json; do
  cmp "$work/tokenizer/$f" "$root/models/tiny-ladder/l/$f" ||
    { echo "prepare.sh: rebuilt $f differs from the committed rungs'" >&2; exit 1; }
done
"$py" - "$work" <<'PY'
import os, sys
sys.path.insert(0, ".")
import bpe, train
work = sys.argv[1]
tok = bpe.Tokenizer(os.path.join(work, "tokenizer", "tokenizer.json"))
for split in ("train", "validation"):
    print(split, len(train.load_prose(work, tok, split)[1]), "tokens")
PY
# Only what train.py, import_ckpt.py, export.py and finish.py read (src: corpus.py's unpacked kernel).
rm -rf "$work/src" "$work/corpus/test.jsonl"
du -sh "$work"
find "$work" -type f -printf '%9s %p\n'
