"""An independent NumPy implementation of MLX's affine quantisation (the layout of the 4-bit
and 8-bit MLX checkpoints) and of molt's symmetric int8, and the generator of the fixture
molt's tests compare its C++ quantiser and dequantiser against, bit for bit.

MLX affine, per group of G consecutive inputs of one row, in float32 (mlx/backend/cpu/quantized.cpp):
    n_bins = 2^bits - 1
    scale  = max((max - min) / n_bins, 1e-7), negated unless |min| > |max|
    edge   = min if |min| > |max| else max;  q0 = rint(edge / scale)
    if q0 != 0: scale = edge / q0; bias = edge   else: bias = 0
    q = clip(rint((w - bias) / scale), 0, n_bins)
scale and bias are then stored in the model dtype. Packing: weight is uint32
[rows, cols * bits / 32]; element k of each word sits in bits [k*bits, (k+1)*bits).
Dequantisation (molt): float32(scale) * float32(q) + float32(bias), rounded after each step
(MLX itself rounds the result to the model dtype; molt keeps f32).

molt int8: per group (G = cols: per output channel) scale = absmax / 127 (1 if all zero),
q = clip(rint(w / scale), -127, 127), scales float32; w = scale * q.

    /usr/bin/python3 tools/reference/mlx_quant.py --out tests/fixtures/mlx_quant/fixture.safetensors
"""

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_np as st  # noqa: E402

F = np.float32


def quantize_affine(w, group_size, bits):
    """w: float32 [rows, cols]. Returns (packed uint32, scales f32, biases f32) before the
    scales are rounded to the storage dtype (q uses the f32 scale and bias, as MLX does)."""
    w = np.asarray(w, dtype=F)
    rows, cols = w.shape
    assert cols % group_size == 0 and 32 % bits == 0
    n_bins = F((1 << bits) - 1)
    g = w.reshape(rows, cols // group_size, group_size)
    w_max = g.max(axis=-1)
    w_min = g.min(axis=-1)
    mask = np.abs(w_min) > np.abs(w_max)
    scale = np.maximum((w_max - w_min) / n_bins, F(1e-7)).astype(F)
    scale = np.where(mask, scale, -scale).astype(F)
    edge = np.where(mask, w_min, w_max).astype(F)
    q0 = np.rint(edge / scale).astype(F)
    nz = q0 != 0
    scale = np.where(nz, edge / np.where(nz, q0, F(1)), scale).astype(F)
    bias = np.where(nz, edge, F(0)).astype(F)
    q = np.rint((g - bias[..., None]) / scale[..., None]).astype(F)
    q = np.clip(q, F(0), n_bins).astype(np.uint32).reshape(rows, cols)
    per = 32 // bits
    q = q.reshape(rows, cols // per, per)
    shifts = (np.arange(per, dtype=np.uint32) * np.uint32(bits))[None, None, :]
    packed = np.bitwise_or.reduce(q << shifts, axis=-1).astype(np.uint32)
    return packed, scale, bias


def unpack(packed, bits, cols):
    per = 32 // bits
    shifts = (np.arange(per, dtype=np.uint32) * np.uint32(bits))[None, None, :]
    q = (packed[..., None] >> shifts) & np.uint32((1 << bits) - 1)
    return q.reshape(packed.shape[0], cols)


def dequantize_affine(packed, scales, biases, group_size, bits):
    """scales, biases: the stored values widened to float32."""
    rows = packed.shape[0]
    cols = packed.shape[1] * 32 // bits
    q = unpack(packed, bits, cols).astype(F).reshape(rows, cols // group_size, group_size)
    prod = (scales.astype(F)[..., None] * q).astype(F)
    return (prod + biases.astype(F)[..., None]).astype(F).reshape(rows, cols)


def quantize_int8(w, group_size):
    w = np.asarray(w, dtype=F)
    rows, cols = w.shape
    G = cols if group_size == 0 else group_size
    g = w.reshape(rows, cols // G, G)
    amax = np.abs(g).max(axis=-1)
    scale = np.where(amax > 0, amax / F(127), F(1)).astype(F)
    q = np.clip(np.rint(g / scale[..., None]), F(-127), F(127)).astype(np.int8)
    return q.reshape(rows, cols), scale


def dequantize_int8(q, scales, group_size):
    rows, cols = q.shape
    G = cols if group_size == 0 else group_size
    g = q.astype(F).reshape(rows, cols // G, G)
    return (scales.astype(F)[..., None] * g).astype(F).reshape(rows, cols)


def widen(t):
    return t.to_float(np.float32)


def make_fixture(path):
    rng = np.random.default_rng(5)
    rows, cols = 8, 256
    w = rng.normal(0.0, 0.05, size=(rows, cols)).astype(F)
    w[1] = 0.0                      # all zero: scale = eps, q0 = 0, bias = 0
    w[2, :128] = 0.25               # constant groups
    w[3] *= -1.0
    w[3, 5] = -0.4                  # |min| > |max|
    w[4, 7] = 0.4                   # |max| > |min|
    w[5] = np.abs(w[5]) + 0.01      # all positive
    src = st.encode(w, "BF16")      # the source weight, as a bf16 checkpoint holds it
    wf = widen(src)
    tensors = {"source": src}
    for bits in (4, 8):
        for G in (32, 64, 128):
            for sd in ("BF16", "F16", "F32"):
                packed, scale, bias = quantize_affine(wf, G, bits)
                s_t, b_t = st.encode(scale, sd), st.encode(bias, sd)
                name = f"affine_b{bits}_g{G}_{sd.lower()}"
                tensors[name + ".weight"] = st.Tensor("U32", packed)
                tensors[name + ".scales"] = s_t
                tensors[name + ".biases"] = b_t
                deq = dequantize_affine(packed, widen(s_t), widen(b_t), G, bits)
                tensors[name + ".dequant"] = st.Tensor("F32", deq)
    for G in (0, 32, 64):
        q, scale = quantize_int8(wf, G)
        name = f"int8_g{G}"
        tensors[name + ".weight"] = st.Tensor("I8", q)
        tensors[name + ".scales"] = st.Tensor("F32", scale.astype(F))
        tensors[name + ".dequant"] = st.Tensor("F32", dequantize_int8(q, scale, G))
    st.write_file(path, tensors, {"generator": "tools/reference/mlx_quant.py"})


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="tests/fixtures/mlx_quant/fixture.safetensors")
    ap.add_argument("--dequantize", metavar="DIR",
                    help="instead: print max |w - dequant(w)| per linear of an MLX checkpoint")
    a = ap.parse_args()
    if a.dequantize:
        import json
        cfg = json.load(open(os.path.join(a.dequantize, "config.json")))
        q = cfg.get("quantization") or cfg["quantization_config"]
        t = st.read_dir(a.dequantize)
        for name in sorted(t):
            if name.endswith(".scales"):
                base = name[: -len(".scales")]
                d = dequantize_affine(t[base + ".weight"].raw, widen(t[name]),
                                      widen(t[base + ".biases"]), q["group_size"], q["bits"])
                print(base, d.shape, float(np.abs(d).max()))
        return
    make_fixture(a.out)
    print("wrote", a.out)


if __name__ == "__main__":
    main()
