#!/usr/bin/env python3
"""Writes the seed corpora tests/fuzz/corpus/<harness>/ from files in the repository
(models/tiny-ladder, traces) and the Qwen2.5 reference data (../shared/data/qwen2.5): small
files whole, large ones as valid excerpts (a vocabulary's first tokens, a rank file's first
lines), every seed under 64 KB. Run from anywhere; rewrites the seeds it owns."""
import base64
import json
import os
import shutil
import struct
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "models" / "tiny-ladder"
QWEN = ROOT.parent / "shared" / "data" / "qwen2.5"
OUT = ROOT / "tests" / "fuzz" / "corpus"
LIMIT = 64 * 1024


def put(harness, name, data):
    d = OUT / harness
    d.mkdir(parents=True, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    assert len(data) < LIMIT, (harness, name, len(data))
    (d / name).write_bytes(data)


def dumps(j):
    return json.dumps(j, indent=1, ensure_ascii=False)


def safetensors(tensors, metadata=None):
    """tensors: [(name, dtype, shape, bytes)] → file bytes as the reference writer lays them."""
    header, blobs, off = {}, [], 0
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, dtype, shape, data in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + len(data)]}
        blobs.append(data)
        off += len(data)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + b"".join(blobs)


def read_safetensors(path):
    d = path.read_bytes()
    n = struct.unpack("<Q", d[:8])[0]
    return json.loads(d[8:8 + n]), d[8 + n:]


def seeds_safetensors():
    put("safetensors", "tiny-map-l-l-int8.safetensors",
        (TINY / "maps/l-l-int8/map.safetensors").read_bytes())
    header, data = read_safetensors(TINY / "s/model.safetensors")
    small = []
    for name, e in sorted(header.items()):
        if name == "__metadata__":
            continue
        b, en = e["data_offsets"]
        if en - b <= 512 and len(small) < 6:
            small.append((name, e["dtype"], e["shape"], data[b:en]))
    put("safetensors", "tiny-s-excerpt.safetensors", safetensors(small, {"format": "pt"}))
    put("safetensors", "dtypes.safetensors", safetensors([
        ("a", "F32", [2], b"\0\0\x80?\0\0\0@"), ("b", "I8", [3], b"\1\2\3"),
        ("c", "U32", [], b"\1\0\0\0"), ("d", "I64", [1, 1], b"\7" + b"\0" * 7),
        ("e", "F16", [0, 5], b""), ("f", "U8", [1], b"\xff"), ("g", "I32", [1], b"\0\0\0\x80")]))
    put("safetensors", "empty-header.safetensors", safetensors([]))


def seeds_index():
    shard1, shard2 = "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"
    put("safetensors_index", "two-shards.json", dumps({
        "metadata": {"total_size": 36},
        "weight_map": {"lm_head.weight": shard2, "model.embed_tokens.weight": shard1,
                       "model.norm.weight": shard1}}))
    put("safetensors_index", "one-shard.json",
        dumps({"weight_map": {"model.norm.weight": shard1}}))


def seeds_configs():
    for rung in ("l", "l-int8", "m", "s"):
        put("hf_config", f"tiny-{rung}.json", (TINY / rung / "config.json").read_bytes())
        put("generation_config", f"tiny-{rung}.json",
            (TINY / rung / "generation_config.json").read_bytes())
    # The real Qwen2.5 configs are added by scripts/fuzz.sh at run time (never copied here).
    q = json.loads((TINY / "s/config.json").read_text())
    q["quantization"] = {"group_size": 64, "bits": 4, "model.layers.0.mlp.down_proj": False,
                         "model.layers.1.self_attn.q_proj": {"group_size": 32, "bits": 8}}
    put("hf_config", "tiny-s-q4.json", dumps(q))
    q["quantization"] = {"mode": "int8", "bits": 8, "group_size": 0}
    put("hf_config", "tiny-s-int8.json", dumps(q))
    put("generation_config", "qwen-instruct.json", dumps(
        {"bos_token_id": 151643, "pad_token_id": 151643, "do_sample": True,
         "eos_token_id": [151645, 151643], "repetition_penalty": 1.05, "temperature": 0.7,
         "top_p": 0.8, "top_k": 20, "transformers_version": "4.37.0"}))


def tiny_tokenizer(max_id):
    """The tiny ladder's tokenizer.json cut to ids < max_id (and the merges among them)."""
    j = json.loads((TINY / "s/tokenizer.json").read_text())
    vocab = {t: i for t, i in j["model"]["vocab"].items() if i < max_id}
    merges = []
    for m in j["model"]["merges"]:
        a, b = m.split(" ") if isinstance(m, str) else m
        if a in vocab and b in vocab and a + b in vocab:
            merges.append(m)
    j["model"]["vocab"] = vocab
    j["model"]["merges"] = merges
    for k, t in enumerate(j["added_tokens"]):
        t["id"] = max_id + k
    return j


