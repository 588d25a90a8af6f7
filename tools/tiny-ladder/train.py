#!/usr/bin/env python3
"""Trains one rung of the tiny ladder with a copy-first curriculum.

Phases (the state is in the checkpoint, so a run resumes where it stopped):
  copy   100% "repeat this string" at 128 tokens until copy accuracy > --copy-gate;
  dense  dense multi-fact recall (60%), copy (20%), prose (20%) at 256 tokens
         until recall accuracy > 0.8 or --dense-tokens;
  mix    prose 55%, needles 25%, dense 10%, copy 10%; length 512 -> 1024 -> 2048,
         moving up when needle accuracy at the current length > 0.8 or after
         --stage-tokens at that length. A later sitting may set its own weights
         (--mix) and one fixed length (--seq-len).
Every --eval-every steps a fixed evaluation set is scored and one CSV row is
written: tokens, loss, copy/dense/needle accuracy, validation NLL.
--device cuda trains with bf16 autocast and evaluates in f32; a larger --batch-tokens
then packs several sequences per step. --bf16 does the same on a CPU with bf16 matrix units
(AMX, AVX-512 BF16): a step of l at 2,048 positions on one Xeon (Emerald Rapids) thread 4.3-4.7 s
in f32, 0.93-0.95 s in bf16; m 0.77 s, s 0.50 s. A checkpoint without optimizer state (import_ckpt.py)
starts a fresh optimizer with a new warm-up.
"""
import argparse
import contextlib
import csv
import json
import math
import os
import random
import sys
import time
import zlib

import numpy as np
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from bpe import Tokenizer  # noqa: E402
from episodes import Episodes  # noqa: E402
from model import Qwen2, config_for  # noqa: E402

LENGTHS = [512, 1024, 2048]
FIELDS = ["step", "tokens", "phase", "seq_len", "lr", "loss", "copy_acc", "dense_acc",
          "needle_acc_512", "needle_acc_cur", "val_nll", "tok_per_s", "wall_s"]


def log(msg):
    print(time.strftime("%H:%M:%S"), msg, flush=True)


def load_prose(work, tok, split):
    """Token ids of a corpus split (documents joined by <|endoftext|>), cached."""
    path = os.path.join(work, "data", f"{split}.u16.npy")
    docs = [json.loads(l)["text"] for l in open(os.path.join(work, "corpus", f"{split}.jsonl"),
                                                 encoding="utf-8")]
    if not os.path.exists(path):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        ids = []
        for d in docs:
            ids += tok.encode(d) + [tok.eot]
        np.save(path + ".tmp.npy", np.array(ids, dtype=np.uint16))
        os.replace(path + ".tmp.npy", path)
    return docs, np.load(path)


class Mixer:
    def __init__(self, ep, prose_ids):
        self.ep, self.prose = ep, prose_ids

    def prose_row(self, rng, T):
        i = rng.randrange(len(self.prose) - T - 1)
        return self.prose[i:i + T].tolist(), [False] * T

    def batch(self, rng, mix, T, B):
        kinds = list(mix)
        weights = [mix[k] for k in kinds]
        rows, masks = [], []
        for _ in range(B):
            k = rng.choices(kinds, weights)[0]
            ids, m = {"copy": self.ep.copy_row, "dense": self.ep.dense_row,
                      "needle": self.ep.needle_row, "prose": self.prose_row}[k](rng, T + 1)
            rows.append(ids)
            masks.append(m)
        return torch.tensor(rows, dtype=torch.long), torch.tensor(masks, dtype=torch.bool)


def schedule(state, args):
    """(mix, seq_len) for the current curriculum state."""
    if state["phase"] == "copy":
        return {"copy": 1.0}, 128
    if state["phase"] == "dense":
        return {"dense": 0.6, "copy": 0.2, "prose": 0.2}, 256
    mix = args.mix or {"prose": 0.55, "needle": 0.25, "dense": 0.1, "copy": 0.1}
    return mix, args.seq_len or LENGTHS[state["stage"]]


