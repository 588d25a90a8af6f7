#!/usr/bin/env python3
"""Exports trained rungs as bf16 Hugging Face Qwen2 checkpoints plus fixtures.

OUT/{l,m,s}/: config.json, generation_config.json, model.safetensors (bf16, tied
embeddings so no lm_head.weight), tokenizer.json, tokenizer_config.json.
OUT/ladder.json names the rungs. OUT/fixtures/: a fixed id sequence and each
rung's PyTorch logits on it (f32, computed from the exported bf16 weights), for
the C++ engine's logits-match test.
"""
import argparse
import json
import os
import shutil
import struct
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from bpe import Tokenizer  # noqa: E402
from model import Qwen2, config_for  # noqa: E402

FIXTURE_TEXT = ("The scheduler picks the next task to run on each CPU. "
                "<|im_start|>user\nWhat is the access code for the north gate?<|im_end|>\n"
                "<|im_start|>assistant\n")


def bf16_bytes(t):
    return t.detach().to(torch.bfloat16).view(torch.int16).numpy().tobytes()


def write_safetensors(path, tensors):
    """Writes {name: torch tensor} as bf16 safetensors (8-byte aligned header)."""
    header, blobs, offset = {}, [], 0
    for name in sorted(tensors):
        b = bf16_bytes(tensors[name])
        header[name] = {"dtype": "BF16", "shape": list(tensors[name].shape),
                        "data_offsets": [offset, offset + len(b)]}
        blobs.append(b)
        offset += len(b)
    header["__metadata__"] = {"format": "pt"}
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as fh:
        fh.write(struct.pack("<Q", len(h)))
        fh.write(h)
        for b in blobs:
            fh.write(b)


def read_safetensors(path):
    with open(path, "rb") as fh:
        n = struct.unpack("<Q", fh.read(8))[0]
        header = json.loads(fh.read(n))
        data = fh.read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        s, e = info["data_offsets"]
        assert info["dtype"] == "BF16"
        raw = np.frombuffer(data[s:e], dtype=np.int16).copy()
        out[name] = torch.from_numpy(raw).view(torch.bfloat16).float().reshape(info["shape"])
    return out


def hf_config(cfg, tok):
    eot = tok.specials["<|endoftext|>"]
    return {
        "architectures": ["Qwen2ForCausalLM"],
        "attention_dropout": 0.0,
        "bos_token_id": eot,
        "eos_token_id": eot,
        "head_dim": cfg["head_dim"],
        "hidden_act": "silu",
        "hidden_size": cfg["hidden_size"],
        "initializer_range": 0.02,
        "intermediate_size": cfg["intermediate_size"],
        "max_position_embeddings": cfg["max_position_embeddings"],
        "max_window_layers": cfg["num_hidden_layers"],
        "model_type": "qwen2",
        "num_attention_heads": cfg["num_attention_heads"],
        "num_hidden_layers": cfg["num_hidden_layers"],
        "num_key_value_heads": cfg["num_key_value_heads"],
        "rms_norm_eps": cfg["rms_norm_eps"],
        "rope_scaling": None,
        "rope_theta": cfg["rope_theta"],
        "sliding_window": cfg["max_position_embeddings"],
        "tie_word_embeddings": True,
        "torch_dtype": "bfloat16",
        "transformers_version": "4.43.1",
        "use_cache": True,
        "use_sliding_window": False,
        "vocab_size": cfg["vocab_size"],
    }


def load_exported(rung_dir):
    with open(os.path.join(rung_dir, "config.json")) as fh:
        hf = json.load(fh)
    cfg = {k: hf[k] for k in ("vocab_size", "hidden_size", "num_hidden_layers",
                              "num_attention_heads", "num_key_value_heads", "head_dim",
                              "intermediate_size", "rope_theta", "rms_norm_eps",
                              "max_position_embeddings")}
    model = Qwen2(cfg)
    model.load_state_dict(read_safetensors(os.path.join(rung_dir, "model.safetensors")))
    model.eval()
    return model


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", default=os.path.join(HERE, "work"))
    ap.add_argument("--out", default=os.path.join(HERE, "..", "..", "models", "tiny-ladder"))
    ap.add_argument("--sizes", default="l,m,s")
    ap.add_argument("--runs", default=None, help="folder of run folders (default WORK/runs)")
    args = ap.parse_args()
    out = os.path.abspath(args.out)
    tok_dir = os.path.join(args.work, "tokenizer")
    tok = Tokenizer(os.path.join(tok_dir, "tokenizer.json"))
    fixture_ids = tok.encode(FIXTURE_TEXT)
    os.makedirs(os.path.join(out, "fixtures"), exist_ok=True)
    rungs = []
    for size in args.sizes.split(","):
        ckpt = os.path.join(args.runs or os.path.join(args.work, "runs"), size, "ckpt.pt")
        if not os.path.exists(ckpt):
            print(f"export: no checkpoint for {size} ({ckpt}); skipped")
            continue
        saved = torch.load(ckpt, map_location="cpu")  # a GPU sitting saves CUDA tensors
        cfg = config_for(size)
        d = os.path.join(out, size)
        os.makedirs(d, exist_ok=True)
        tensors = {k: v for k, v in saved["model"].items()}
        write_safetensors(os.path.join(d, "model.safetensors"), tensors)
        with open(os.path.join(d, "config.json"), "w") as fh:
            json.dump(hf_config(cfg, tok), fh, indent=2)
        gen = {"bos_token_id": tok.eot,
               "eos_token_id": [tok.specials["<|im_end|>"], tok.eot],
               "pad_token_id": tok.eot, "do_sample": False,
               "transformers_version": "4.43.1"}
        with open(os.path.join(d, "generation_config.json"), "w") as fh:
            json.dump(gen, fh, indent=2)
        for f in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copy(os.path.join(tok_dir, f), os.path.join(d, f))
        # Fixture from the exported (bf16-rounded) weights, computed in f32.
        model = load_exported(d)
        with torch.no_grad():
            logits = model(torch.tensor([fixture_ids]))[0].float().numpy()
        logits.astype("<f4").tofile(os.path.join(out, "fixtures", f"{size}_logits.f32"))
        st = saved["state"]
        mb = os.path.getsize(os.path.join(d, "model.safetensors")) / 2**20
        print(f"export: {size} -> {d} ({mb:.2f} MiB, step {st['step']}, {st['tokens']} tokens)")
        rungs.append({"name": size, "path": size, "precision": "bf16"})
    with open(os.path.join(out, "fixtures", "ids.json"), "w") as fh:
        json.dump({"text": FIXTURE_TEXT, "ids": fixture_ids,
                   "logits": "<rung>_logits.f32: little-endian float32, shape [len(ids), 4096], "
                             "row t = logits after ids[0..t], from the exported bf16 weights "
                             "computed in float32"}, fh, indent=1)
    order = {"l": 0, "m": 1, "s": 2}
    rungs.sort(key=lambda r: order[r["name"]])
    with open(os.path.join(out, "ladder.json"), "w") as fh:
        json.dump({"name": "tiny-ladder", "rungs": rungs, "routes": []}, fh, indent=2)


if __name__ == "__main__":
    main()
