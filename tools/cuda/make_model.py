#!/usr/bin/env python3
"""Random-weight Qwen3 models with real shapes, fast enough to make on the GPU machine inside one
device call: a Hugging Face directory for bf16, a GGUF file for the block-quantized types.
Benchmarks only, never correctness (the weights are random bytes with sane scales).

    python3 tools/cuda/make_model.py --preset qwen3-8b --dtype bf16 --out /tmp/q8b
    python3 tools/cuda/make_model.py --preset qwen3-8b --dtype q4_k --out /tmp/q8b-q4k.gguf

Presets: tools/bench/make_model.py's dense ones plus qwen3-8b (H 4096, L 36, 32/8 heads x 128,
FFN 12288, vocab 151936, untied). Data comes from one 64 MiB random pool, cycled at a different
offset per tensor, so writing is disk-bound (about 16 GB for 8B bf16). Quantized files follow
llama.cpp's choices loosely: the matrices and the embedding in --dtype, output.weight in q6_k
for the 4-bit types, norms in f32. Needs numpy only.
"""
import argparse, importlib.util, json, os, struct, sys
import numpy as np

PRESETS = {
    "qwen3-8b": dict(model_type="qwen3", hidden_size=4096, num_hidden_layers=36, num_attention_heads=32,
                     num_key_value_heads=8, head_dim=128, intermediate_size=12288, vocab_size=151936,
                     tie_word_embeddings=False, rope_theta=1e6),
}
try:  # the dense presets of tools/bench/make_model.py
    _p = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench", "make_model.py")
    _spec = importlib.util.spec_from_file_location("pv_bench_make_model", _p)
    _mod = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(_mod)
    for k, v in _mod.PRESETS.items():
        if v["model_type"] == "qwen3":
            PRESETS.setdefault(k, v)
except Exception:  # noqa: BLE001 - the 8B preset is enough
    pass

POOL = 64 << 20
# ggml type id, block elements, block bytes
GGML = {"f32": (0, 1, 4), "f16": (1, 1, 2), "bf16": (30, 1, 2), "q8_0": (8, 32, 34), "q4_0": (2, 32, 18),
        "q4_k": (12, 256, 144), "q6_k": (14, 256, 210)}


def f16bits(x):
    return int(np.array([x], dtype=np.float16).view(np.uint16)[0])