def parse_mix(text):
    """"prose=0.35,needle=0.35,dense=0.2,copy=0.1" -> dict; kinds checked, weights > 0."""
    mix = {}
    for part in text.split(","):
        kind, _, w = part.partition("=")
        if kind not in ("prose", "needle", "dense", "copy") or not w:
            raise argparse.ArgumentTypeError(f"--mix: bad entry '{part}' (kind=weight)")
        mix[kind] = float(w)
        if mix[kind] <= 0:
            raise argparse.ArgumentTypeError(f"--mix: weight of {kind} must be > 0")
    return mix


def answer_runs(mask_row):
    runs, start = [], None
    for i, m in enumerate(mask_row + [False]):
        if m and start is None:
            start = i
        elif not m and start is not None:
            runs.append((start, i))
            start = None
    return runs


@torch.no_grad()
def score(model, ids, mask, chunk=8):
    """Token accuracy and whole-answer exact match on masked tokens."""
    tok_ok = tok_n = ans_ok = ans_n = 0
    dev = next(model.parameters()).device
    for b in range(0, ids.shape[0], chunk):
        x = ids[b:b + chunk].to(dev)
        m = mask[b:b + chunk].to(dev)
        pred = model(x[:, :-1]).argmax(-1)
        hit = (pred == x[:, 1:]) & m[:, 1:]
        tok_ok += int(hit.sum())
        tok_n += int(m[:, 1:].sum())
        for r in range(x.shape[0]):
            row_m = m[r, 1:].tolist()
            row_h = hit[r].tolist()
            for s, e in answer_runs(row_m):
                ans_n += 1
                ans_ok += all(row_h[s:e])
    return tok_ok / max(1, tok_n), ans_ok / max(1, ans_n)


@torch.no_grad()
def val_nll(model, val_ids, T=512, n=12):
    rng = random.Random(5)
    starts = [rng.randrange(len(val_ids) - T - 1) for _ in range(n)]
    x = torch.tensor(np.stack([val_ids[s:s + T + 1] for s in starts]).astype(np.int64))
    x = x.to(next(model.parameters()).device)
    tot = 0.0
    for b in range(0, n, 4):
        lg = model(x[b:b + 4, :-1])
        tot += float(F.cross_entropy(lg.reshape(-1, lg.shape[-1]), x[b:b + 4, 1:].reshape(-1),
                                     reduction="sum"))
    return tot / (n * T)


