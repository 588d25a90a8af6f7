#!/usr/bin/env python3
"""Second half of device/run.sh: exports every rung a sitting trained, packs each into
OUT/<size>-<tag>.tar and scores it into OUT/summary.json the way evaluate.sh's `molt eval`
does: native needle accuracy on models/tiny-ladder/data/needles.jsonl per context (the rung
reads the prompt, greedy-decodes as many tokens as the answer has, trimmed text must match)
and NLL over consecutive 512-token windows of the validation and test splits. The committed
rungs are scored the same way (tag "committed"), beside eval.json's C++ figures, so that
before and after compare like with like.
"""
import argparse
import glob
import json
import os
import subprocess
import sys
import tarfile
import time

import torch
import torch.nn.functional as F

DEVICE_DIR = os.path.dirname(os.path.abspath(__file__))
HERE = os.path.dirname(DEVICE_DIR)
LADDER = os.path.join(HERE, "..", "..", "models", "tiny-ladder")
sys.path.insert(0, HERE)
from bpe import Tokenizer  # noqa: E402
from export import load_exported  # noqa: E402

TAR_LIMIT = 16 * 2**20  # what one returned file may weigh


@torch.no_grad()
def needle_accuracy(model, tok, items, dev):
    """items: (prompt ids, answer tokens, answer text); no KV cache: a full pass per token."""
    correct = 0
    for ids, n, answer in items:
        got = []
        for _ in range(n):
            got.append(int(model(torch.tensor([ids + got], device=dev))[0, -1].argmax()))
        correct += tok.decode(got).strip() == answer.strip()
    return correct


@torch.no_grad()
def window_nll(model, ids, dev, T=512, batch=16, windows=0):
    n = len(ids) // T if not windows else min(windows, len(ids) // T)
    x = torch.tensor(ids[:n * T], dtype=torch.long, device=dev).view(n, T)
    tot = 0.0
    for b in range(0, n, batch):
        lg = model(x[b:b + batch])[:, :-1]
        tot += float(F.cross_entropy(lg.reshape(-1, lg.shape[-1]), x[b:b + batch, 1:].reshape(-1),
                                     reduction="sum"))
    return tot / (n * (T - 1))


