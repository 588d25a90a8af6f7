#!/usr/bin/env bash
# Keeps rungs that a session trained but could not yet put on the ladder: work/runs does not
# outlive a session, and the ladder's rungs change only together with every page measured on
# them (routes.sh, evaluate.sh, the results run, ...), which may not fit in the same session.
#   tools/tiny-ladder/handover.sh s m l
# writes tools/tiny-ladder/handover/SIZE/ (export.py's bf16 checkpoint and the run's state.json)
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
done
"$py" - "$out" "$@" <<'PY'
import json, os, sys
out, sizes = sys.argv[1], sys.argv[2:]
recipe = json.load(open("recipe.json"))["sizes"]
path = os.path.join(out, "recipe.json")
new = json.load(open(path))["sizes"] if os.path.exists(path) else {}
# Per-run arguments, not the recipe's: build.sh passes them itself.
DROP = {"--size": 1, "--work": 1, "--threads": 1, "--seed": 1, "--max-tokens": 1, "--run": 1}
for size in sizes:
    state = json.load(open(os.path.join(out, size, "state.json")))
    done = int(recipe[size][-1]["until"])
    later = [s for s in state["sittings"] if s["tokens"] >= done]
    entries = []
    for i, s in enumerate(later):
        args, a = [], s["args"]
        j = 0
        while j < len(a):
            if a[j] in DROP:
                j += 1 + DROP[a[j]]
                continue
            args.append(a[j])
            j += 1
        until = later[i + 1]["tokens"] if i + 1 < len(later) else state["tokens"]
        # A sitting resumed after a stop (same arguments, no new cool-down) extends the last one.
        if entries and [x for x in entries[-1]["args"] if x != "--new-cooldown"] == args:
            entries[-1]["until"] = until
        else:
            entries.append({"until": until, "args": args})
    new[size] = entries
    print(f"handover: {size} at {state['tokens']} tokens, {len(entries)} sitting(s) since the ladder")
json.dump({"about": "Sittings after recipe.json's, per rung, for the rungs in this folder "
                    "(tools/tiny-ladder/handover.sh); append them to recipe.json when the rungs go "
                    "onto the ladder.", "sizes": new}, open(path, "w"), indent=1)
PY
