"""A minimal safetensors reader and writer on NumPy (struct + json only).

Format: u64 little-endian header length N, N bytes of JSON
{name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {str: str}},
then the data block; offsets are relative to the start of the data block.

Deliberately independent of molt and of the `safetensors` package, so that the golden
fixtures check molt against a second implementation of the format.
"""

import json
import os
import struct

import numpy as np

# dtype name -> (numpy storage dtype, bytes per element). BF16 has no NumPy type: it is kept
# as its raw uint16 bits and widened by to_float().
STORAGE = {
    "F64": (np.dtype("<f8"), 8),
    "F32": (np.dtype("<f4"), 4),
    "F16": (np.dtype("<f2"), 2),
    "BF16": (np.dtype("<u2"), 2),
    "I64": (np.dtype("<i8"), 8),
    "I32": (np.dtype("<i4"), 4),
    "U32": (np.dtype("<u4"), 4),
    "I8": (np.dtype("i1"), 1),
    "U8": (np.dtype("u1"), 1),
}

MAX_HEADER = 100 * 1024 * 1024


class Tensor:
    """A stored tensor: its safetensors dtype name and its raw storage array."""

    def __init__(self, dtype, raw):
        self.dtype = dtype
        self.raw = raw

    @property
    def shape(self):
        return tuple(self.raw.shape)

    def to_float(self, out_dtype=np.float64):
        """The exact stored values, widened (bf16: the bits become the top half of an f32)."""
        if self.dtype == "BF16":
            f32 = (self.raw.astype(np.uint32) << np.uint32(16)).view(np.float32)
            return f32.astype(out_dtype)
        return self.raw.astype(out_dtype)


def read_file(path):
    """Returns ({name: Tensor}, metadata dict). Validates the header against the file size."""
    with open(path, "rb") as f:
        blob = f.read()
    if len(blob) < 8:
        raise ValueError(f"{path}: shorter than the 8-byte header length")
    (n,) = struct.unpack("<Q", blob[:8])
    if n > MAX_HEADER or 8 + n > len(blob):
        raise ValueError(f"{path}: header length {n} does not fit the file ({len(blob)} bytes)")
    header = json.loads(blob[8 : 8 + n].decode("utf-8"))
    data = memoryview(blob)[8 + n :]
    metadata = header.pop("__metadata__", {}) or {}
    tensors = {}
    for name, info in header.items():
        dtype = info["dtype"]
        if dtype not in STORAGE:
            raise ValueError(f"{path}: tensor '{name}': unsupported dtype {dtype}")
        np_dtype, size = STORAGE[dtype]
        shape = tuple(int(d) for d in info["shape"])
        begin, end = (int(o) for o in info["data_offsets"])
        numel = int(np.prod(shape, dtype=np.int64)) if shape else 1
        if not (0 <= begin <= end <= len(data)) or end - begin != numel * size:
            raise ValueError(
                f"{path}: tensor '{name}': offsets [{begin}, {end}] do not hold {shape} {dtype}"
            )
        raw = np.frombuffer(data[begin:end], dtype=np_dtype).reshape(shape)
        tensors[name] = Tensor(dtype, raw)
    return tensors, metadata


def read_dir(model_dir):
    """All tensors of a checkpoint folder: model.safetensors.index.json (shards) wins over
    model.safetensors, as in Hugging Face."""
    index = os.path.join(model_dir, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index) as f:
            weight_map = json.load(f)["weight_map"]
        tensors = {}
        for shard in sorted(set(weight_map.values())):
            part, _ = read_file(os.path.join(model_dir, shard))
            for name, t in part.items():
                if weight_map.get(name) != shard:
                    raise ValueError(f"{index}: tensor '{name}' is in {shard} but not mapped to it")
                tensors[name] = t
        missing = set(weight_map) - set(tensors)
        if missing:
            raise ValueError(f"{index}: tensors mapped but absent: {sorted(missing)}")
        return tensors
    tensors, _ = read_file(os.path.join(model_dir, "model.safetensors"))
    return tensors


def f32_to_bf16_bits(x):
    """Rounds to bf16 (nearest, ties to even, as PyTorch) and returns the uint16 bits."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return u.astype(np.uint16)


def encode(values, dtype):
    """Stores float values as `dtype` ("F32", "F16", "BF16"); returns a Tensor."""
    if dtype == "BF16":
        return Tensor(dtype, f32_to_bf16_bits(values))
    return Tensor(dtype, np.ascontiguousarray(values, dtype=STORAGE[dtype][0]))


def write_file(path, tensors, metadata=None):
    """Writes {name: Tensor}: tensors in name order, data 8-byte aligned, header padded
    with spaces to a multiple of 8 (as the safetensors library does)."""
    header = {}
    chunks = []
    offset = 0
    for name in sorted(tensors):
        t = tensors[name]
        raw = np.ascontiguousarray(t.raw).tobytes()
        pad = (-offset) % 8
        if pad:
            chunks.append(b"\0" * pad)
            offset += pad
        header[name] = {
            "dtype": t.dtype,
            "shape": list(t.shape),
            "data_offsets": [offset, offset + len(raw)],
        }
        chunks.append(raw)
        offset += len(raw)
    if metadata is not None:
        header = {"__metadata__": metadata, **header}
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * ((-len(text)) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for c in chunks:
            f.write(c)


def write_sharded(model_dir, tensors, n_shards, metadata=None):
    """Splits tensors (in name order, balanced by bytes) into n_shards files named
    model-0000i-of-0000N.safetensors and writes model.safetensors.index.json."""
    names = sorted(tensors)
    nbytes = {n: tensors[n].raw.nbytes for n in names}
    total = sum(nbytes.values())
    shards = [[] for _ in range(n_shards)]
    acc = 0
    for name in names:
        # Shard by the running byte count so each shard gets about total / n_shards.
        i = min(n_shards - 1, acc * n_shards // max(total, 1))
        shards[i].append(name)
        acc += nbytes[name]
    if any(not s for s in shards):
        raise ValueError(f"cannot split {len(names)} tensors into {n_shards} non-empty shards")
    weight_map = {}
    for i, shard in enumerate(shards):
        fname = f"model-{i + 1:05d}-of-{n_shards:05d}.safetensors"
        write_file(os.path.join(model_dir, fname), {n: tensors[n] for n in shard}, metadata)
        for n in shard:
            weight_map[n] = fname
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    with open(os.path.join(model_dir, "model.safetensors.index.json"), "w") as f:
        json.dump(index, f, indent=2)
        f.write("\n")