def pool_for(dtype, rng):
    """64 MiB of valid data of one type: random payload, scales that keep values near N(0, 0.02)."""
    _, be, bb = GGML[dtype]
    raw = rng.integers(0, 256, size=POOL // bb * bb, dtype=np.uint8)
    if dtype == "bf16":
        u = raw.view(np.uint16)
        exp = (117 + ((u >> 7) & 3)).astype(np.uint16)  # |w| in [2^-10, 2^-6)
        u[:] = (u & 0x807F) | (exp << 7)
        return raw
    blk = raw.reshape(-1, bb)
    if dtype == "q8_0":
        blk[:, 0:2] = np.frombuffer(struct.pack("<H", f16bits(2.7e-4)), dtype=np.uint8)
    elif dtype == "q4_0":
        blk[:, 0:2] = np.frombuffer(struct.pack("<H", f16bits(4.3e-3)), dtype=np.uint8)
    elif dtype == "q4_k":
        blk[:, 0:4] = np.frombuffer(struct.pack("<HH", f16bits(8e-5), f16bits(4e-5)), dtype=np.uint8)
    elif dtype == "q6_k":
        blk[:, 208:210] = np.frombuffer(struct.pack("<H", f16bits(6.2e-5)), dtype=np.uint8)
    return raw


def const_bytes(dtype, n, value):
    if dtype == "f32":
        return np.full(n, value, dtype=np.float32).tobytes()
    if dtype == "bf16":
        return (np.full(n, value, dtype=np.float32).view(np.uint32) >> 16).astype(np.uint16).tobytes()
    raise ValueError(dtype)


def nbytes(dtype, shape):
    _, be, bb = GGML[dtype]
    n = int(np.prod(shape))
    assert shape[-1] % be == 0, (dtype, shape)
    return n // be * bb


def tensors(c, wtype, otype, vtype):
    """(hf name, gguf name, shape [rows, cols] or [n], dtype, constant or None)"""
    H, L, V = c["hidden_size"], c["num_hidden_layers"], c["vocab_size"]
    nh, nkv, hd, I = c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"], c["intermediate_size"]
    yield "model.embed_tokens.weight", "token_embd.weight", [V, H], wtype, None
    yield "model.norm.weight", "output_norm.weight", [H], vtype, 1.0
    if not c["tie_word_embeddings"]:
        yield "lm_head.weight", "output.weight", [V, H], otype, None
    for l in range(L):
        p, g = f"model.layers.{l}.", f"blk.{l}."
        yield p + "input_layernorm.weight", g + "attn_norm.weight", [H], vtype, 1.0
        yield p + "post_attention_layernorm.weight", g + "ffn_norm.weight", [H], vtype, 1.0
        yield p + "self_attn.q_proj.weight", g + "attn_q.weight", [nh * hd, H], wtype, None
        yield p + "self_attn.k_proj.weight", g + "attn_k.weight", [nkv * hd, H], wtype, None
        yield p + "self_attn.v_proj.weight", g + "attn_v.weight", [nkv * hd, H], wtype, None
        yield p + "self_attn.o_proj.weight", g + "attn_output.weight", [H, nh * hd], wtype, None
        yield p + "self_attn.q_norm.weight", g + "attn_q_norm.weight", [hd], vtype, 1.0
        yield p + "self_attn.k_norm.weight", g + "attn_k_norm.weight", [hd], vtype, 1.0
        yield p + "mlp.gate_proj.weight", g + "ffn_gate.weight", [I, H], wtype, None
        yield p + "mlp.up_proj.weight", g + "ffn_up.weight", [I, H], wtype, None
        yield p + "mlp.down_proj.weight", g + "ffn_down.weight", [H, I], wtype, None


def write_data(f, items, rng, pools, first=0):
    for i, (_, _, shape, dt, const) in enumerate(items, first):
        n = nbytes(dt, shape)
        if const is not None:
            f.write(const_bytes(dt, int(np.prod(shape)), const))
            continue
        if dt not in pools:
            pools[dt] = memoryview(pool_for(dt, rng))
        pool = pools[dt]
        bb = GGML[dt][2]
        start = (i * 7919 * bb) % (len(pool) - bb)
        start -= start % bb
        while n > 0:
            take = min(n, len(pool) - start)
            take -= take % bb
            f.write(pool[start:start + take])
            n -= take
            start = 0


def write_hf(c, out, rng):
    os.makedirs(out, exist_ok=True)
    cfg = dict(c)
    cfg.update(max_position_embeddings=40960, rms_norm_eps=1e-6, hidden_act="silu", torch_dtype="bfloat16")
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    items = list(tensors(c, "bf16", "bf16", "bf16"))
    header, off = {}, 0
    for hf, _, shape, dt, _ in items:
        n = nbytes(dt, shape)
        header[hf] = {"dtype": "BF16", "shape": shape, "data_offsets": [off, off + n]}
        off += n
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(os.path.join(out, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        write_data(f, items, rng, {})
    return off


def gguf_str(s):
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def write_gguf(c, out, dtype, rng):
    otype = "q6_k" if dtype in ("q4_0", "q4_k", "q6_k") else dtype
    items = list(tensors(c, dtype, otype, "f32"))
    a = "qwen3"
    kv = [("general.architecture", 8, gguf_str(a)), ("general.alignment", 4, struct.pack("<I", 32)),
          (a + ".block_count", 4, struct.pack("<I", c["num_hidden_layers"])),
          (a + ".context_length", 4, struct.pack("<I", 40960)),
          (a + ".embedding_length", 4, struct.pack("<I", c["hidden_size"])),
          (a + ".feed_forward_length", 4, struct.pack("<I", c["intermediate_size"])),
          (a + ".attention.head_count", 4, struct.pack("<I", c["num_attention_heads"])),
          (a + ".attention.head_count_kv", 4, struct.pack("<I", c["num_key_value_heads"])),
          (a + ".attention.key_length", 4, struct.pack("<I", c["head_dim"])),
          (a + ".attention.value_length", 4, struct.pack("<I", c["head_dim"])),
          (a + ".rope.freq_base", 6, struct.pack("<f", c["rope_theta"])),
          (a + ".attention.layer_norm_rms_epsilon", 6, struct.pack("<f", 1e-6))]
    head = b"GGUF" + struct.pack("<IQQ", 3, len(items), len(kv))
    for k, t, v in kv:
        head += gguf_str(k) + struct.pack("<I", t) + v
    off = 0
    for _, name, shape, dt, _ in items:
        ne = list(reversed(shape))
        head += gguf_str(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", x) for x in ne)
        head += struct.pack("<IQ", GGML[dt][0], off)
        off += nbytes(dt, shape)
        off += -off % 32
    head += b"\0" * (-len(head) % 32)
    with open(out, "wb") as f:
        f.write(head)
        pos, pools = 0, {}
        for i, it in enumerate(items):
            write_data(f, [it], rng, pools, i)
            pos += nbytes(it[3], it[2])
            pad = -pos % 32
            f.write(b"\0" * pad)
            pos += pad
    return off


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", required=True, choices=sorted(PRESETS))
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "q8_0", "q4_0", "q4_k", "q6_k"])
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    c = dict(PRESETS[a.preset])
    rng = np.random.default_rng(0)
    if a.dtype == "bf16":
        n = write_hf(c, a.out, rng)
    else:
        n = write_gguf(c, a.out, a.dtype, rng)
    print(f"wrote {a.out}: {n / 2**30:.2f} GiB of {a.dtype} weights ({a.preset})", file=sys.stderr)


if __name__ == "__main__":
    main()
