#!/usr/bin/env python3
"""The sittings a run trained since the committed ladder, in recipe.json's form.

recipe.json lists each rung's sittings as `train.py --size SIZE --seed 1 --max-tokens UNTIL
ARGS`; train.py's state.json records every sitting's full command line and the token count it
started at. This turns the sittings after the recipe's last `until` into recipe entries:
per-run arguments (size, work folder, threads, seed, token limit, run folder) dropped, and a
sitting resumed after a stop with the same arguments (no new cool-down) merged into the one it
continues.
  sittings.py --size s --state work/runs/s/state.json            print the entries (JSON)
  sittings.py --size s --state work/runs/s/state.json --append   append them to recipe.json
"""
import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
# Per-run arguments, not the recipe's: build.sh passes them itself. The value: how many words follow.
DROP = {"--size": 1, "--work": 1, "--threads": 1, "--seed": 1, "--max-tokens": 1, "--run": 1,
        "--max-minutes": 1}


def recipe_args(argv):
    out, j = [], 0
    while j < len(argv):
        if argv[j] in DROP:
            j += 1 + DROP[argv[j]]
            continue
        out.append(argv[j])
        j += 1
    return out


def since_recipe(state, done):
    """state: train.py's state.json; done: the recipe's last `until` for the rung."""
    later = [s for s in state["sittings"] if s["tokens"] >= done]
    if not later or later[0]["tokens"] != done:
        raise ValueError(f"no sitting starts at the recipe's last until ({done} tokens): "
                         "the run does not continue the committed rung")
    entries = []
    for i, s in enumerate(later):
        args = recipe_args(s["args"])
        until = later[i + 1]["tokens"] if i + 1 < len(later) else state["tokens"]
        if until == s["tokens"]:
            continue  # started and stopped before a step
        if entries and [x for x in entries[-1]["args"] if x != "--new-cooldown"] == \
                [x for x in args if x != "--new-cooldown"] and "--new-cooldown" not in args:
            entries[-1]["until"] = until
        else:
            entries.append({"until": until, "args": args})
    return entries


def wrapped(head, words, tail, width=100):
    """head + the words as JSON strings + tail, continued under the first word past `width`."""
    lines, line = [], head
    for i, w in enumerate(words):
        item = json.dumps(w) + ("," if i + 1 < len(words) else tail)
        if line != head and len(line) + 1 + len(item) > width:
            lines.append(line)
            line = " " * len(head) + item
        else:
            line += ("" if line == head else " ") + item
    return lines + [line if words else head + tail]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", choices=["l", "m", "s"], required=True)
    ap.add_argument("--state", required=True, help="train.py's state.json for the rung")
    ap.add_argument("--recipe", default=os.path.join(HERE, "recipe.json"))
    ap.add_argument("--append", action="store_true", help="write them into --recipe")
    args = ap.parse_args()
    recipe = json.load(open(args.recipe))
    done = int(recipe["sizes"][args.size][-1]["until"])
    state = json.load(open(args.state))
    entries = []  # the committed rung itself (not trained past the recipe): nothing new
    if int(state["tokens"]) != done:
        try:
            entries = since_recipe(state, done)
        except ValueError as e:
            sys.exit(f"sittings: {args.state}: {e}")
    if not args.append:
        json.dump(entries, sys.stdout, indent=1)
        print()
        return
    recipe["sizes"][args.size] += entries
    # recipe.json is hand-formatted: one sitting a line, as the committed file.
    lines = ["{", f'  "about": {json.dumps(recipe["about"], ensure_ascii=False)},', '  "sizes": {']
    sizes = list(recipe["sizes"].items())
    for k, (size, sittings) in enumerate(sizes):
        lines.append(f'    "{size}": [')
        for i, s in enumerate(sittings):
            comma = "," if i + 1 < len(sittings) else ""
            lines += wrapped(f'      {{"until": {int(s["until"])}, "args": [', s["args"], f"]}}{comma}")
        lines.append("    ]" + ("," if k + 1 < len(sizes) else ""))
    lines += ["  }", "}"]
    with open(args.recipe, "w") as fh:
        fh.write("\n".join(lines) + "\n")
    print(f"sittings: {args.size}: {len(entries)} sitting(s) appended to {args.recipe}, "
          f"until {entries[-1]['until'] if entries else done}")


if __name__ == "__main__":
    main()
