#!/usr/bin/env python3
"""An independent float64 reference of the Hugging Face Qwen2 forward pass, on NumPy.

Reads a Hugging Face Qwen2ForCausalLM checkpoint folder (config.json and model.safetensors or
shards + model.safetensors.index.json) and computes the logits [T, vocab] of a list of token
ids, following transformers' modeling_qwen2.py step by step (eager attention, no cache):

  h = embed_tokens[ids]
  per layer:  x = RMSNorm(h) · w_in
              q, k, v = x Wqᵀ + bq, x Wkᵀ + bk, x Wvᵀ + bv   (per head: [T, heads, head_dim])
              q, k = rotate_half RoPE at positions 0..T-1
              k, v repeated n_heads / n_kv_heads times (repeat_kv)
              a = softmax(q kᵀ / sqrt(head_dim) + causal mask) v
              h = h + a Woᵀ
              x = RMSNorm(h) · w_post
              h = h + Wdown (silu(x Wgateᵀ) * x Wupᵀ)
  logits = RMSNorm(h) · w_final · lm_headᵀ   (lm_head = embed_tokens when tied)

Everything runs in float64 on the weights exactly as stored (bf16/f16 widened bit-exactly),
so the result is the exact-arithmetic answer up to ~1e-15; an f32 engine should agree to
~1e-6 relative. Does not import molt.

Usage:
  qwen2_reference.py --model DIR --ids "1 2 3" [--out logits.f32] [--dtype float64|float32]
"""

import argparse
import json
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_np  # noqa: E402


