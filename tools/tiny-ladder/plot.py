#!/usr/bin/env python3
"""Plots training curves of every rung to one SVG: loss, validation NLL, and
copy / dense / needle accuracy against training tokens; copies the CSVs along."""
import argparse
import csv
import os
import shutil

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
COLOURS = {"l": "tab:blue", "m": "tab:orange", "s": "tab:green"}


def series(rows, key):
    xs, ys = [], []
    for r in rows:
        if r.get(key):
            xs.append(int(r["tokens"]) / 1e6)
            ys.append(float(r[key]))
    return xs, ys


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", default=os.path.join(HERE, "work"))
    ap.add_argument("--out", default=os.path.join(HERE, "..", "..", "models", "tiny-ladder"))
    ap.add_argument("--sizes", default="l,m,s")
    args = ap.parse_args()
    fig, axes = plt.subplots(1, 4, figsize=(18, 4.2))
    panels = [("loss", "training loss (mixed data)"), ("val_nll", "validation NLL (prose, 512)"),
              ("copy_acc", "copy token accuracy"), ("needle_acc_512", "needle answer accuracy @512")]
    os.makedirs(os.path.join(args.out, "curves"), exist_ok=True)
    for size in args.sizes.split(","):
        path = os.path.join(args.work, "runs", size, "log.csv")
        if not os.path.exists(path):
            continue
        shutil.copy(path, os.path.join(args.out, "curves", f"{size}.csv"))
        # A resumed run logs again the steps after its last checkpoint: keep the latest row.
        by_step = {int(r["step"]): r for r in csv.DictReader(open(path))}
        rows = [by_step[k] for k in sorted(by_step)]
        for ax, (key, title) in zip(axes, panels):
            xs, ys = series(rows, key)
            ax.plot(xs, ys, color=COLOURS[size], label=size)
            if key == "needle_acc_512":
                xs, ys = series(rows, "dense_acc")
                ax.plot(xs, ys, color=COLOURS[size], linestyle=":", label=f"{size} dense recall")
            ax.set_title(title)
            ax.set_xlabel("training tokens (M)")
    for ax in axes:
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    out = os.path.join(args.out, "training_curves.svg")
    fig.savefig(out, metadata={"Date": None})
    print(f"plot: {out}")


if __name__ == "__main__":
    main()
