#!/usr/bin/env python3
"""Scores the exported rungs (bf16 weights, f32 compute) and writes eval.json.

- validation / test NLL per token (windows of --context tokens);
- copy token accuracy and dense-recall answer accuracy (fixed seeded sets);
- needle accuracy per context length on the committed needle set (an answer counts
  when every answer token is the argmax: the same as greedy decoding);
- token-identity cache: NLL of tokens [P, 2P) after a P-token prefix whose K/V is
  the model's own versus each prefix token's mean K/V (pre-RoPE keys, re-rotated
  at the position). A large gap shows the model uses context beyond token identity.
"""
import argparse
import json
import os
import random
import sys

import numpy as np
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from bpe import Tokenizer  # noqa: E402
from episodes import Episodes  # noqa: E402
from export import load_exported  # noqa: E402
from model import rotate_half  # noqa: E402
from train import Mixer, answer_runs, load_prose, score  # noqa: E402


@torch.no_grad()
def window_nll(model, ids, T, max_windows=None):
    n = (len(ids) - 1) // T
    if max_windows:
        n = min(n, max_windows)
    tot, cnt = 0.0, 0
    for b in range(0, n, 4):
        rows = [ids[i * T:i * T + T + 1] for i in range(b, min(n, b + 4))]
        x = torch.tensor(np.stack(rows).astype(np.int64))
        lg = model(x[:, :-1])
        tot += float(F.cross_entropy(lg.reshape(-1, lg.shape[-1]), x[:, 1:].reshape(-1),
                                     reduction="sum"))
        cnt += x[:, 1:].numel()
    return tot / cnt


@torch.no_grad()
def needle_accuracy(model, tok, items):
    by_ctx = {}
    for it in items:
        p = tok.encode(it["prompt"])
        a = tok.encode(it["prompt"] + it["answer"])[len(p):]
        if tok.encode(it["prompt"] + it["answer"])[:len(p)] != p:
            full = tok.encode(it["prompt"] + it["answer"])
            a = full[len(p):]
        x = torch.tensor([p + a])
        pred = model(x[:, :-1])[0].argmax(-1)
        ok = all(int(pred[len(p) - 1 + j]) == a[j] for j in range(len(a)))
        c = it["context"]
        by_ctx.setdefault(c, [0, 0])
        by_ctx[c][0] += ok
        by_ctx[c][1] += 1
    return {str(c): {"accuracy": v[0] / v[1], "count": v[1], "prompt_tokens_approx": c}
            for c, v in sorted(by_ctx.items())}


def attn_forward(attn, x, cos, sin, mask, override=None):
    """Attention.forward with optional replaced prefix K/V (pre-RoPE), returns (y, k, v)."""
    B, T, _ = x.shape
    q = attn.q_proj(x).view(B, T, attn.nh, attn.hd).transpose(1, 2)
    k = attn.k_proj(x).view(B, T, attn.nkv, attn.hd).transpose(1, 2)
    v = attn.v_proj(x).view(B, T, attn.nkv, attn.hd).transpose(1, 2)
    k_pre, v_raw = k, v
    if override is not None:
        kp, vp, P = override
        k = torch.cat([kp, k[:, :, P:]], dim=2)
        v = torch.cat([vp, v[:, :, P:]], dim=2)
    q = q * cos + rotate_half(q) * sin
    k = k * cos + rotate_half(k) * sin
    rep = attn.nh // attn.nkv
    kk, vv = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
    att = F.softmax((q @ kk.transpose(-1, -2)) / attn.hd ** 0.5 + mask, dim=-1)
    y = (att @ vv).transpose(1, 2).reshape(B, T, attn.nh * attn.hd)
    return attn.o_proj(y), k_pre, v_raw


@torch.no_grad()
def forward_kv(model, ids, tables=None, P=0):
    T = ids.shape[1]
    cos, sin, mask = model.tables(T)
    x = model.model.embed_tokens(ids)
    kvs = []
    for li, layer in enumerate(model.model.layers):
        ov = None
        if tables is not None:
            kt, vt = tables[li]
            pref = ids[:, :P]
            ov = (kt[pref].permute(0, 2, 1, 3), vt[pref].permute(0, 2, 1, 3), P)
        h, k, v = attn_forward(layer.self_attn, layer.input_layernorm(x), cos, sin, mask, ov)
        kvs.append((k, v))
        x = x + h
        x = x + layer.mlp(layer.post_attention_layernorm(x))
    return model.model.norm(x) @ model.model.embed_tokens.weight.t(), kvs


