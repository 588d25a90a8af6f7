#!/usr/bin/env python3
"""Writes the golden Qwen2 fixtures under tests/fixtures/golden/<name>/.

Each fixture is a complete, tiny, random Hugging Face Qwen2ForCausalLM checkpoint
(config.json, generation_config.json, model.safetensors or 3 shards + index) plus
  ids.txt     space-separated token ids (12-20 of them)
  logits.f32  float32 little-endian [T, vocab]: the float64 reference logits
              (qwen2_reference.py) of those ids, computed from the weights as stored,
              i.e. after rounding to bf16 / f16, re-read from the written files.
Deterministic: every fixture has its own seed; rerunning rewrites identical bytes.

Usage: python3 tools/reference/make_fixtures.py [--out tests/fixtures/golden]
"""

import argparse
import json
import os
import shutil
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_np  # noqa: E402
from qwen2_reference import Qwen2Reference  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# What each fixture covers (see tests/fixtures/golden/README.md for the table).
FIXTURES = [
    dict(name="f32_untied_mha", seed=1, dtype="F32", hidden=64, layers=2, heads=4, kv_heads=4,
         intermediate=176, vocab=300, theta=1e4, tied=False, style="4.43", n_ids=16),
    dict(name="bf16_tied_hd64", seed=2, dtype="BF16", hidden=128, layers=2, heads=2, kv_heads=1,
         intermediate=224, vocab=320, theta=1e6, tied=True, style="4.43", n_ids=20),
    dict(name="f16_gqa7_odd", seed=3, dtype="F16", hidden=70, layers=2, heads=7, kv_heads=1,
         intermediate=147, vocab=397, theta=1e6, tied=False, style="4.51", n_ids=13),
    dict(name="bf16_gqa3_hd20_sharded", seed=4, dtype="BF16", hidden=120, layers=3, heads=6,
         kv_heads=2, intermediate=136, vocab=411, theta=1e4, tied=False, style="4.51", n_ids=18,
         shards=3),
    dict(name="f32_tied_explicit_head_dim", seed=5, dtype="F32", hidden=48, layers=2, heads=4,
         kv_heads=2, head_dim=16, intermediate=96, vocab=300, theta=1e4, tied=True,
         style="4.51", n_ids=12),
    dict(name="f16_tied_gqa3_theta1e6", seed=6, dtype="F16", hidden=54, layers=3, heads=3,
         kv_heads=1, intermediate=101, vocab=333, theta=1e6, tied=True, style="4.43", n_ids=15),
]

TORCH_DTYPE = {"F32": "float32", "BF16": "bfloat16", "F16": "float16"}


def head_dim(spec):
    return spec.get("head_dim") or spec["hidden"] // spec["heads"]


def make_weights(spec):
    """Random float32 weights scaled so activations stay O(1): linear weights
    N(0, 1/fan_in), norm weights near 1, small biases, embeddings N(0, 0.25)."""
    rng = np.random.default_rng(spec["seed"])
    E, F, V = spec["hidden"], spec["intermediate"], spec["vocab"]
    H, KV, D = spec["heads"], spec["kv_heads"], head_dim(spec)

    def linear(rows, cols, gain=1.0):
        return (rng.standard_normal((rows, cols)) * gain / np.sqrt(cols)).astype(np.float32)

    def norm(n):
        return (1.0 + 0.1 * rng.standard_normal(n)).astype(np.float32)

    def bias(n, scale):
        return (scale * rng.standard_normal(n)).astype(np.float32)

    w = {"model.embed_tokens.weight": (0.5 * rng.standard_normal((V, E))).astype(np.float32)}
    for i in range(spec["layers"]):
        p = f"model.layers.{i}."
        # q and k get gain 2 so attention is peaked rather than uniform: that makes the
        # logits depend on RoPE angles, the causal mask and the GQA head mapping.
        w[p + "self_attn.q_proj.weight"] = linear(H * D, E, 2.0)
        w[p + "self_attn.k_proj.weight"] = linear(KV * D, E, 2.0)
        w[p + "self_attn.v_proj.weight"] = linear(KV * D, E)
        w[p + "self_attn.o_proj.weight"] = linear(E, H * D)
        w[p + "self_attn.q_proj.bias"] = bias(H * D, 0.2)
        w[p + "self_attn.k_proj.bias"] = bias(KV * D, 0.2)
        w[p + "self_attn.v_proj.bias"] = bias(KV * D, 0.1)
        w[p + "mlp.gate_proj.weight"] = linear(F, E)
        w[p + "mlp.up_proj.weight"] = linear(F, E)
        w[p + "mlp.down_proj.weight"] = linear(E, F)
        w[p + "input_layernorm.weight"] = norm(E)
        w[p + "post_attention_layernorm.weight"] = norm(E)
    w["model.norm.weight"] = norm(E)
    if not spec["tied"]:
        w["lm_head.weight"] = linear(V, E, 2.0)
    return w, rng


