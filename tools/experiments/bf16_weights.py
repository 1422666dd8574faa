#!/usr/bin/env python3
"""The CUDA prefill's weight rounding, reproduced on the CPU (docs/results/cpu-2026-12-02-bf16-weights.md).

    bf16_weights.py round SRC.gguf DST.gguf    every Q8_0 weight but token_embd/output dequantized and
                                               rounded to BF16 (nearest even), everything else as it is
    bf16_weights.py split SRC.gguf DST.gguf    the same weights as F32 hi + lo, hi = bf16(v), lo = bf16(v - hi):
                                               what the precise mode's three GEMMs multiply since 581b224
    bf16_weights.py compare A.st B.st          two `proven generate --dump-logits` files: per row,
                                               max |a - b| / max |a| and whether the argmax agrees

The CUDA prefill path (src/cuda/prefill.cu) feeds its GEMMs bf16 weights, also in the precise mode
(which splits only the activations). Running the CPU's exact path on the rounded file isolates that
one rounding: no bf16 activations, no other summation order. Needs the `gguf` package from PyPI
(llama.cpp's gguf-py) and numpy.
"""
import json
import struct
import sys


def round_file(src, dst, split=False):
    import gguf
    import numpy as np
    from gguf.quants import dequantize

    r = gguf.GGUFReader(src)
    arch = r.fields["general.architecture"]
    w = gguf.GGUFWriter(dst, bytes(arch.parts[arch.data[0]]).decode())
    for name, f in r.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture":
            continue
        t = f.types[0]
        if t == gguf.GGUFValueType.ARRAY:
            st = f.types[1]
            if st == gguf.GGUFValueType.STRING:
                val = [bytes(f.parts[i]).decode("utf-8", "replace") for i in f.data]
            else:
                val = [f.parts[i].tolist()[0] for i in f.data]
            w.add_key_value(name, val, t, sub_type=st)
        elif t == gguf.GGUFValueType.STRING:
            w.add_key_value(name, bytes(f.parts[f.data[0]]).decode("utf-8", "replace"), t)
        else:
            w.add_key_value(name, f.parts[f.data[0]].tolist()[0], t)
    rounded = 0
    for ti in r.tensors:
        shape = [int(x) for x in reversed(ti.shape.tolist())]  # numpy order: rows first
        if ti.tensor_type == gguf.GGMLQuantizationType.Q8_0 and ti.name not in ("token_embd.weight", "output.weight"):
            v = dequantize(ti.data, ti.tensor_type).astype(np.float32).reshape(shape)
            b = to_bf16(v)
            if split:
                hi = from_bf16(b)
                lo = from_bf16(to_bf16(v - hi))  # v - hi is exact in f32
                w.add_tensor(ti.name, hi + lo, raw_shape=shape, raw_dtype=gguf.GGMLQuantizationType.F32)
            else:
                w.add_tensor(ti.name, b, raw_shape=shape, raw_dtype=gguf.GGMLQuantizationType.BF16)
            rounded += 1
        else:
            plain = ti.tensor_type in (gguf.GGMLQuantizationType.F32, gguf.GGMLQuantizationType.F16,
                                       gguf.GGMLQuantizationType.BF16)
            w.add_tensor(ti.name, np.asarray(ti.data), raw_shape=shape if plain else None, raw_dtype=ti.tensor_type)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print("%s: %d Q8_0 tensors %s" % (dst, rounded, "split into bf16 hi + lo (stored F32)" if split else "rounded to BF16"))


def to_bf16(v):
    import numpy as np

    u = v.view(np.uint32)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)  # nearest even (finite values)


def from_bf16(b):
    import numpy as np

    return (b.astype(np.uint32) << 16).view(np.float32)


def load_logits(path):
    import numpy as np

    with open(path, "rb") as f:
        b = f.read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n])["logits"]
    return np.frombuffer(b[8 + n:], dtype=np.float32).reshape(h["shape"])


def compare(pa, pb):
    import numpy as np

    a, b = load_logits(pa), load_logits(pb)
    for t in range(a.shape[0]):
        d = float(np.abs(a[t] - b[t]).max() / np.abs(a[t]).max())
        print("row %4d  %.3e  argmax %s" % (t, d, "same" if a[t].argmax() == b[t].argmax() else "differs"))


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] in ("round", "split"):
        round_file(sys.argv[2], sys.argv[3], split=sys.argv[1] == "split")
    elif len(sys.argv) == 4 and sys.argv[1] == "compare":
        compare(sys.argv[2], sys.argv[3])
    else:
        sys.exit(__doc__)