@torch.no_grad()
def identity_cache_test(model, calib_ids, test_ids, P=256, n_calib=120, n_test=24):
    c = model.c
    V, L, nkv, hd = c["vocab_size"], c["num_hidden_layers"], c["num_key_value_heads"], c["head_dim"]
    ksum = torch.zeros(L, V, nkv, hd)
    vsum = torch.zeros(L, V, nkv, hd)
    cnt = torch.zeros(V)
    rng = random.Random(3)
    for _ in range(n_calib // 4):
        rows = [calib_ids[s:s + 512] for s in (rng.randrange(len(calib_ids) - 513) for _ in range(4))]
        x = torch.tensor(np.stack(rows).astype(np.int64))
        _, kvs = forward_kv(model, x)
        flat = x.reshape(-1)
        cnt.index_add_(0, flat, torch.ones(flat.numel()))
        for li, (k, v) in enumerate(kvs):
            ksum[li].index_add_(0, flat, k.permute(0, 2, 1, 3).reshape(-1, nkv, hd))
            vsum[li].index_add_(0, flat, v.permute(0, 2, 1, 3).reshape(-1, nkv, hd))
    seen = cnt > 0
    tables = []
    for li in range(L):
        gk = ksum[li][seen].sum(0) / cnt.sum()
        gv = vsum[li][seen].sum(0) / cnt.sum()
        kt = torch.where(seen[:, None, None], ksum[li] / cnt.clamp(min=1)[:, None, None], gk)
        vt = torch.where(seen[:, None, None], vsum[li] / cnt.clamp(min=1)[:, None, None], gv)
        tables.append((kt, vt))
    own = ident = 0.0
    n = 0
    for s in range(0, min(n_test, (len(test_ids) - 1) // (2 * P))):
        x = torch.tensor(test_ids[s * 2 * P:s * 2 * P + 2 * P + 1].astype(np.int64))[None]
        for tab, acc in ((None, "own"), (tables, "ident")):
            lg, _ = forward_kv(model, x[:, :-1], tab, P)
            nll = float(F.cross_entropy(lg[0, P:], x[0, P + 1:]))
            if acc == "own":
                own += nll
            else:
                ident += nll
        n += 1
    # Reference: no prefix at all (the suffix read alone).
    alone = 0.0
    for s in range(n):
        x = torch.tensor(test_ids[s * 2 * P + P:s * 2 * P + 2 * P + 1].astype(np.int64))[None]
        lg, _ = forward_kv(model, x[:, :-1])
        alone += float(F.cross_entropy(lg[0], x[0, 1:]))
    return {"prefix_tokens": P, "windows": n, "nll_own_cache": own / n,
            "nll_token_identity_cache": ident / n, "nll_no_prefix": alone / n}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", default=os.path.join(HERE, "work"))
    ap.add_argument("--ladder", default=os.path.join(HERE, "..", "..", "models", "tiny-ladder"))
    ap.add_argument("--sizes", default="l,m,s")
    ap.add_argument("--context", type=int, default=512)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--quick", action="store_true", help="fewer windows (smoke test)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    ladder = os.path.abspath(args.ladder)
    tok = Tokenizer(os.path.join(args.work, "tokenizer", "tokenizer.json"))
    train_docs, train_ids = load_prose(args.work, tok, "train")
    val_docs, val_ids = load_prose(args.work, tok, "validation")
    test_docs, test_ids = load_prose(args.work, tok, "test")
    needles = [json.loads(l) for l in open(os.path.join(ladder, "data", "needles.jsonl"))]
    if args.quick:
        needles = [n for i, n in enumerate(needles) if i % 10 == 0]
    mixer = Mixer(Episodes(tok, val_docs), val_ids)
    copy_set = mixer.batch(random.Random(11), {"copy": 1.0}, 128, 32)
    dense_set = mixer.batch(random.Random(12), {"dense": 1.0}, 256, 32)
    path = os.path.join(ladder, "eval.json")
    result = json.load(open(path)) if os.path.exists(path) else {}
    for size in args.sizes.split(","):
        d = os.path.join(ladder, size)
        if not os.path.exists(os.path.join(d, "model.safetensors")):
            continue
        model = load_exported(d)
        mw = 8 if args.quick else None
        r = {
            "validation_nll": window_nll(model, val_ids, args.context, mw),
            "test_nll": window_nll(model, test_ids, args.context, mw),
            "context": args.context,
            "copy_token_accuracy": score(model, *copy_set)[0],
            "dense_answer_accuracy": score(model, *dense_set)[1],
            "needle_accuracy": needle_accuracy(model, tok, needles),
            "token_identity_cache": identity_cache_test(
                model, train_ids, test_ids, n_calib=16 if args.quick else 120,
                n_test=4 if args.quick else 24),
        }
        r["quick"] = args.quick
        state_path = os.path.join(args.work, "runs", size, "state.json")
        if os.path.exists(state_path):
            st = json.load(open(state_path))
            r["trained_tokens"] = st["tokens"]
            r["trained_steps"] = st["step"]
            r["train_wall_s"] = round(st["wall_s"])
            r["final_phase"] = st["phase"]
        result[size] = r
        print(size, json.dumps(r))
        with open(path, "w") as fh:
            json.dump(result, fh, indent=1)


if __name__ == "__main__":
    main()
