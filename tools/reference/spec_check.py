#!/usr/bin/env python3
"""Independent re-implementation of the forward pass described in shared/docs/qwen-models.md (§2-§6),
in plain torch float64 (no transformers), run on the fixture directories written by make_fixtures.py.

For every fixture it reads config.json + safetensors (single file or sharded), computes the logits of the
whole multi-turn sequence (token-by-token recurrent DeltaNet, not the chunked form) and compares them with
reference.safetensors, and checks that the argmax of every greedy step gives the recorded ids.

Usage: python3 tools/reference/spec_check.py [tests/fixtures]
"""

import json
import math
import os
import sys

import torch
import torch.nn.functional as F
from safetensors import safe_open

torch.set_default_dtype(torch.float64)


def load_tensors(d):
    idx = os.path.join(d, "model.safetensors.index.json")
    files = sorted(set(json.load(open(idx))["weight_map"].values())) if os.path.exists(idx) else ["model.safetensors"]
    out = {}
    for f in files:
        with safe_open(os.path.join(d, f), "pt") as s:
            for k in s.keys():
                out[k] = s.get_tensor(k).double()
    return out


def text_cfg(cfg):
    t = dict(cfg.get("text_config", cfg))
    rp = t.get("rope_parameters") or {}
    t["theta"] = rp.get("rope_theta", t.get("rope_theta"))
    t["prf"] = rp.get("partial_rotary_factor", t.get("partial_rotary_factor", 1.0))
    if "layer_types" not in t:
        if "linear_num_value_heads" in t:
            n = t.get("full_attention_interval", 4)
            t["layer_types"] = ["full_attention" if (i + 1) % n == 0 else "linear_attention"
                                for i in range(t["num_hidden_layers"])]
        else:
            t["layer_types"] = ["full_attention"] * t["num_hidden_layers"]
    t["tied"] = cfg.get("tie_word_embeddings", False)  # outer value for wrappers (§6.8 note 1)
    if "num_local_experts" in t:  # transformers 5 writes qwen3_moe's num_experts under this name
        t["num_experts"] = t["num_local_experts"]
    return t


def rms(x, w, eps, zc):
    y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return y * (1.0 + w) if zc else y * w


