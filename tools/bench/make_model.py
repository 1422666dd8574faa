#!/usr/bin/env python3
"""Writes a random-weight Hugging Face model directory with the real published shapes of a
Qwen model, for benchmarks (never for correctness: use tools/reference for that).

    python3 tools/bench/make_model.py --preset qwen3-0.6b --out /tmp/qwen3-0.6b

Needs numpy only. Weights are bf16, N(0, 0.02); norms 1 (standard) or 0 (zero-centred).
"""
import argparse, json, os, struct
import numpy as np

PRESETS = {
    # qwen-models.md §4.2 / §6.8
    "qwen3-0.6b": dict(model_type="qwen3", hidden_size=1024, num_hidden_layers=28, num_attention_heads=16,
                       num_key_value_heads=8, head_dim=128, intermediate_size=3072, vocab_size=151936,
                       tie_word_embeddings=True, rope_theta=1e6),
    "qwen3-1.7b": dict(model_type="qwen3", hidden_size=2048, num_hidden_layers=28, num_attention_heads=16,
                       num_key_value_heads=8, head_dim=128, intermediate_size=6144, vocab_size=151936,
                       tie_word_embeddings=True, rope_theta=1e6),
    "qwen3.5-0.8b": dict(model_type="qwen3_5_text", hidden_size=1024, num_hidden_layers=24, num_attention_heads=8,
                         num_key_value_heads=2, head_dim=256, intermediate_size=3584, vocab_size=248320,
                         tie_word_embeddings=True, rope_theta=1e7, partial_rotary_factor=0.25,
                         linear_num_key_heads=16, linear_num_value_heads=16, linear_key_head_dim=128,
                         linear_value_head_dim=128, linear_conv_kernel_dim=4, full_attention_interval=4),
}


def bf16(rng, shape, std=0.02, const=None):
    n = int(np.prod(shape))
    if const is not None:
        f = np.full(n, const, dtype=np.float32)
    else:
        f = rng.standard_normal(n, dtype=np.float32) * std
    return (f.view(np.uint32) >> 16).astype(np.uint16)  # truncation is fine for random data


def tensors(c, rng):
    H, L, V = c["hidden_size"], c["num_hidden_layers"], c["vocab_size"]
    nh, nkv, hd, I = c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"], c["intermediate_size"]
    hybrid = c["model_type"].startswith("qwen3_5")
    one = 0.0 if hybrid else 1.0
    yield "model.embed_tokens.weight", [V, H], bf16(rng, [V, H])
    yield "model.norm.weight", [H], bf16(rng, [H], const=one)
    if not c["tie_word_embeddings"]:
        yield "lm_head.weight", [V, H], bf16(rng, [V, H])
    for l in range(L):
        p = f"model.layers.{l}."
        yield p + "input_layernorm.weight", [H], bf16(rng, [H], const=one)
        yield p + "post_attention_layernorm.weight", [H], bf16(rng, [H], const=one)
        full = not hybrid or (l + 1) % c["full_attention_interval"] == 0
        if full:
            qw = nh * hd * (2 if hybrid else 1)
            yield p + "self_attn.q_proj.weight", [qw, H], bf16(rng, [qw, H])
            yield p + "self_attn.k_proj.weight", [nkv * hd, H], bf16(rng, [nkv * hd, H])
            yield p + "self_attn.v_proj.weight", [nkv * hd, H], bf16(rng, [nkv * hd, H])
            yield p + "self_attn.o_proj.weight", [H, nh * hd], bf16(rng, [H, nh * hd])
            yield p + "self_attn.q_norm.weight", [hd], bf16(rng, [hd], const=one)
            yield p + "self_attn.k_norm.weight", [hd], bf16(rng, [hd], const=one)
        else:
            Hk, Hv = c["linear_num_key_heads"], c["linear_num_value_heads"]
            dk, dv, K = c["linear_key_head_dim"], c["linear_value_head_dim"], c["linear_conv_kernel_dim"]
            cd = 2 * Hk * dk + Hv * dv
            q = p + "linear_attn."
            yield q + "in_proj_qkv.weight", [cd, H], bf16(rng, [cd, H])
            yield q + "in_proj_z.weight", [Hv * dv, H], bf16(rng, [Hv * dv, H])
            yield q + "in_proj_b.weight", [Hv, H], bf16(rng, [Hv, H])
            yield q + "in_proj_a.weight", [Hv, H], bf16(rng, [Hv, H])
            yield q + "conv1d.weight", [cd, 1, K], bf16(rng, [cd, 1, K], std=0.3)
            yield q + "A_log", [Hv], bf16(rng, [Hv], const=0.5)
            yield q + "dt_bias", [Hv], bf16(rng, [Hv], const=1.0)
            yield q + "norm.weight", [dv], bf16(rng, [dv], const=1.0)
            yield q + "out_proj.weight", [H, Hv * dv], bf16(rng, [H, Hv * dv])
        yield p + "mlp.gate_proj.weight", [I, H], bf16(rng, [I, H])
        yield p + "mlp.up_proj.weight", [I, H], bf16(rng, [I, H])
        yield p + "mlp.down_proj.weight", [H, I], bf16(rng, [H, I])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", required=True, choices=sorted(PRESETS))
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    c = dict(PRESETS[a.preset])
    c.update(max_position_embeddings=40960, rms_norm_eps=1e-6, hidden_act="silu", torch_dtype="bfloat16")
    if c["model_type"].startswith("qwen3_5"):
        c["layer_types"] = ["full_attention" if (i + 1) % 4 == 0 else "linear_attention"
                            for i in range(c["num_hidden_layers"])]
    os.makedirs(a.out, exist_ok=True)
    json.dump(c, open(os.path.join(a.out, "config.json"), "w"), indent=1)
    rng = np.random.default_rng(0)
    items = list(tensors(c, rng))
    header, off = {}, 0
    for name, shape, data in items:
        header[name] = {"dtype": "BF16", "shape": shape, "data_offsets": [off, off + data.nbytes]}
        off += data.nbytes
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(os.path.join(a.out, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        for _, _, data in items:
            f.write(data.tobytes())
    print(f"wrote {a.out}: {off / 2**20:.0f} MiB of weights")


if __name__ == "__main__":
    main()
