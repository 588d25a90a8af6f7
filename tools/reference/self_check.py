#!/usr/bin/env python3
"""Checks that the golden fixtures are reproducible and that they can catch real bugs.

For every fixture under tests/fixtures/golden/:
  1. the reference recomputes logits.f32 from the stored checkpoint (to f32 rounding);
  2. causality: the logits of every prefix ids[:t] equal row t-1 of the full run;
  3. sensitivity: plausible engine bugs (each a one-line change to the reference) move the
     logits by far more than the C++ golden test's tolerance (1e-4 of the row's max |logit|).

Usage: python3 tools/reference/self_check.py [--dir tests/fixtures/golden]
"""

import argparse
import glob
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from qwen2_reference import Qwen2Reference  # noqa: E402

TOLERANCE = 1e-4


class InterleavedRope(Qwen2Reference):
    """GPT-J style RoPE (pairs 2i, 2i+1) instead of Hugging Face's rotate-half."""

    def rope_cos_sin(self, positions):
        cos, sin = super().rope_cos_sin(positions)
        half = cos.shape[-1] // 2
        return np.repeat(cos[:, :half], 2, axis=-1), np.repeat(sin[:, :half], 2, axis=-1)

    @staticmethod
    def rotate_half(x):
        out = np.empty_like(x)
        out[..., 0::2], out[..., 1::2] = -x[..., 1::2], x[..., 0::2]
        return out


class KvHeadModulo(Qwen2Reference):
    """Query head h reads kv head h % n_kv instead of h // (n_heads / n_kv)."""

    @staticmethod
    def repeat_kv(x, n_rep):
        return np.tile(x, (n_rep, 1, 1))


class NoBias(Qwen2Reference):
    def w(self, name, shape):
        v = super().w(name, shape)
        return np.zeros_like(v) if name.endswith(".bias") else v


class NoRope(Qwen2Reference):
    """Positions ignored. (Shifting every position by a constant would be invisible here:
    RoPE scores depend on position differences only; decode-vs-prefill tests catch that.)"""

    def rope_cos_sin(self, positions):
        cos, sin = super().rope_cos_sin(positions)
        return np.ones_like(cos), np.zeros_like(sin)


class NoCausalMask(Qwen2Reference):
    @staticmethod
    def causal_mask(t):
        return np.ones((t, t), dtype=bool)


class WrongTheta(Qwen2Reference):
    def __init__(self, d):
        super().__init__(d)
        self.cfg.rope_theta = 1e6 if self.cfg.rope_theta == 1e4 else 1e4


class ScaleByHeadDim(Qwen2Reference):
    """Scores scaled by 1/head_dim instead of 1/sqrt(head_dim)."""

    def __init__(self, d):
        super().__init__(d)
        self.scaling = 1.0 / self.cfg.head_dim


class GemmaNorm(Qwen2Reference):
    """RMSNorm with (1 + w) as Gemma does."""

    def rms_norm(self, x, weight):
        return super().rms_norm(x, 1.0 + weight)


class NoLayerNormWeight(Qwen2Reference):
    def rms_norm(self, x, weight):
        return super().rms_norm(x, np.ones_like(weight))


MUTANTS = [InterleavedRope, KvHeadModulo, NoBias, NoRope, NoCausalMask, WrongTheta, ScaleByHeadDim,
           GemmaNorm, NoLayerNormWeight]


def rel_err(a, b):
    return float((np.abs(a - b) / np.abs(b).max(axis=1, keepdims=True)).max())


def check(d):
    ids = [int(t) for t in open(os.path.join(d, "ids.txt")).read().split()]
    ref = Qwen2Reference(d)
    full = ref.logits(ids)
    stored = np.fromfile(os.path.join(d, "logits.f32"), dtype="<f4").reshape(len(ids), -1)
    ok = True
    err = rel_err(stored.astype(np.float64), full)
    ok &= err < 1e-7
    prefix = max(rel_err(ref.logits(ids[:t])[-1:], full[t - 1 : t]) for t in range(1, len(ids) + 1))
    ok &= prefix < 1e-12
    line = [f"{os.path.basename(d)}: stored {err:.0e}, prefix {prefix:.0e}"]
    for m in MUTANTS:
        e = rel_err(m(d).logits(ids), full)
        caught = e > 10 * TOLERANCE
        # A GQA head-order bug is invisible with one kv head or one query head per kv head.
        kv = ref.cfg.num_key_value_heads
        invisible = m is KvHeadModulo and kv in (1, ref.cfg.num_attention_heads)
        ok &= caught or invisible
        note = "" if caught else " (invisible here)" if invisible else " (NOT CAUGHT)"
        line.append(f"{m.__name__} {e:.0e}{note}")
    print(", ".join(line))
    return ok


def main():
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", default=os.path.join(repo, "tests", "fixtures", "golden"))
    args = ap.parse_args()
    dirs = sorted(p.rstrip("/") for p in glob.glob(os.path.join(args.dir, "*/")))
    if not dirs:
        sys.exit(f"no fixtures under {args.dir}")
    results = [check(d) for d in dirs]
    print(f"{sum(results)} passed, {len(results) - sum(results)} failed")
    sys.exit(0 if all(results) else 1)


if __name__ == "__main__":
    main()