class Config:
    """The fields of config.json that the Qwen2 forward pass reads."""

    def __init__(self, path):
        with open(path) as f:
            j = json.load(f)
        archs = j.get("architectures") or ["Qwen2ForCausalLM"]
        if j.get("model_type", "qwen2") != "qwen2" or archs[0] != "Qwen2ForCausalLM":
            raise ValueError(
                f"{path}: not a Qwen2ForCausalLM checkpoint ({archs}, {j.get('model_type')})"
            )
        if j.get("hidden_act", "silu") != "silu":
            raise ValueError(f"{path}: hidden_act {j['hidden_act']} is not silu")
        if j.get("rope_scaling"):
            raise ValueError(f"{path}: rope_scaling {j['rope_scaling']} is not supported")
        if j.get("use_sliding_window", False):
            raise ValueError(f"{path}: use_sliding_window is not supported")
        self.hidden_size = int(j["hidden_size"])
        self.num_hidden_layers = int(j["num_hidden_layers"])
        self.num_attention_heads = int(j["num_attention_heads"])
        self.num_key_value_heads = int(j.get("num_key_value_heads", self.num_attention_heads))
        # transformers >= 4.48 reads head_dim from the config when present
        # (getattr(config, "head_dim", hidden_size // num_attention_heads)).
        self.head_dim = int(j.get("head_dim") or self.hidden_size // self.num_attention_heads)
        self.intermediate_size = int(j["intermediate_size"])
        self.vocab_size = int(j["vocab_size"])
        self.rope_theta = float(j.get("rope_theta", 10000.0))
        self.rms_norm_eps = float(j.get("rms_norm_eps", 1e-6))
        self.tie_word_embeddings = bool(j.get("tie_word_embeddings", False))
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError(f"{path}: kv heads do not divide attention heads")


class Qwen2Reference:
    def __init__(self, model_dir, dtype=np.float64):
        self.dir = model_dir
        self.cfg = Config(os.path.join(model_dir, "config.json"))
        self.dtype = dtype
        self.tensors = safetensors_np.read_dir(model_dir)
        # As transformers' tie_weights(): when tied, lm_head *is* embed_tokens (a stored
        # lm_head.weight, if any, is ignored); when untied, lm_head.weight must be stored.
        self.tied = self.cfg.tie_word_embeddings
        self.scaling = 1.0 / math.sqrt(self.cfg.head_dim)

    def w(self, name, shape):
        t = self.tensors.get(name)
        if t is None:
            raise KeyError(f"{self.dir}: tensor '{name}' is missing")
        if t.shape != tuple(shape):
            raise ValueError(f"{self.dir}: tensor '{name}' has shape {t.shape}, expected {shape}")
        return t.to_float(self.dtype)

    def rms_norm(self, x, weight):
        variance = np.mean(x * x, axis=-1, keepdims=True)
        return weight * (x / np.sqrt(variance + self.cfg.rms_norm_eps))

    def rope_cos_sin(self, positions):
        d = self.cfg.head_dim
        inv_freq = 1.0 / (self.cfg.rope_theta ** (np.arange(0, d, 2, dtype=np.float64) / d))
        freqs = np.outer(positions.astype(np.float64), inv_freq)  # [T, d/2]
        emb = np.concatenate([freqs, freqs], axis=-1)  # [T, d]
        return np.cos(emb).astype(self.dtype), np.sin(emb).astype(self.dtype)

    @staticmethod
    def repeat_kv(x, n_rep):
        """[KV, T, D] -> [KV * n_rep, T, D]: query head h reads kv head h // n_rep."""
        return np.repeat(x, n_rep, axis=0)

    @staticmethod
    def causal_mask(t):
        """[t, t]: position i attends to positions j <= i."""
        return np.tril(np.ones((t, t), dtype=bool))

    @staticmethod
    def rotate_half(x):
        half = x.shape[-1] // 2
        return np.concatenate([-x[..., half:], x[..., :half]], axis=-1)

    def attention(self, i, x, cos, sin):
        c = self.cfg
        p = f"model.layers.{i}.self_attn."
        H, KV, D, E = c.num_attention_heads, c.num_key_value_heads, c.head_dim, c.hidden_size
        T = x.shape[0]
        q = x @ self.w(p + "q_proj.weight", (H * D, E)).T + self.w(p + "q_proj.bias", (H * D,))
        k = x @ self.w(p + "k_proj.weight", (KV * D, E)).T + self.w(p + "k_proj.bias", (KV * D,))
        v = x @ self.w(p + "v_proj.weight", (KV * D, E)).T + self.w(p + "v_proj.bias", (KV * D,))
        q = q.reshape(T, H, D).transpose(1, 0, 2)  # [H, T, D]
        k = k.reshape(T, KV, D).transpose(1, 0, 2)
        v = v.reshape(T, KV, D).transpose(1, 0, 2)
        q = q * cos[None] + self.rotate_half(q) * sin[None]
        k = k * cos[None] + self.rotate_half(k) * sin[None]
        k = self.repeat_kv(k, H // KV)
        v = self.repeat_kv(v, H // KV)
        scores = (q @ k.transpose(0, 2, 1)) * self.scaling  # [H, T, T]
        scores = np.where(self.causal_mask(T)[None], scores, -np.inf)
        scores = scores - scores.max(axis=-1, keepdims=True)
        probs = np.exp(scores)
        probs /= probs.sum(axis=-1, keepdims=True)
        out = (probs @ v).transpose(1, 0, 2).reshape(T, H * D)
        return out @ self.w(p + "o_proj.weight", (E, H * D)).T

    def mlp(self, i, x):
        c = self.cfg
        p = f"model.layers.{i}.mlp."
        E, F = c.hidden_size, c.intermediate_size
        gate = x @ self.w(p + "gate_proj.weight", (F, E)).T
        up = x @ self.w(p + "up_proj.weight", (F, E)).T
        act = gate / (1.0 + np.exp(-gate))  # silu
        return (act * up) @ self.w(p + "down_proj.weight", (E, F)).T

    def hidden_states(self, ids):
        """Returns the residual stream entering each layer and after the last one
        ([n_layers + 1] arrays of [T, hidden]), before the final norm."""
        c = self.cfg
        ids = np.asarray(ids, dtype=np.int64)
        if ids.ndim != 1 or ids.size == 0:
            raise ValueError("ids must be a non-empty list")
        if ids.min() < 0 or ids.max() >= c.vocab_size:
            raise ValueError(f"token id out of range [0, {c.vocab_size})")
        embed = self.w("model.embed_tokens.weight", (c.vocab_size, c.hidden_size))
        h = embed[ids]
        cos, sin = self.rope_cos_sin(np.arange(ids.size))
        states = [h]
        for i in range(c.num_hidden_layers):
            p = f"model.layers.{i}."
            x = self.rms_norm(h, self.w(p + "input_layernorm.weight", (c.hidden_size,)))
            h = h + self.attention(i, x, cos, sin)
            x = self.rms_norm(h, self.w(p + "post_attention_layernorm.weight", (c.hidden_size,)))
            h = h + self.mlp(i, x)
            states.append(h)
        return states

    def logits(self, ids):
        c = self.cfg
        h = self.hidden_states(ids)[-1]
        h = self.rms_norm(h, self.w("model.norm.weight", (c.hidden_size,)))
        head = "model.embed_tokens.weight" if self.tied else "lm_head.weight"
        return h @ self.w(head, (c.vocab_size, c.hidden_size)).T


def parse_ids(text):
    return [int(t) for t in text.replace(",", " ").split()]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="Hugging Face Qwen2 checkpoint folder")
    ap.add_argument("--ids", required=True, help='token ids, e.g. "1 2 3" (or @file)')
    ap.add_argument("--out", help="write logits as float32 little-endian [T, vocab]")
    ap.add_argument("--dtype", default="float64", choices=["float64", "float32"],
                    help="compute precision (float32 only to estimate an f32 engine's error)")
    args = ap.parse_args(argv)
    ids_text = args.ids
    if ids_text.startswith("@"):
        with open(ids_text[1:]) as f:
            ids_text = f.read()
    ids = parse_ids(ids_text)
    ref = Qwen2Reference(args.model, np.float64 if args.dtype == "float64" else np.float32)
    logits = ref.logits(ids)
    if args.out:
        logits.astype("<f4").tofile(args.out)
    last = logits[-1]
    top = np.argsort(-last)[:5]
    print(f"T={len(ids)} vocab={ref.cfg.vocab_size} tied={ref.tied}")
    print("last position top-5: " + ", ".join(f"{t}:{last[t]:.6f}" for t in top))


if __name__ == "__main__":
    main()
