#!/usr/bin/env bash
# Keeps rungs that a session trained but could not yet put on the ladder: work/runs does not
# outlive a session, and the ladder's rungs change only together with every page measured on
# them (routes.sh, evaluate.sh, the results run, ...), which may not fit in the same session.
#   tools/tiny-ladder/handover.sh s m l
# writes tools/tiny-ladder/handover/SIZE/ (export.py's bf16 checkpoint, the run's state.json and
# its log.csv)
# and handover/recipe.json: the sittings since the committed ladder, in recipe.json's form, to
# append to it when the rungs are exported onto the ladder. The next session continues with
#   python3 import_ckpt.py --size SIZE --handover handover     (then train.py, or export.py)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
py=/usr/bin/python3
[[ $# -gt 0 ]] || { echo "usage: handover.sh SIZE..." >&2; exit 2; }
out="$here/handover"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
cd "$here"
"$py" export.py --work work --out "$tmp" --sizes "$(echo "$@" | tr ' ' ',')" >/dev/null
for size in "$@"; do
  rm -rf "${out:?}/$size"
  mkdir -p "$out/$size"
  cp "$tmp/$size"/{config.json,generation_config.json,model.safetensors,tokenizer.json,tokenizer_config.json} \
    "$out/$size/"
  cp "work/runs/$size/state.json" "$out/$size/state.json"
  cp "work/runs/$size/log.csv" "$out/$size/log.csv"
done
# handover/recipe.json: each rung's sittings since the committed ladder (sittings.py).
"$py" - "$out" "$@" <<'PY'
import json, os, subprocess, sys
out, sizes = sys.argv[1], sys.argv[2:]
path = os.path.join(out, "recipe.json")
new = json.load(open(path))["sizes"] if os.path.exists(path) else {}
for size in sizes:
    state = os.path.join(out, size, "state.json")
    new[size] = json.loads(subprocess.run([sys.executable, "sittings.py", "--size", size, "--state", state],
                                          check=True, capture_output=True, text=True).stdout)
    print(f"handover: {size} at {json.load(open(state))['tokens']} tokens, "
          f"{len(new[size])} sitting(s) since the ladder")
json.dump({"about": "Sittings after recipe.json's, per rung, for the rungs in this folder "
                    "(tools/tiny-ladder/handover.sh), for reading: promote.sh derives the same "
                    "entries from each rung's state.json (sittings.py) when it appends them.",
           "sizes": new},
          open(path, "w"), indent=1)
PY