def seeds_tokenizers():
    j = tiny_tokenizer(700)
    put("tokenizer_json", "tiny-700.json", dumps(j))
    j2 = tiny_tokenizer(300)
    j2["model"]["merges"] = [m.split(" ") for m in j2["model"]["merges"]]  # [a, b] form
    j2["pre_tokenizer"] = {"type": "ByteLevel", "add_prefix_space": True, "use_regex": True}
    j2["normalizer"] = None
    put("tokenizer_json", "tiny-300-bytelevel.json", dumps(j2))

    j = tiny_tokenizer(500)
    merges = "#version: 0.2\n" + "".join(
        (m if isinstance(m, str) else " ".join(m)) + "\n" for m in j["model"]["merges"])
    put("vocab_merges", "tiny-500.txt",
        json.dumps(j["model"]["vocab"], ensure_ascii=False) + "\n--merges.txt--\n" + merges)
    lines = (QWEN / "merges.txt").read_text(encoding="utf-8").splitlines(keepends=True)
    # scripts/fuzz.sh adds the head of ../shared's merges.txt at run time (never copied here).

    ranks = (QWEN / "qwen.tiktoken").read_bytes().splitlines(keepends=True)
    # scripts/fuzz.sh adds the head of ../shared's qwen.tiktoken at run time (never copied here).
    # A tiny rank file of its own: the 256 bytes, then merges of them.
    toks = [bytes([b]) for b in range(256)] + [b"he", b"ll", b"hell", b"hello", b" w", b" wo"]
    put("tiktoken", "bytes-plus-6.tiktoken", "".join(
        f"{base64.b64encode(t).decode()} {r}\n" for r, t in enumerate(toks)))