def config_json(spec):
    """config.json as transformers writes it for Qwen2 (two vintages: 4.43 as in the
    Qwen2.5 release, 4.51 with rope_scaling/sliding_window null and an explicit head_dim)."""
    V = spec["vocab"]
    c = {
        "architectures": ["Qwen2ForCausalLM"],
        "attention_dropout": 0.0,
        "bos_token_id": V - 3,
        "eos_token_id": V - 2,
        "hidden_act": "silu",
        "hidden_size": spec["hidden"],
        "initializer_range": 0.02,
        "intermediate_size": spec["intermediate"],
        "max_position_embeddings": 4096,
        "max_window_layers": spec["layers"],
        "model_type": "qwen2",
        "num_attention_heads": spec["heads"],
        "num_hidden_layers": spec["layers"],
        "num_key_value_heads": spec["kv_heads"],
        "rms_norm_eps": 1e-6,
        "rope_theta": spec["theta"],
        "sliding_window": 4096,
        "tie_word_embeddings": spec["tied"],
        "torch_dtype": TORCH_DTYPE[spec["dtype"]],
        "transformers_version": "4.43.1",
        "use_cache": True,
        "use_sliding_window": False,
        "vocab_size": V,
    }
    if spec["style"] == "4.51":
        c["rope_scaling"] = None
        c["sliding_window"] = None
        c["transformers_version"] = "4.51.3"
        if "head_dim" in spec:
            c["head_dim"] = spec["head_dim"]
    return dict(sorted(c.items()))


def generation_config_json(spec):
    V = spec["vocab"]
    g = {
        "bos_token_id": V - 3,
        "do_sample": True,
        # Qwen2.5 Instruct lists two eos ids; one fixture style keeps a single int.
        "eos_token_id": [V - 2, V - 3] if spec["style"] == "4.43" else V - 2,
        "pad_token_id": V - 3,
        "repetition_penalty": 1.05,
        "temperature": 0.7,
        "top_k": 20,
        "top_p": 0.8,
        "transformers_version": "4.43.1" if spec["style"] == "4.43" else "4.51.3",
    }
    return g


def write_json(path, obj):
    with open(path, "w") as f:
        json.dump(obj, f, indent=2)
        f.write("\n")


def make_fixture(spec, out_root):
    d = os.path.join(out_root, spec["name"])
    if os.path.exists(d):
        shutil.rmtree(d)
    os.makedirs(d)
    weights, rng = make_weights(spec)
    stored = {n: safetensors_np.encode(v, spec["dtype"]) for n, v in weights.items()}
    meta = {"format": "pt"}
    if spec.get("shards"):
        safetensors_np.write_sharded(d, stored, spec["shards"], meta)
    else:
        safetensors_np.write_file(os.path.join(d, "model.safetensors"), stored, meta)
    write_json(os.path.join(d, "config.json"), config_json(spec))
    write_json(os.path.join(d, "generation_config.json"), generation_config_json(spec))

    V = spec["vocab"]
    ids = rng.integers(0, V, size=spec["n_ids"])
    ids[1], ids[-2] = 0, V - 1  # the first and last rows of the embedding
    ids[4] = ids[2]  # a repeated token at two positions: only RoPE tells them apart
    with open(os.path.join(d, "ids.txt"), "w") as f:
        f.write(" ".join(str(int(t)) for t in ids) + "\n")

    # The reference reads the checkpoint back from disk: the weights as stored.
    ref = Qwen2Reference(d)
    logits = ref.logits(ids)
    logits.astype("<f4").tofile(os.path.join(d, "logits.f32"))

    # How far an f32 evaluation of the same arithmetic is from float64: the floor any f32
    # engine should reach (reported, not stored).
    f32 = Qwen2Reference(d, np.float32).logits(ids).astype(np.float64)
    row_max = np.abs(logits).max(axis=1, keepdims=True)
    f32_err = float((np.abs(f32 - logits) / row_max).max())
    size = sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d))
    print(f"{spec['name']:30s} T={len(ids):2d} vocab={V} head_dim={head_dim(spec)} "
          f"|logit|max={np.abs(logits).max():6.2f} std={logits.std():5.2f} "
          f"f32-vs-f64 rel={f32_err:.1e} {size / 1024:6.0f} KiB")
    return size


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=os.path.join(REPO, "tests", "fixtures", "golden"))
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    total = sum(make_fixture(spec, args.out) for spec in FIXTURES)
    print(f"total {total / 1024:.0f} KiB in {args.out}")


if __name__ == "__main__":
    main()
