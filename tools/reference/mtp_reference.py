#!/usr/bin/env python3
"""mtp_reference.py: an independent float64 reference of the MTP head (qwen-models.md §7.2), for
the fixtures whose checkpoint ships mtp.* tensors. transformers drops those tensors and never runs
the head, so the reference is this script: torch float64, no transformers, the main model from
spec_check.py (itself checked against transformers' logits), the head written from the document:

  e  = RMSNorm(embed[t_{p+1}]; mtp.pre_fc_norm_embedding)    h = RMSNorm(h_p; mtp.pre_fc_norm_hidden)
  u  = [e, h] mtp.fc^T                                        u = one full-attention decoder layer (mtp.layers.0)
                                                              at RoPE position p, attending over rows 0..p
  o  = RMSNorm(u; mtp.norm)                                    logits = o lm_head^T
with h_p the main model's hidden row at p after its final norm. Zero-centred norms as the model's.

It writes <fixture>/mtp.reference.safetensors: "ids" [T] (the sequence: case 0's prompt and
generated ids), "hidden" [T, H] (the main model's final-norm rows), "mtp_logits" [T-1, V] (row p:
the head's logits for position p + 2) and "mtp_hidden" [T-1, H] (its final-norm rows), all float32.

Usage: V/bin/python tools/reference/mtp_reference.py [tests/fixtures]
"""
import json
import os
import sys

import torch
from safetensors.torch import save_file

sys.path.insert(0, os.path.dirname(__file__))
import spec_check as sc  # noqa: E402

torch.set_default_dtype(torch.float64)


def main_hidden(W, cfg, ids):
    """The main model's final-norm hidden rows (spec_check.forward without the LM head)."""
    t = sc.text_cfg(cfg)
    pre = "model.language_model." if "model.language_model.embed_tokens.weight" in W else "model."
    hybrid = "linear_num_value_heads" in t
    eps = t["rms_norm_eps"]
    x = W[pre + "embed_tokens.weight"][torch.tensor(ids)]
    for i, lt in enumerate(t["layer_types"]):
        p = f"{pre}layers.{i}."
        h = sc.rms(x, W[p + "input_layernorm.weight"], eps, hybrid)
        x = x + (sc.deltanet(W, p + "linear_attn.", h, t, eps) if lt == "linear_attention"
                 else sc.attention(W, p + "self_attn.", h, t, hybrid, eps))
        h = sc.rms(x, W[p + "post_attention_layernorm.weight"], eps, hybrid)
        if t.get("num_experts"):
            x = x + sc.moe(W, p + "mlp.", h, t)
        else:
            x = x + sc.swiglu(h, W[p + "mlp.gate_proj.weight"], W[p + "mlp.up_proj.weight"], W[p + "mlp.down_proj.weight"])
    return sc.rms(x, W[pre + "norm.weight"], eps, hybrid), t, pre, hybrid


def mtp(W, t, pre, hybrid, hidden, ids):
    eps = t["rms_norm_eps"]
    emb = W[pre + "embed_tokens.weight"]
    T = len(ids) - 1
    e = sc.rms(emb[torch.tensor(ids[1:])], W["mtp.pre_fc_norm_embedding.weight"], eps, hybrid)
    h = sc.rms(hidden[:T], W["mtp.pre_fc_norm_hidden.weight"], eps, hybrid)
    u = torch.cat([e, h], -1) @ W["mtp.fc.weight"].T
    p = "mtp.layers.0."
    a = sc.rms(u, W[p + "input_layernorm.weight"], eps, hybrid)
    u = u + sc.attention(W, p + "self_attn.", a, t, hybrid, eps)  # rows 0..T-1 at positions 0..T-1
    a = sc.rms(u, W[p + "post_attention_layernorm.weight"], eps, hybrid)
    if t.get("num_experts"):
        u = u + sc.moe(W, p + "mlp.", a, t)
    else:
        u = u + sc.swiglu(a, W[p + "mlp.gate_proj.weight"], W[p + "mlp.up_proj.weight"], W[p + "mlp.down_proj.weight"])
    o = sc.rms(u, W["mtp.norm.weight"], eps, hybrid)
    lm = W["lm_head.weight"] if "lm_head.weight" in W else emb
    return o @ lm.T, o


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "..", "tests", "fixtures")
    n = 0
    for name in sorted(os.listdir(root)):
        d = os.path.join(root, name)
        if not os.path.isfile(os.path.join(d, "reference.json")):
            continue
        W = sc.load_tensors(d)
        if "mtp.fc.weight" not in W:
            continue
        cfg = json.load(open(os.path.join(d, "config.json")))
        ref = json.load(open(os.path.join(d, "reference.json")))
        c0 = ref["cases"][0]
        ids = c0["prompt"] + c0["generated"]
        hidden, t, pre, hybrid = main_hidden(W, cfg, ids)
        logits, o = mtp(W, t, pre, hybrid, hidden, ids)
        save_file({"ids": torch.tensor(ids, dtype=torch.int32), "hidden": hidden.float().contiguous(),
                   "mtp_logits": logits.float().contiguous(), "mtp_hidden": o.float().contiguous()},
                  os.path.join(d, "mtp.reference.safetensors"))
        top = logits.argmax(-1)
        print(f"{name}: {len(ids)} rows, MTP argmax of the first rows {top[:8].tolist()}")
        n += 1
    print(f"{n} fixture(s) with an MTP head")
    return 0 if n else 1


if __name__ == "__main__":
    sys.exit(main())