def seeds_chat():
    put("chat_template", "one-user.json", dumps([{"role": "user", "content": "Hi"}]))
    put("chat_template", "system-and-turns.json", dumps({
        "messages": [{"role": "system", "content": "Be brief."},
                     {"role": "user", "content": "Why is the sky blue?"},
                     {"role": "assistant", "content": "Rayleigh scattering."},
                     {"role": "user", "content": "Und auf Deutsch? Grüße ☀"}],
        "add_generation_prompt": True}))
    put("chat_template", "tools.json", dumps({
        "messages": [
            {"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": "",
             "tool_calls": [{"function": {"name": "get_weather",
                                          "arguments": "{\"city\": \"Paris\", \"days\": 2}"}}]},
            {"role": "tool", "content": "{\"temp\": 21.5}"},
            {"role": "tool", "content": "sunny"}],
        "tools": [{"type": "function", "function": {
            "name": "get_weather", "description": "Weather by city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                           "required": ["city"]}}}],
        "add_generation_prompt": False}))
    put("chat_template", "template-source.json", dumps(
        [{"role": "user",
          "content": (QWEN / "qwen2.5_chat_template.jinja").read_text()[:1500]}]))


def seeds_ladder_traces():
    put("ladder_manifest", "tiny-ladder.json", (TINY / "ladder.json").read_bytes())
    put("ladder_manifest", "two-rungs.json", dumps({
        "name": "two", "rungs": [{"name": "big", "path": "l", "precision": "bf16"},
                                 {"name": "small", "path": "s", "precision": "int8"}],
        "routes": [{"from": "big", "to": "small", "maps": "maps/l-s"},
                   {"from": "small", "to": "big", "method": "reprefill"}]}))
    for t in sorted((ROOT / "traces").glob("*.json")):
        put("pressure_trace", t.name, t.read_bytes())
    put("pressure_trace", "ms-mib.json", dumps({
        "name": "ms", "unit": "ms", "points": [{"at": 0, "budget_mib": 64},
                                               {"at": 250.5, "budget_frac": 0.5},
                                               {"at": 1e3, "budget_mib": 0}]}))


def structured(meta):
    out = {}
    for k, v in meta.items():
        try:
            out[k] = json.loads(v) if v[:1] in "{[" else v
        except ValueError:
            out[k] = v
    return out


def seeds_maps():
    header, _ = read_safetensors(TINY / "maps/l-l-int8/map.safetensors")
    meta = header["__metadata__"]
    put("map_meta", "tiny-l-l-int8.json", dumps(structured(meta)))
    put("map_meta", "tiny-l-l-int8-strings.json", dumps(meta))
    geometry = {"head_dim": 2, "hidden_size": 4, "n_kv_heads": 1, "n_layers": 2,
                "rope": {"head_dim": 2, "style": "rotate-half", "theta": 10000.0}}
    put("map_meta", "ridge-2-layers.json", dumps({
        "format": "molt-kv-map", "format_version": "1", "method": "ridge",
        "sender": dict(geometry, name="a"), "receiver": dict(geometry, name="b"),
        "sources": {"k": [[0], [0, 1]], "v": [[0], [1]]},
        "boundary": [{"r": 1, "sender_hidden": 1, "receiver_hidden": 1}],
        "lambda": 0.01, "residuals": {"total": {"k": {"rel_rms": 0.1}, "v": {"rel_rms": 0.2}}}}))
    put("map_index", "tiny-l-l-int8.json", (TINY / "maps/l-l-int8/index.json").read_bytes())


def seeds_options():
    put("options", "empty.json", "{}")
    put("options", "some.json", dumps({
        "policy": "auto", "max_tokens": 128, "stop_ids": [4095, 4093],
        "sampling": {"temperature": 0.7, "top_k": 20, "top_p": 0.8, "seed": 7},
        "transfer": {"recompute_layers": 1, "anchors": 4}, "capacity": 512, "shed_sink": 4,
        "measure_seams": True}))
    put("options", "all.json", dumps({
        "policy": "molt", "max_tokens": 64, "stop_at_eos": True, "stop_ids": [],
        "grace_steps": 2, "up_margin": 0.1, "up_after": 3, "prefill_chunk": 64,
        "heal_chunk": 64, "poll_ms": 20, "max_parked_steps": 1000000, "capacity": 0,
        "shed_sink": -1, "shed_drop": 0, "auto_reprefill_below": 0, "auto_max_stall_ms": 50, "auto_min_retention": 0.9,
        "measure_seams": False, "measure_rss": False,
        "sampling": {"temperature": 0.0, "top_k": 0, "top_p": 1.0, "repetition_penalty": 1.0,
                     "seed": 0},
        "transfer": {"recompute_layers": 0, "anchors": 0}}))


def seeds_server():
    """OpenAI request bodies of molt serve (/v1/chat/completions and /v1/completions)."""
    h = "server_request"
    user = {"role": "user", "content": "Say hi."}
    put(h, "chat-minimal.json", dumps({"messages": [user]}))
    put(h, "chat-full.json", dumps({
        "model": "tiny-ladder", "messages": [{"role": "developer", "content": "Be brief."},
                                            user, {"role": "assistant", "content": "Hi."},
                                            {"role": "user", "content": "Again"}],
        "max_completion_tokens": 8, "temperature": 0.7, "top_p": 0.9, "seed": 7,
        "presence_penalty": 0.5, "frequency_penalty": -0.5, "n": 1, "stop": ["\n\n", "END"],
        "stream": True, "stream_options": {"include_usage": True},
        "molt": {"priority": "background", "policy": "heal"}}))
    put(h, "chat-content-parts.json", dumps({"messages": [{"role": "user", "content": [
        {"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}], "max_tokens": 4,
        "molt": {"priority": "foreground", "policy": "auto"}}))
    put(h, "chat-image-part.json", dumps({"messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "http://x/y.png"}}]}]}))
    put(h, "chat-nulls.json", dumps({"messages": [{"role": "system", "content": None}, user],
                                     "max_tokens": None, "temperature": None, "stop": None,
                                     "stream_options": None, "molt": None}))
    put(h, "chat-bad-types.json", dumps({"messages": [{"role": "wizard", "content": 5}],
                                         "max_tokens": "10", "stop": [1, 2], "n": 2}))
    put(h, "completion-text.json", dumps({"model": "tiny-ladder", "prompt": "Once upon a time",
                                          "max_tokens": 16, "echo": True, "stop": "."}))
    put(h, "completion-one-string.json", dumps({"prompt": ["The cat"], "seed": -1,
                                                "molt": {"policy": "release-reprefill"}}))
    put(h, "completion-ids.json", dumps({"prompt": [1, 2, 3, 4095], "max_tokens": 3,
                                         "echo": True, "temperature": 0, "top_p": 1,
                                         "molt": {"policy": "reprefill"}}))
    put(h, "completion-bad-ids.json", dumps({"prompt": [-1, 2147483648, 1.5], "stop": ["", "x"]}))
    put(h, "completion-limits.json", dumps({"model": "l", "prompt": "x" * 200,
                                            "max_tokens": 100000, "top_p": 0,
                                            "molt": {"policy": "hold", "priority": "urgent"}}))
    put(h, "wrong-shapes.json", dumps({"model": 7, "messages": {}, "prompt": [],
                                       "stream_options": [], "molt": "fast"}))
    put(h, "not-an-object.json", dumps(["messages"]))
    put(h, "broken.json", '{"messages": [{"role": "user", "content": "hi"')


if __name__ == "__main__":
    for f in (seeds_safetensors, seeds_index, seeds_configs, seeds_tokenizers, seeds_chat,
              seeds_ladder_traces, seeds_maps, seeds_options, seeds_server):
        f()
    for d in sorted(OUT.iterdir()):
        print(f"{d.name}: {len(list(d.iterdir()))} seeds")