def rope(x, pos, R, theta):
    # x [T, nh, hd]; NeoX pairing over the first R dims (§2.2)
    inv = 1.0 / (theta ** (torch.arange(0, R, 2, dtype=torch.float64) / R))
    ang = pos[:, None] * inv[None, :]
    cos, sin = ang.cos()[:, None, :], ang.sin()[:, None, :]
    x1, x2, rest = x[..., : R // 2], x[..., R // 2: R], x[..., R:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin, rest], -1)


def attention(W, p, x, t, hybrid, eps):
    T = x.shape[0]
    nh, nkv = t["num_attention_heads"], t["num_key_value_heads"]
    hd = t.get("head_dim") or t["hidden_size"] // nh
    q = x @ W[p + "q_proj.weight"].T
    if p + "q_proj.bias" in W:
        q = q + W[p + "q_proj.bias"]
    if hybrid:
        q = q.view(T, nh, 2 * hd)
        q, gate = q[..., :hd], q[..., hd:].reshape(T, nh * hd)
    else:
        q = q.view(T, nh, hd)
    k = x @ W[p + "k_proj.weight"].T
    v = x @ W[p + "v_proj.weight"].T
    if p + "k_proj.bias" in W:
        k, v = k + W[p + "k_proj.bias"], v + W[p + "v_proj.bias"]
    k, v = k.view(T, nkv, hd), v.view(T, nkv, hd)
    if p + "q_norm.weight" in W:
        q = rms(q, W[p + "q_norm.weight"], eps, hybrid)
        k = rms(k, W[p + "k_norm.weight"], eps, hybrid)
    R = int(hd * t["prf"])
    pos = torch.arange(T, dtype=torch.float64)
    q, k = rope(q, pos, R, t["theta"]), rope(k, pos, R, t["theta"])
    rep = nh // nkv
    k, v = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
    s = torch.einsum("qhd,khd->hqk", q, k) / math.sqrt(hd)
    s = s.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
    o = torch.einsum("hqk,khd->qhd", s.softmax(-1), v).reshape(T, nh * hd)
    if hybrid:
        o = o * torch.sigmoid(gate)
    return o @ W[p + "o_proj.weight"].T


def deltanet(W, p, x, t, eps):
    T = x.shape[0]
    Hk, Hv, dk, dv = (t["linear_num_key_heads"], t["linear_num_value_heads"], t["linear_key_head_dim"],
                      t["linear_value_head_dim"])
    r = Hv // Hk
    if p + "in_proj_qkvz.weight" in W:  # Qwen3-Next: grouped by key head (§6.4 step 1)
        qkvz = (x @ W[p + "in_proj_qkvz.weight"].T).view(T, Hk, 2 * dk + 2 * r * dv)
        q, k, v, z = torch.split(qkvz, [dk, dk, r * dv, r * dv], -1)
        ba = (x @ W[p + "in_proj_ba.weight"].T).view(T, Hk, 2 * r)
        b, a = ba[..., :r].reshape(T, Hv), ba[..., r:].reshape(T, Hv)
        mixed = torch.cat([q.reshape(T, -1), k.reshape(T, -1), v.reshape(T, -1)], -1)
        z = z.reshape(T, Hv, dv)
    else:
        mixed = x @ W[p + "in_proj_qkv.weight"].T
        z = (x @ W[p + "in_proj_z.weight"].T).view(T, Hv, dv)
        b = x @ W[p + "in_proj_b.weight"].T
        a = x @ W[p + "in_proj_a.weight"].T
    cw = W[p + "conv1d.weight"][:, 0, :]  # [C, Kc]
    Kc = cw.shape[1]
    xp = torch.cat([torch.zeros(Kc - 1, mixed.shape[1]), mixed], 0)
    u = sum(cw[:, tau] * xp[tau: tau + T] for tau in range(Kc))
    u = F.silu(u)
    q, k, v = torch.split(u, [Hk * dk, Hk * dk, Hv * dv], -1)
    q, k, v = q.view(T, Hk, dk), k.view(T, Hk, dk), v.view(T, Hv, dv)
    q = q * torch.rsqrt(q.pow(2).sum(-1, keepdim=True) + 1e-6)
    k = k * torch.rsqrt(k.pow(2).sum(-1, keepdim=True) + 1e-6)
    q = q / math.sqrt(dk)
    beta = torch.sigmoid(b)
    g = -torch.exp(W[p + "A_log"]) * F.softplus(a + W[p + "dt_bias"])
    S = torch.zeros(Hv, dk, dv)
    out = torch.zeros(T, Hv, dv)
    for i in range(T):
        for h in range(Hv):
            kh, qh = k[i, h // r], q[i, h // r]  # value head h reads key head h // r (§6.4 step 6)
            S[h] = S[h] * torch.exp(g[i, h])
            m = S[h].T @ kh
            delta = beta[i, h] * (v[i, h] - m)
            S[h] = S[h] + torch.outer(kh, delta)
            out[i, h] = S[h].T @ qh
    y = W[p + "norm.weight"] * (out * torch.rsqrt(out.pow(2).mean(-1, keepdim=True) + eps)) * F.silu(z)
    return y.reshape(T, Hv * dv) @ W[p + "out_proj.weight"].T


def swiglu(x, gate, up, down):
    return (F.silu(x @ gate.T) * (x @ up.T)) @ down.T


def moe(W, p, x, t):
    E, k = t["num_experts"], t["num_experts_per_tok"]
    probs = (x @ W[p + "gate.weight"].T).softmax(-1)
    w, idx = probs.topk(k, -1)
    if t.get("norm_topk_prob", True):  # qwen3_5_moe: always
        w = w / w.sum(-1, keepdim=True)
    y = torch.zeros_like(x)
    fused = p + "experts.gate_up_proj" in W
    for e in range(E):
        sel = (idx == e)
        rows = sel.any(-1).nonzero()[:, 0]
        if len(rows) == 0:
            continue
        if fused:
            gu = W[p + "experts.gate_up_proj"][e]
            Ie = gu.shape[0] // 2
            ge, ue, de = gu[:Ie], gu[Ie:], W[p + "experts.down_proj"][e]
        else:
            ge, ue, de = (W[f"{p}experts.{e}.gate_proj.weight"], W[f"{p}experts.{e}.up_proj.weight"],
                          W[f"{p}experts.{e}.down_proj.weight"])
        we = (w * sel).sum(-1)[rows]
        y[rows] += we[:, None] * swiglu(x[rows], ge, ue, de)
    if p + "shared_expert_gate.weight" in W:
        sh = swiglu(x, W[p + "shared_expert.gate_proj.weight"], W[p + "shared_expert.up_proj.weight"],
                    W[p + "shared_expert.down_proj.weight"])
        y = y + torch.sigmoid(x @ W[p + "shared_expert_gate.weight"].T) * sh
    return y


def forward(W, cfg, ids):
    t = text_cfg(cfg)
    pre = "model.language_model." if "model.language_model.embed_tokens.weight" in W else "model."
    hybrid = "linear_num_value_heads" in t
    eps = t["rms_norm_eps"]
    emb = W[pre + "embed_tokens.weight"]
    x = emb[torch.tensor(ids)]
    mlp_only = t.get("mlp_only_layers") or []
    step = t.get("decoder_sparse_step", 1)
    for i, lt in enumerate(t["layer_types"]):
        p = f"{pre}layers.{i}."
        h = rms(x, W[p + "input_layernorm.weight"], eps, hybrid)
        if lt == "linear_attention":
            x = x + deltanet(W, p + "linear_attn.", h, t, eps)
        else:
            x = x + attention(W, p + "self_attn.", h, t, hybrid, eps)
        h = rms(x, W[p + "post_attention_layernorm.weight"], eps, hybrid)
        is_moe = t.get("num_experts") and i not in mlp_only and (i + 1) % step == 0
        if is_moe:
            x = x + moe(W, p + "mlp.", h, t)
        else:
            x = x + swiglu(h, W[p + "mlp.gate_proj.weight"], W[p + "mlp.up_proj.weight"], W[p + "mlp.down_proj.weight"])
    x = rms(x, W[pre + "norm.weight"], eps, hybrid)
    lm = W["lm_head.weight"] if "lm_head.weight" in W else emb
    if ("lm_head.weight" in W) == t["tied"]:
        raise RuntimeError("lm_head.weight presence disagrees with tie_word_embeddings")
    return x @ lm.T


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "..", "tests",
                                                              "fixtures")
    ok = True
    for name in sorted(os.listdir(root)):
        d = os.path.join(root, name)
        if not os.path.isfile(os.path.join(d, "reference.json")):
            continue
        cfg = json.load(open(os.path.join(d, "config.json")))
        ref = json.load(open(os.path.join(d, "reference.json")))
        W = load_tensors(d)
        with safe_open(os.path.join(d, "reference.safetensors"), "pt") as s:
            L_single, L_mt = s.get_tensor("logits_single").double(), s.get_tensor("logits_multiturn").double()
        c0, c1 = ref["cases"]
        seqs = [(c0["prompt"] + c0["generated"], L_single, [(len(c0["prompt"]), c0["generated"])]),
                (c1["prompt"] + c1["generated1"] + c1["append"] + c1["generated2"], L_mt,
                 [(len(c1["prompt"]), c1["generated1"]),
                  (len(c1["prompt"]) + len(c1["generated1"]) + len(c1["append"]), c1["generated2"])])]
        worst, worst_rel, ids_ok, min_margin = 0.0, 0.0, True, math.inf
        for seq, L_ref, gens in seqs:
            L = forward(W, cfg, seq)
            worst = max(worst, (L - L_ref).abs().max().item())
            rowmax = L_ref.abs().max(-1).values.clamp(min=1.0)
            worst_rel = max(worst_rel, ((L - L_ref).abs().max(-1).values / rowmax).max().item())
            for start, gen in gens:
                for j, tok in enumerate(gen):
                    row = L[start + j - 1]
                    top = row.topk(2)
                    min_margin = min(min_margin, (top.values[0] - top.values[1]).item())
                    ids_ok &= int(top.indices[0]) == tok
        good = ids_ok and worst < 1e-3
        ok &= good
        print(f"{name:16s} max|logit - reference| = {worst:.2e} (rel. to row max {worst_rel:.1e})"
              f"  greedy ids {'match' if ids_ok else 'DIFFER'}"
              f"  (margin here {min_margin:.4f})  {'OK' if good else 'FAIL'}", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