def pack(tar_path, members):
    with tarfile.open(tar_path, "w") as tf:
        for src, arc in members:
            if os.path.exists(src):
                tf.add(src, arcname=arc)
    size = os.path.getsize(tar_path)
    if size > TAR_LIMIT:
        print(f"finish: WARNING {tar_path} is {size / 2**20:.1f} MiB, over 16 MiB", flush=True)
    return size


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--scratch", required=True, help="run.sh's folder: TAG/runs/SIZE, TAG/logs")
    ap.add_argument("--work", default=os.path.join(HERE, "work"))
    ap.add_argument("--out", required=True)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--sizes", default="s,m,l")
    ap.add_argument("--needle-count", type=int, default=30)
    ap.add_argument("--contexts", default=None, help="needle contexts (default: all in the file)")
    ap.add_argument("--nll-windows", type=int, default=0, help="at most this many (0: all)")
    ap.add_argument("--python", default=sys.executable)
    args = ap.parse_args()
    dev = torch.device(args.device)
    if dev.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False  # score in true f32, as molt does
    sizes = args.sizes.split(",")
    t0 = time.time()
    summary = {"device": torch.cuda.get_device_name() if dev.type == "cuda" else "cpu",
               "torch": torch.__version__, "rungs": {}, "checks": {}, "tars": {}}
    committed = json.load(open(os.path.join(LADDER, "eval.json")))
    summary["committed_eval_json"] = {s: {"validation_nll": committed[s].get("validation_nll"),
                                          "test_nll": committed[s]["test_nll"],
                                          "needle": {c: v["accuracy"] for c, v in
                                                     committed[s]["needle_accuracy"].items()}}
                                      for s in sizes}

    def write_summary():
        summary["finish_seconds"] = round(time.time() - t0, 1)
        with open(os.path.join(args.out, "summary.json"), "w") as fh:
            json.dump(summary, fh, indent=1)

    # Export and pack first: the weights come back even if scoring runs out of time.
    tags = sorted(os.path.basename(d) for d in glob.glob(os.path.join(args.scratch, "*"))
                  if os.path.isdir(os.path.join(d, "runs")))
    rungs = []
    for tag in tags:
        d = os.path.join(args.scratch, tag)
        exp = os.path.join(d, "export")
        subprocess.run([args.python, os.path.join(HERE, "export.py"), "--work", args.work,
                        "--runs", os.path.join(d, "runs"), "--out", exp,
                        "--sizes", ",".join(sizes)], check=False)
        for s in sizes:
            if not os.path.exists(os.path.join(exp, s, "model.safetensors")):
                summary["rungs"].setdefault(tag, {})[s] = {"error": "no export"}
                continue
            run = os.path.join(d, "runs", s)
            members = [(os.path.join(exp, s, f), f"{s}/{f}")
                       for f in sorted(os.listdir(os.path.join(exp, s)))]
            members += [(os.path.join(exp, "fixtures", f"{s}_logits.f32"),
                         f"fixtures/{s}_logits.f32"),
                        (os.path.join(exp, "fixtures", "ids.json"), "fixtures/ids.json"),
                        (os.path.join(run, "log.csv"), f"runs/{s}/log.csv"),
                        (os.path.join(run, "state.json"), f"runs/{s}/state.json"),
                        (os.path.join(d, "logs", f"train_{s}.log"), f"logs/train_{s}.log")]
            name = f"{s}-{tag}.tar"
            summary["tars"][name] = pack(os.path.join(args.out, name), members)
            rungs.append((tag, s, os.path.join(exp, s)))
    rungs += [("committed", s, os.path.join(LADDER, s)) for s in sizes]  # scored last
    write_summary()

    tok = Tokenizer(os.path.join(args.work, "tokenizer", "tokenizer.json"))
    needles = [json.loads(l) for l in
               open(os.path.join(LADDER, "data", "needles.jsonl"), encoding="utf-8")]
    contexts = sorted({n["context"] for n in needles})
    if args.contexts:
        contexts = [int(c) for c in args.contexts.split(",")]
    by_context = {c: [(tok.encode(n["prompt"]), len(tok.encode(n["answer"])), n["answer"])
                      for n in needles if n["context"] == c][:args.needle_count] for c in contexts}
    val_docs = [json.loads(l)["text"] for l in
                open(os.path.join(args.work, "corpus", "validation.jsonl"), encoding="utf-8")]
    texts = {"validation": tok.encode("\n\n".join(val_docs) + "\n"),
             "test": tok.encode(open(os.path.join(LADDER, "data", "test.txt"),
                                     encoding="utf-8").read())}
    for tag, s, path in rungs:
        r = summary["rungs"].setdefault(tag, {}).setdefault(s, {})
        try:
            model = load_exported(path).to(dev)
            for split, ids in texts.items():
                r[f"{split}_nll"] = round(window_nll(model, ids, dev, windows=args.nll_windows), 4)
            r["needle"], r["needle_correct"] = {}, {}
            for c, items in by_context.items():
                k = needle_accuracy(model, tok, items, dev)
                r["needle"][str(c)] = round(k / len(items), 4)
                r["needle_correct"][str(c)] = f"{k}/{len(items)}"
            if tag != "committed":
                rc = os.path.join(args.scratch, tag, f"rc_{s}")
                r["train_rc"] = int(open(rc).read()) if os.path.exists(rc) else None
                run = os.path.join(args.scratch, tag, "runs", s)
                st = json.load(open(os.path.join(run, "state.json")))
                r.update(tokens=st["tokens"], step=st["step"], sitting=st["sittings"][-1])
                rows = open(os.path.join(run, "log.csv")).read().splitlines()
                if len(rows) > 1:
                    r["last_csv_row"] = dict(zip(rows[0].split(","), rows[-1].split(",")))
        except Exception as e:  # one rung's failure must not lose the others' figures
            r["error"] = repr(e)
        print(f"finish: {tag} {s}: {json.dumps(r)[:400]}", flush=True)
        write_summary()
    for tag, by_size in summary["rungs"].items():
        try:
            nll = [by_size[s]["validation_nll"] for s in ("l", "m", "s")]
            summary["checks"][tag] = {
                "validation_nll_l<m<s": nll[0] < nll[1] < nll[2],
                "needle_2048>=0.8": {s: by_size[s]["needle"].get("2048", 0) >= 0.8 for s in sizes}}
        except (KeyError, TypeError):
            summary["checks"][tag] = "incomplete"
    write_summary()
    print(json.dumps(summary["checks"], indent=1))


if __name__ == "__main__":
    main()
