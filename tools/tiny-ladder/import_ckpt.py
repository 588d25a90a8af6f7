#!/usr/bin/env python3
"""Turns an exported rung (export.py's folder) back into a train.py checkpoint, so that a
sitting can continue the committed ladder when WORK/runs is gone.

export.py writes the fp32 training weights rounded to bf16 under the state dict's own names
(no transposes, tied embeddings), so the weights come back as those bf16 values in fp32 and
export.py writes the same bytes again. The optimizer state was never exported: the checkpoint
has none, and train.py starts a fresh AdamW with a new warm-up. The curriculum state (step,
tokens, phase, events, sittings) comes from eval.json's training record, which
tools/tiny-ladder/evaluate.sh copied from the run's state.json; its token count must be the last
'until' of the rung in recipe.json.

--handover DIR imports a rung that a session trained but did not yet commit to the ladder:
DIR/SIZE/ holds export.py's files, the run's state.json (train.py's step, tokens, curriculum
events and every sitting's arguments) and its log.csv (the curve), so the next session continues
or exports it where the last one stopped (the runs folder does not outlive a session).
"""
import argparse
import json
import os
import shutil
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from export import read_safetensors  # noqa: E402
from model import config_for  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", choices=["l", "m", "s"], required=True)
    ap.add_argument("--ladder", default=os.path.join(HERE, "..", "..", "models", "tiny-ladder"))
    ap.add_argument("--work", default=os.path.join(HERE, "work"))
    ap.add_argument("--run", default=None, help="run folder (default WORK/runs/SIZE)")
    ap.add_argument("--handover", default=None,
                    help="folder of uncommitted rungs (SIZE/model.safetensors + SIZE/state.json)")
    args = ap.parse_args()
    rung = os.path.join(args.handover or args.ladder, args.size)
    cfg = config_for(args.size)
    with open(os.path.join(rung, "config.json")) as fh:
        hf = json.load(fh)
    for k, v in cfg.items():
        if hf[k] != v:
            sys.exit(f"import: {rung}/config.json has {k}={hf[k]}, model.py says {v}")
    # The rung must have been trained with the tokenizer the sitting will use.
    for f in ("tokenizer.json", "tokenizer_config.json"):
        with open(os.path.join(rung, f), "rb") as a, \
                open(os.path.join(args.work, "tokenizer", f), "rb") as b:
            if a.read() != b.read():
                sys.exit(f"import: {rung}/{f} differs from {args.work}/tokenizer/{f}")

    if args.handover:
        with open(os.path.join(rung, "state.json")) as fh:
            record = json.load(fh)
        until = record["tokens"]
    else:
        with open(os.path.join(HERE, "recipe.json")) as fh:
            until = int(json.load(fh)["sizes"][args.size][-1]["until"])
        with open(os.path.join(args.ladder, "eval.json")) as fh:
            record = json.load(fh)[args.size]["training"]
    if record["tokens"] != until or record["phase"] != "mix":
        sys.exit(f"import: eval.json has {record['tokens']} tokens, phase {record['phase']}; "
                 f"recipe.json ends {args.size} at {until} in mix")
    state = {"step": record["step"], "tokens": until, "phase": "mix", "stage": record["stage"],
             "phase_tokens": 0, "wall_s": record["wall_s"], "events": record["events"],
             "sittings": record["sittings"]}
    state["events"].append({"step": state["step"], "tokens": until,
                            "msg": f"imported from {args.size}/model.safetensors (bf16); "
                                   "fresh optimizer"})

    weights = read_safetensors(os.path.join(rung, "model.safetensors"))
    run = args.run or os.path.join(args.work, "runs", args.size)
    os.makedirs(run, exist_ok=True)
    ckpt = os.path.join(run, "ckpt.pt")
    if os.path.exists(ckpt):
        sys.exit(f"import: {ckpt} exists; remove it to start over from the export")
    torch.save({"model": weights, "state": state, "config": cfg, "size": args.size}, ckpt)
    # The curve so far (the ladder's curves/SIZE.csv, or the handover's log.csv): train.py
    # appends to it, so plot.py draws the rung's whole history, not the last sittings alone.
    curve = (os.path.join(rung, "log.csv") if args.handover else
             os.path.join(args.ladder, "curves", f"{args.size}.csv"))
    if os.path.exists(curve):
        shutil.copy(curve, os.path.join(run, "log.csv"))
    else:
        print(f"import: no training curve at {curve}; the run's log.csv starts empty")
    n = sum(t.numel() for t in weights.values())
    print(f"import: {rung} -> {ckpt} ({n} params, step {state['step']}, {until} tokens)")


if __name__ == "__main__":
    main()