class EvalSets:
    """Fixed evaluation batches built from the validation split."""

    def __init__(self, ep_val, val_ids):
        self.mixer = Mixer(ep_val, val_ids)
        self.cache = {}

    def get(self, kind, T, n):
        key = (kind, T, n)
        if key not in self.cache:
            rng = random.Random(zlib.crc32(repr(key).encode()))
            self.cache[key] = self.mixer.batch(rng, {kind: 1.0}, T, n)
        return self.cache[key]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", choices=["l", "m", "s"], required=True)
    ap.add_argument("--work", default=os.path.join(HERE, "work"))
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--device", default="cpu", help="cpu or cuda")
    ap.add_argument("--bf16", action="store_true",
                    help="bf16 autocast on the CPU too (weights, optimizer and evaluation stay f32)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--lr", type=float, default=None)
    ap.add_argument("--batch-tokens", type=int, default=2048)
    ap.add_argument("--max-tokens", type=float, default=200e6)
    ap.add_argument("--max-minutes", type=float, default=1e9)
    ap.add_argument("--warmup-steps", type=int, default=200,
                    help="linear warm-up from the first step (or from an import's fresh optimizer)")
    ap.add_argument("--eval-every", type=int, default=100)
    ap.add_argument("--ckpt-seconds", type=float, default=180)
    ap.add_argument("--copy-gate", type=float, default=0.9)
    ap.add_argument("--gate-tokens", type=float, default=10e6)
    ap.add_argument("--dense-tokens", type=float, default=4e6)
    ap.add_argument("--stage-tokens", type=float, default=8e6)
    ap.add_argument("--cooldown-tokens", type=float, default=0,
                    help="from this run's start, decay lr linearly to 10%% over N tokens")
    ap.add_argument("--new-cooldown", action="store_true",
                    help="start the --cooldown-tokens decay at this sitting, not an earlier one")
    ap.add_argument("--cooldown-minutes", type=float, default=0,
                    help="also decay by this sitting's wall time, whichever is further along "
                         "(a sitting with a fixed time budget ends cooled down at any speed)")
    ap.add_argument("--mix", type=parse_mix, default=None,
                    help="mix-phase weights, e.g. prose=0.35,needle=0.35,dense=0.2,copy=0.1")
    ap.add_argument("--seq-len", type=int, default=None,
                    help="fixed mix-phase length (no length stages)")
    ap.add_argument("--run", default=None, help="run folder (default WORK/runs/SIZE)")
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    dev = torch.device(args.device)
    if dev.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True  # the f32 evaluation's matmuls
    run = args.run or os.path.join(args.work, "runs", args.size)
    os.makedirs(run, exist_ok=True)
    tok = Tokenizer(os.path.join(args.work, "tokenizer", "tokenizer.json"))
    train_docs, train_ids = load_prose(args.work, tok, "train")
    val_docs, val_ids = load_prose(args.work, tok, "validation")
    log(f"prose tokens: train {len(train_ids)}, validation {len(val_ids)}")
    mixer = Mixer(Episodes(tok, train_docs), train_ids)
    evals = EvalSets(Episodes(tok, val_docs), val_ids)

    cfg = config_for(args.size)
    model = Qwen2(cfg).to(dev)
    lr = args.lr or {"s": 2e-3, "m": 1.5e-3, "l": 1e-3}[args.size]
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=lr, betas=(0.9, 0.95), eps=1e-8)
    state = {"step": 0, "tokens": 0, "phase": "copy", "stage": 0, "phase_tokens": 0,
             "wall_s": 0.0, "events": []}
    ckpt = os.path.join(run, "ckpt.pt")
    if os.path.exists(ckpt):
        saved = torch.load(ckpt, map_location="cpu")
        model.load_state_dict(saved["model"])
        state = saved["state"]
        if "opt" in saved:
            opt.load_state_dict(saved["opt"])
        else:  # imported weights: Adam's moments start at zero, so warm up again
            state["warm_from"] = state["step"]
        log(f"resumed {ckpt} at step {state['step']}, {state['tokens']} tokens, "
            f"phase {state['phase']}")
    csv_path = os.path.join(run, "log.csv")
    new_csv = not os.path.exists(csv_path)
    csv_fh = open(csv_path, "a", newline="")
    writer = csv.DictWriter(csv_fh, FIELDS)
    if new_csv:
        writer.writeheader()

    def save():
        tmp = ckpt + ".tmp"
        torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "state": state,
                    "config": cfg, "size": args.size}, tmp)
        os.replace(tmp, ckpt)
        with open(os.path.join(run, "state.json"), "w") as fh:
            json.dump(state, fh, indent=1)

    def event(msg):
        state["events"].append({"step": state["step"], "tokens": state["tokens"], "msg": msg})
        log(msg)

    log(f"size {args.size}: {sum(p.numel() for p in model.parameters())} params, lr {lr}, "
        f"{args.threads} thread(s)")
    # Every sitting's arguments, so the exported ladder says how it was trained.
    state.setdefault("sittings", []).append(
        {"step": state["step"], "tokens": state["tokens"],
         "started": time.strftime("%Y-%m-%dT%H:%M:%S"), "args": sys.argv[1:]})
    if args.new_cooldown:
        state["cooldown_from"] = state["tokens"]
    t_start, t_ckpt = time.time(), time.time()
    wall0 = state["wall_s"]
    window_tokens, window_t, losses = 0, time.time(), []
    while state["tokens"] < args.max_tokens and (time.time() - t_start) / 60 < args.max_minutes:
        mix, T = schedule(state, args)
        B = max(1, args.batch_tokens // T)
        rng = random.Random(args.seed * 1_000_003 + state["step"])
        x, _ = mixer.batch(rng, mix, T, B)
        if dev.type == "cuda":  # pinned and async: the next batch is built while the GPU runs
            x = x.pin_memory().to(dev, non_blocking=True)
        warm = min(1.0, (state["step"] - state.get("warm_from", 0) + 1) / args.warmup_steps)
        if args.cooldown_tokens:
            state.setdefault("cooldown_from", state["tokens"])
            done = (state["tokens"] - state["cooldown_from"]) / args.cooldown_tokens
            if args.cooldown_minutes:
                done = max(done, (time.time() - t_start) / 60 / args.cooldown_minutes)
            warm *= max(0.1, 1.0 - 0.9 * done)
        for g in opt.param_groups:
            g["lr"] = lr * warm
        model.train()
        with (torch.autocast(dev.type, dtype=torch.bfloat16) if dev.type == "cuda" or args.bf16
              else contextlib.nullcontext()):
            logits = model(x[:, :-1])
        loss = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.detach())  # read at the next evaluation: no GPU sync per step
        n_tok = B * T
        state["step"] += 1
        state["tokens"] += n_tok
        state["phase_tokens"] += n_tok
        window_tokens += n_tok

        if state["step"] % args.eval_every == 0:
            model.eval()
            row = {"step": state["step"], "tokens": state["tokens"], "phase": state["phase"],
                   "seq_len": T, "lr": lr * warm,
                   "loss": sum(float(v) for v in losses) / len(losses)}
            row["copy_acc"] = score(model, *evals.get("copy", 128, 16))[0]
            if state["phase"] != "copy":
                row["dense_acc"] = score(model, *evals.get("dense", 256, 16))[1]
                row["needle_acc_512"] = score(model, *evals.get("needle", 512, 24))[1]
                row["val_nll"] = val_nll(model, val_ids)
            if state["phase"] == "mix":
                row["needle_acc_cur"] = (row["needle_acc_512"] if T == 512 else
                                         score(model, *evals.get("needle", T, 12), chunk=4)[1])
            now = time.time()
            row["tok_per_s"] = window_tokens / (now - window_t)
            state["wall_s"] = wall0 + now - t_start
            row["wall_s"] = state["wall_s"]
            writer.writerow({k: (f"{v:.4f}" if isinstance(v, float) else v)
                             for k, v in row.items()})
            csv_fh.flush()
            log(" ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                         for k, v in row.items()))
            window_tokens, window_t, losses = 0, time.time(), []

            # Curriculum transitions.
            if state["phase"] == "copy":
                if row["copy_acc"] > args.copy_gate:
                    event(f"copy accuracy {row['copy_acc']:.3f} > {args.copy_gate}: -> dense")
                    state["phase"], state["phase_tokens"] = "dense", 0
                elif state["phase_tokens"] > args.gate_tokens and not state.get("gate_warned"):
                    state["gate_warned"] = True
                    event(f"GATE: no copying after {state['phase_tokens']} tokens; "
                          "change geometry or learning rate")
            elif state["phase"] == "dense":
                if row["dense_acc"] > 0.8 or state["phase_tokens"] > args.dense_tokens:
                    event(f"dense accuracy {row['dense_acc']:.3f}: -> mix at {LENGTHS[0]}")
                    state["phase"], state["phase_tokens"], state["stage"] = "mix", 0, 0
            elif state["stage"] + 1 < len(LENGTHS) and not args.seq_len:
                if row["needle_acc_cur"] > 0.8 or state["phase_tokens"] > args.stage_tokens:
                    state["stage"] += 1
                    state["phase_tokens"] = 0
                    event(f"needle accuracy {row['needle_acc_cur']:.3f} at {T}: -> "
                          f"{LENGTHS[state['stage']]}")
        if time.time() - t_ckpt > args.ckpt_seconds:
            state["wall_s"] = wall0 + time.time() - t_start
            save()
            t_ckpt = time.time()
    state["wall_s"] = wall0 + time.time() - t_start
    save()
    log(f"stopped at step {state['step']}, {state['tokens']} tokens")


if __name__ == "__main__":
    main()
