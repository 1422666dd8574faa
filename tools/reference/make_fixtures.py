#!/usr/bin/env python3
"""Build tiny random-weight Qwen-family models as real Hugging Face directories and record
transformers' reference outputs for the conformance tests of proven.

Usage:
    python3 tools/reference/make_fixtures.py [--out tests/fixtures] [--only NAME[,NAME...]] [--threads 1]

Requires torch, transformers (developed against torch 2.11 / transformers 5.17), safetensors.
Everything runs on the CPU, with fixed seeds; running it twice on one machine gives identical files.
See tools/reference/README.md for what is produced and why.
"""

import argparse
import hashlib
import json
import math
import os
import shutil
import sys
import tempfile
import time
import zlib

os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")  # CPU only, even on a GPU machine

import torch  # noqa: E402
import transformers  # noqa: E402
from safetensors import safe_open  # noqa: E402
from safetensors.torch import save_file  # noqa: E402

transformers.utils.logging.set_verbosity_error()
try:
    transformers.utils.logging.disable_progress_bar()
except Exception:  # pragma: no cover
    pass

MIN_MARGIN = 0.02  # required min top-1 margin over every greedy step (the brief asks for >= 1e-2)
MIN_ROUTER_GAP = 5e-4  # required min gap between the k-th and (k+1)-th router logit (MoE fixtures)
MIN_DISTINCT = (8, 4)  # distinct ids required in the 16 single-case tokens / in each 8-token turn
MAX_ATTEMPTS = 20  # seeds tried per fixture before giving up
N_GEN = 16  # greedy tokens of the single case
N_GEN_MT = 8  # greedy tokens per turn of the multi-turn case
N_APPEND = 30  # "user" tokens appended between the two turns

# --------------------------------------------------------------------------------------------
# Fixture definitions
# --------------------------------------------------------------------------------------------
# `text` holds the text-model config kwargs; `vision` (wrapper models only) the tiny vision tower.
# `post` lists the rewrites applied to what save_pretrained wrote:
#   fuse_experts   per-expert mlp.experts.N.{gate,up,down}_proj.weight -> fused 3-D gate_up_proj/down_proj
#   split_experts  the reverse
#   add_mtp        synthetic MTP head tensors (mtp.*), as real Qwen3.5 checkpoints store them
#   legacy_config  config.json in the pre-v5 style of the official checkpoints (rope_theta and
#                  partial_rotary_factor at top level, no rope_parameters, num_experts,
#                  full_attention_interval instead of layer_types where the pattern is regular)
# `variant_of` re-uses another fixture's weights (same seed, same scales) with different rewrites.

VISION_TINY = dict(depth=1, hidden_size=16, intermediate_size=16, num_heads=2, patch_size=2,
                   temporal_patch_size=1, spatial_merge_size=1, num_position_embeddings=4)

FIXTURES = [
    dict(name="qwen2", arch="Qwen2ForCausalLM", cfg="Qwen2Config", hybrid=False, seed=1101,
         text=dict(vocab_size=997, hidden_size=96, intermediate_size=176, num_hidden_layers=3,
                   num_attention_heads=6, num_key_value_heads=2, rms_norm_eps=1e-5,
                   tie_word_embeddings=True, max_position_embeddings=4096,
                   rope_parameters=dict(rope_type="default", rope_theta=1000000.0)),
         post=["legacy_config"]),
    dict(name="qwen3", arch="Qwen3ForCausalLM", cfg="Qwen3Config", hybrid=False, seed=1201,
         text=dict(vocab_size=1009, hidden_size=64, intermediate_size=160, num_hidden_layers=3,
                   num_attention_heads=4, num_key_value_heads=2, head_dim=24, rms_norm_eps=1e-6,
                   tie_word_embeddings=False, max_position_embeddings=4096,
                   rope_parameters=dict(rope_type="default", rope_theta=1000000.0)),
         post=[]),
    dict(name="qwen3_moe", arch="Qwen3MoeForCausalLM", cfg="Qwen3MoeConfig", hybrid=False, seed=1301,
         text=dict(vocab_size=769, hidden_size=64, intermediate_size=112, num_hidden_layers=3,
                   num_attention_heads=4, num_key_value_heads=2, head_dim=32, rms_norm_eps=1e-6,
                   num_experts=8, num_experts_per_tok=2, moe_intermediate_size=48,
                   norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[1],
                   tie_word_embeddings=False, max_position_embeddings=4096,
                   rope_parameters=dict(rope_type="default", rope_theta=1000000.0)),
         post=[]),  # transformers 5.17 save_pretrained already writes per-expert tensors
    dict(name="qwen3_moe_fused", variant_of="qwen3_moe", post=["fuse_experts", "legacy_config"]),
    dict(name="qwen3_next", arch="Qwen3NextForCausalLM", cfg="Qwen3NextConfig", hybrid=True, seed=4401,
         text=dict(vocab_size=641, hidden_size=64, intermediate_size=96, num_hidden_layers=4,
                   num_attention_heads=4, num_key_value_heads=2, head_dim=32,
                   partial_rotary_factor=0.25, full_attention_interval=4,
                   linear_num_key_heads=2, linear_num_value_heads=4,
                   linear_key_head_dim=32, linear_value_head_dim=32, linear_conv_kernel_dim=4,
                   num_experts=8, num_experts_per_tok=2, moe_intermediate_size=32,
                   shared_expert_intermediate_size=48, norm_topk_prob=True, decoder_sparse_step=1,
                   rms_norm_eps=1e-6, tie_word_embeddings=False, max_position_embeddings=4096,
                   rope_parameters=dict(rope_type="default", rope_theta=10000000.0,
                                        partial_rotary_factor=0.25)),
         post=["legacy_config"]),
    dict(name="qwen3_5", arch="Qwen3_5ForConditionalGeneration", cfg="Qwen3_5Config", hybrid=True, seed=1501,
         text=dict(vocab_size=773, hidden_size=64, intermediate_size=144, num_hidden_layers=5,
                   layer_types=["linear_attention", "full_attention", "linear_attention",
                                "linear_attention", "full_attention"],
                   num_attention_heads=4, num_key_value_heads=2, head_dim=32,
                   partial_rotary_factor=0.25,
                   linear_num_key_heads=2, linear_num_value_heads=4,
                   linear_key_head_dim=16, linear_value_head_dim=16, linear_conv_kernel_dim=4,
                   rms_norm_eps=1e-6, tie_word_embeddings=True, max_position_embeddings=4096,
                   mtp_num_hidden_layers=1, mtp_use_dedicated_embeddings=False,
                   rope_parameters=dict(rope_type="default", rope_theta=10000000.0,
                                        partial_rotary_factor=0.25,
                                        mrope_section=[11, 11, 10], mrope_interleaved=True)),
         vision=VISION_TINY, outer=dict(tie_word_embeddings=True),
         post=["add_mtp"]),
    dict(name="qwen3_5_text", arch="Qwen3_5ForCausalLM", cfg="Qwen3_5TextConfig", hybrid=True, seed=2601,
         text=dict(vocab_size=523, hidden_size=64, intermediate_size=128, num_hidden_layers=4,
                   num_attention_heads=4, num_key_value_heads=1, head_dim=64,
                   partial_rotary_factor=0.25,
                   linear_num_key_heads=2, linear_num_value_heads=4,
                   linear_key_head_dim=32, linear_value_head_dim=32, linear_conv_kernel_dim=4,
                   rms_norm_eps=1e-6, tie_word_embeddings=False, max_position_embeddings=4096,
                   rope_parameters=dict(rope_type="default", rope_theta=10000000.0,
                                        partial_rotary_factor=0.25,
                                        mrope_section=[11, 11, 10], mrope_interleaved=True)),
         post=[]),
    dict(name="qwen3_5_moe", arch="Qwen3_5MoeForConditionalGeneration", cfg="Qwen3_5MoeConfig", hybrid=True,
         seed=8701,
         text=dict(vocab_size=883, hidden_size=64, num_hidden_layers=4,
                   num_attention_heads=4, num_key_value_heads=2, head_dim=32,
                   partial_rotary_factor=0.25,
                   linear_num_key_heads=2, linear_num_value_heads=4,
                   linear_key_head_dim=16, linear_value_head_dim=16, linear_conv_kernel_dim=4,
                   num_experts=8, num_experts_per_tok=2, moe_intermediate_size=32,
                   shared_expert_intermediate_size=48,
                   rms_norm_eps=1e-6, tie_word_embeddings=False, max_position_embeddings=4096,
                   rope_parameters=dict(rope_type="default", rope_theta=10000000.0,
                                        partial_rotary_factor=0.25,
                                        mrope_section=[11, 11, 10], mrope_interleaved=True)),
         vision=VISION_TINY, outer=dict(tie_word_embeddings=False),
         post=["fuse_experts"], shards=3),
    dict(name="qwen3_odd", arch="Qwen3ForCausalLM", cfg="Qwen3Config", hybrid=False, seed=1801,
         text=dict(vocab_size=1531, hidden_size=80, intermediate_size=203, num_hidden_layers=2,
                   num_attention_heads=6, num_key_value_heads=3, head_dim=40, rms_norm_eps=1e-5,
                   tie_word_embeddings=True, max_position_embeddings=4096,
                   rope_parameters=dict(rope_type="default", rope_theta=5000000.0)),
         post=[]),
    dict(name="qwen3_5_r3", arch="Qwen3_5ForConditionalGeneration", cfg="Qwen3_5Config", hybrid=True, seed=2901,
         text=dict(vocab_size=1021, hidden_size=96, intermediate_size=211, num_hidden_layers=3,
                   layer_types=["linear_attention", "linear_attention", "full_attention"],
                   num_attention_heads=3, num_key_value_heads=1, head_dim=40,
                   partial_rotary_factor=0.25,
                   linear_num_key_heads=2, linear_num_value_heads=6,
                   linear_key_head_dim=24, linear_value_head_dim=24, linear_conv_kernel_dim=4,
                   rms_norm_eps=1e-6, tie_word_embeddings=False, max_position_embeddings=4096,
                   rope_parameters=dict(rope_type="default", rope_theta=10000000.0,
                                        partial_rotary_factor=0.25,
                                        mrope_section=[11, 11, 10], mrope_interleaved=True)),
         vision=VISION_TINY, outer=dict(tie_word_embeddings=False),
         post=[]),
]


def fixture_by_name(name):
    for f in FIXTURES:
        if f["name"] == name:
            return f
    raise KeyError(name)


def resolved(fx):
    """A fixture with the fields of the fixture it is a variant of filled in."""
    if "variant_of" not in fx:
        return fx
    base = dict(fixture_by_name(fx["variant_of"]))
    base.update({k: v for k, v in fx.items()})
    return base


# --------------------------------------------------------------------------------------------
# Random weights
# --------------------------------------------------------------------------------------------

def gen_for(seed, name):
    g = torch.Generator()
    g.manual_seed((seed * 1000003 + zlib.crc32(name.encode())) % (2**63))
    return g


def randn(g, shape, std, mean=0.0):
    return torch.randn(shape, generator=g, dtype=torch.float32) * std + mean


def random_value(name, shape, fx, seed):
    """Value of one parameter. Seeded by (seed, name): independent of iteration order."""
    g = gen_for(seed, name)
    zero_centred = fx["hybrid"]
    H = fx["text"]["hidden_size"]
    tied = fx.get("outer", fx["text"]).get("tie_word_embeddings", False)
    if ".visual." in name or name.startswith("visual."):
        # vision tower: ignored by the engine; any finite values
        if name.endswith("norm1.weight") or name.endswith("norm2.weight") or name.endswith("norm.weight"):
            return randn(g, shape, 0.1, 1.0)
        return randn(g, shape, 0.05)
    if name.endswith("A_log"):
        # stratified over log A in [log 0.01, log 16]: every layer has slow-decaying heads (state
        # survives several 64-token chunks) as well as fast ones
        n = shape[0]
        lo, hi = math.log(0.01), math.log(16.0)
        u = torch.rand(n, generator=g)
        strata = (torch.arange(n, dtype=torch.float32) + u) / n
        vals = lo + (hi - lo) * strata
        perm = torch.randperm(n, generator=g)
        return vals[perm]
    if name.endswith("dt_bias"):
        return randn(g, shape, 0.5)
    if name.endswith("conv1d.weight"):
        return randn(g, shape, 0.5)
    if name.endswith("linear_attn.norm.weight"):
        return randn(g, shape, 0.1, 1.0)  # gated norm: plain weight
    if name in ("model.norm.weight", "model.language_model.norm.weight") and tied:
        # tied embeddings: the embedding is kept small against the layer outputs (otherwise the
        # last token's own embedding wins the argmax and greedy just repeats it), so the final norm
        # scale is raised to keep the logits spread (effective scale ~6)
        return randn(g, shape, 0.5, 5.0 if zero_centred else 6.0)
    module = name.rsplit(".", 1)[0].rsplit(".", 1)[-1]
    if "norm" in module and name.endswith(".weight"):
        # RMSNorm weights (input/post-attention/final/q_norm/k_norm/mtp norms)
        return randn(g, shape, 0.1, 0.0 if zero_centred else 1.0)
    if name.endswith(".bias"):
        return randn(g, shape, 0.1)
    if name.endswith("embed_tokens.weight"):
        return randn(g, shape, 0.1 if tied else 1.0)
    if name.endswith("lm_head.weight"):
        return randn(g, shape, 5.0 / math.sqrt(H))
    if name.endswith("mlp.gate.weight"):  # MoE router [E, H]: clear top-k choices
        return randn(g, shape, 6.0 / math.sqrt(H))
    if name.endswith("shared_expert_gate.weight"):
        return randn(g, shape, 1.0 / math.sqrt(H))
    if name.endswith("experts.gate_up_proj"):  # [E, 2Ie, H]
        return randn(g, shape, 1.0 / math.sqrt(shape[-1]))
    if name.endswith("experts.down_proj"):  # [E, H, Ie]
        return randn(g, shape, 1.0 / math.sqrt(shape[-1]))
    if name.endswith("in_proj_a.weight"):
        return randn(g, shape, 0.5 / math.sqrt(shape[-1]))
    if name.endswith("in_proj_ba.weight"):
        return randn(g, shape, 0.75 / math.sqrt(shape[-1]))
    if len(shape) == 2:  # any other Linear [out, in]
        return randn(g, shape, 1.0 / math.sqrt(shape[-1]))
    raise ValueError(f"no init rule for {name} {tuple(shape)}")


@torch.no_grad()
def randomize_(model, fx, seed):
    seen = set()
    for name, p in model.named_parameters():
        if id(p) in seen:
            continue
        seen.add(id(p))
        v = random_value(name, tuple(p.shape), fx, seed)
        # round to bf16 first; everything downstream is computed from these rounded values
        p.data = v.to(torch.bfloat16)
    model.to(torch.bfloat16)


def mtp_tensors(fx, seed):
    """Synthetic MTP head, named as in released Qwen3.5 checkpoints (one full-attention layer)."""
    t = fx["text"]
    H, nh, nkv, hd = t["hidden_size"], t["num_attention_heads"], t["num_key_value_heads"], t["head_dim"]
    I = t["intermediate_size"]
    shapes = {
        "mtp.fc.weight": (H, 2 * H),
        "mtp.pre_fc_norm_embedding.weight": (H,),
        "mtp.pre_fc_norm_hidden.weight": (H,),
        "mtp.norm.weight": (H,),
        "mtp.layers.0.input_layernorm.weight": (H,),
        "mtp.layers.0.self_attn.q_proj.weight": (nh * 2 * hd, H),
        "mtp.layers.0.self_attn.k_proj.weight": (nkv * hd, H),
        "mtp.layers.0.self_attn.v_proj.weight": (nkv * hd, H),
        "mtp.layers.0.self_attn.o_proj.weight": (H, nh * hd),
        "mtp.layers.0.self_attn.q_norm.weight": (hd,),
        "mtp.layers.0.self_attn.k_norm.weight": (hd,),
        "mtp.layers.0.post_attention_layernorm.weight": (H,),
        "mtp.layers.0.mlp.gate_proj.weight": (I, H),
        "mtp.layers.0.mlp.up_proj.weight": (I, H),
        "mtp.layers.0.mlp.down_proj.weight": (H, I),
    }
    return {k: random_value(k, s, fx, seed + 7).to(torch.bfloat16) for k, s in shapes.items()}


# --------------------------------------------------------------------------------------------
# Checkpoint rewriting
# --------------------------------------------------------------------------------------------

def read_checkpoint(d):
    """-> (ordered list of shard file names, {tensor name: (tensor, shard file)}, index metadata or None)."""
    idx = os.path.join(d, "model.safetensors.index.json")
    if os.path.exists(idx):
        index = json.load(open(idx))
        files = sorted(set(index["weight_map"].values()))
        meta = index.get("metadata")
    else:
        files = ["model.safetensors"]
        meta = None
    tensors = {}
    for f in files:
        with safe_open(os.path.join(d, f), "pt") as s:
            for k in s.keys():
                tensors[k] = (s.get_tensor(k), f)
    return files, tensors, meta


def write_checkpoint(d, files, tensors, meta):
    by_file = {f: {} for f in files}
    for k, (t, f) in tensors.items():
        by_file[f][k] = t.contiguous()
    for f, ts in by_file.items():
        save_file(ts, os.path.join(d, f), metadata={"format": "pt"})
        os.chmod(os.path.join(d, f), 0o644)
    if len(files) > 1:
        total = sum(t.numel() * t.element_size() for t, _ in tensors.values())
        m = dict(meta or {})
        m["total_size"] = total
        if "total_parameters" in m:
            m["total_parameters"] = sum(t.numel() for t, _ in tensors.values())
        index = {"metadata": m, "weight_map": {k: tensors[k][1] for k in sorted(tensors)}}
        with open(os.path.join(d, "model.safetensors.index.json"), "w") as fh:
            json.dump(index, fh, indent=2, sort_keys=True)
            fh.write("\n")


def fuse_experts(tensors):
    import re
    pat = re.compile(r"^(.*\.mlp\.experts)\.(\d+)\.(gate|up|down)_proj\.weight$")
    groups = {}
    for k in list(tensors):
        m = pat.match(k)
        if m:
            groups.setdefault(m.group(1), {})[(int(m.group(2)), m.group(3))] = k
    for prefix, parts in groups.items():
        E = 1 + max(e for e, _ in parts)
        shard = tensors[parts[(0, "gate")]][1]
        gate_up = torch.stack([torch.cat([tensors[parts[(e, "gate")]][0], tensors[parts[(e, "up")]][0]], 0)
                               for e in range(E)])
        down = torch.stack([tensors[parts[(e, "down")]][0] for e in range(E)])
        for k in parts.values():
            del tensors[k]
        tensors[prefix + ".gate_up_proj"] = (gate_up, shard)
        tensors[prefix + ".down_proj"] = (down, shard)
    return len(groups)


def split_experts(tensors):
    n = 0
    for k in [k for k in tensors if k.endswith(".mlp.experts.gate_up_proj")]:
        prefix = k[: -len(".gate_up_proj")]
        gu, shard = tensors.pop(k)
        down, _ = tensors.pop(prefix + ".down_proj")
        Ie = gu.shape[1] // 2
        for e in range(gu.shape[0]):
            tensors[f"{prefix}.{e}.gate_proj.weight"] = (gu[e, :Ie].clone(), shard)
            tensors[f"{prefix}.{e}.up_proj.weight"] = (gu[e, Ie:].clone(), shard)
            tensors[f"{prefix}.{e}.down_proj.weight"] = (down[e].clone(), shard)
        n += 1
    return n


def legacy_config(cfg):
    """Pre-v5 style keys, as in the official checkpoints' config.json (transformers accepts both)."""
    def fix(c):
        rp = c.pop("rope_parameters", None)
        if rp:
            c["rope_theta"] = rp["rope_theta"]
            if "partial_rotary_factor" in rp:
                c["partial_rotary_factor"] = rp["partial_rotary_factor"]
            if rp.get("rope_type", "default") != "default":
                raise ValueError("legacy_config only handles default rope")
            c["rope_scaling"] = None
        if "num_local_experts" in c:
            c["num_experts"] = c.pop("num_local_experts")
        lt = c.get("layer_types")
        if lt and "linear_attention" in lt:
            for interval in range(1, len(lt) + 1):
                if lt == ["full_attention" if (i + 1) % interval == 0 else "linear_attention"
                          for i in range(len(lt))]:
                    del c["layer_types"]
                    c["full_attention_interval"] = interval
                    break
        elif lt and all(x == "full_attention" for x in lt):
            del c["layer_types"]
    fix(cfg)
    if isinstance(cfg.get("text_config"), dict):
        fix(cfg["text_config"])
    return cfg


# --------------------------------------------------------------------------------------------
# Build one model directory
# --------------------------------------------------------------------------------------------

def build_config(fx):
    cls = getattr(transformers, fx["cfg"])
    text = dict(fx["text"])
    if "vision" in fx:
        vision = dict(fx["vision"], out_hidden_size=text["hidden_size"])
        return cls(text_config=text, vision_config=vision, **fx.get("outer", {}))
    return cls(**text)


def build_model(fx, seed):
    cfg = build_config(fx)
    torch.manual_seed(seed)
    model = getattr(transformers, fx["arch"])(cfg)
    randomize_(model, fx, seed)
    model.eval()
    return model


def save_model(model, fx, seed, out_dir, work_dir):
    """save_pretrained into work_dir, apply the rewrites, write the final files into out_dir."""
    raw = os.path.join(work_dir, "raw")
    if os.path.exists(raw):
        shutil.rmtree(raw)
    kw = {}
    if fx.get("shards"):
        total = sum(p.numel() * p.element_size() for p in model.state_dict().values())
        kw["max_shard_size"] = int(total / fx["shards"] * 1.05)
    model.save_pretrained(raw, **kw)
    files, tensors, meta = read_checkpoint(raw)
    notes = []
    for step in fx.get("post", []):
        if step == "fuse_experts":
            notes.append(f"fused experts of {fuse_experts(tensors)} layers")
        elif step == "split_experts":
            notes.append(f"split experts of {split_experts(tensors)} layers")
        elif step == "add_mtp":
            shard = files[-1]
            for k, v in mtp_tensors(fx, seed).items():
                tensors[k] = (v, shard)
            notes.append("added synthetic mtp.* tensors")
    if os.path.exists(out_dir):
        shutil.rmtree(out_dir)
    os.makedirs(out_dir)
    write_checkpoint(out_dir, files, tensors, meta)
    cfg = json.load(open(os.path.join(raw, "config.json")))
    if "legacy_config" in fx.get("post", []):
        cfg = legacy_config(cfg)
        notes.append("legacy-style config.json")
    with open(os.path.join(out_dir, "config.json"), "w") as fh:
        json.dump(cfg, fh, indent=2, sort_keys=True)
        fh.write("\n")
    if os.path.exists(os.path.join(raw, "generation_config.json")):
        shutil.copy(os.path.join(raw, "generation_config.json"), out_dir)
    return notes, sorted(tensors)


# --------------------------------------------------------------------------------------------
# Reference computation
# --------------------------------------------------------------------------------------------

def check_config(fx, model):
    """The loaded config must carry the intended settings (legacy-style keys included)."""
    c = model.config.get_text_config()
    t = fx["text"]
    want_rp = t["rope_parameters"]
    errs = []
    if c.rope_parameters.get("rope_theta") != want_rp["rope_theta"]:
        errs.append(f"rope_theta {c.rope_parameters.get('rope_theta')}")
    if c.rope_parameters.get("partial_rotary_factor", 1.0) != want_rp.get("partial_rotary_factor", 1.0):
        errs.append(f"partial_rotary_factor {c.rope_parameters.get('partial_rotary_factor')}")
    if fx["hybrid"]:
        lt = t.get("layer_types") or ["full_attention" if (i + 1) % t.get("full_attention_interval", 4) == 0
                                      else "linear_attention" for i in range(t["num_hidden_layers"])]
        if list(c.layer_types) != lt:
            errs.append(f"layer_types {c.layer_types}")
    if t.get("num_experts") and c.num_experts != t["num_experts"]:
        errs.append(f"num_experts {c.num_experts}")
    if "head_dim" in t and c.head_dim != t["head_dim"]:
        errs.append(f"head_dim {c.head_dim}")
    tied = fx.get("outer", t).get("tie_word_embeddings", False)
    if model.config.tie_word_embeddings != tied:
        errs.append(f"tie_word_embeddings {model.config.tie_word_embeddings}")
    if errs:
        raise RuntimeError(f"{fx['name']}: loaded config differs: " + ", ".join(errs))


def load(fx, d, dtype):
    cls = getattr(transformers, fx["arch"])
    kw = {"experts_implementation": "eager"} if fx["text"].get("num_experts") else {}
    # eager experts: the default grouped_mm kernel refuses float64
    model, info = cls.from_pretrained(d, dtype=dtype, output_loading_info=True, attn_implementation="sdpa", **kw)
    model.eval()
    problems = {k: v for k, v in info.items() if v and k in ("missing_keys", "unexpected_keys", "mismatched_keys",
                                                                  "error_msgs")}
    if problems:
        raise RuntimeError(f"{fx['name']}: loading reported {problems}")
    check_config(fx, model)
    return model


@torch.no_grad()
def wrapper_vs_text_only(fx, d, model64, ids):
    """Wrapper checkpoints: the text-only class must load them (model.language_model. prefix dropped,
    model.visual.* and mtp.* ignored) and give bitwise identical logits."""
    cls = getattr(transformers, fx["arch"].replace("ForConditionalGeneration", "ForCausalLM"))
    kw = {"experts_implementation": "eager"} if fx["text"].get("num_experts") else {}
    m2 = cls.from_pretrained(d, dtype=torch.float64, attn_implementation="sdpa", **kw).eval()
    return torch.equal(forward_logits(m2, ids), forward_logits(model64, ids))


class RouterGap:
    """Records the smallest gap between the k-th and (k+1)-th router logit over all tokens and layers."""

    def __init__(self, model, k):
        self.k = k
        self.min_gap = math.inf
        self.handles = []
        for name, mod in model.named_modules():
            if type(mod).__name__.endswith("TopKRouter"):
                self.handles.append(mod.register_forward_hook(self.hook))

    def hook(self, mod, inp, out):
        logits = out[0].detach().double()
        top = torch.topk(logits, self.k + 1, dim=-1).values
        gap = (top[:, self.k - 1] - top[:, self.k]).min().item()
        self.min_gap = min(self.min_gap, gap)

    def close(self):
        for h in self.handles:
            h.remove()


@torch.no_grad()
def forward_logits(model, ids):
    x = torch.tensor([ids], dtype=torch.long)
    return model(input_ids=x, use_cache=False).logits[0]


@torch.no_grad()
def greedy(model, ids, n):
    """Greedy continuation by repeated full forwards (no KV cache). -> (new ids, min top1-top2 margin)."""
    ids = list(ids)
    out, margin = [], math.inf
    for _ in range(n):
        last = forward_logits(model, ids)[-1]
        top = torch.topk(last, 2)
        margin = min(margin, (top.values[0] - top.values[1]).item())
        t = int(top.indices[0])
        out.append(t)
        ids.append(t)
    return out, margin


def rejection(ref):
    """Why a seed is not acceptable ('' if it is)."""
    why = []
    if ref["min_margin"] < MIN_MARGIN:
        why.append(f"min margin {ref['min_margin']:.4g} < {MIN_MARGIN}")
    if ref["router_min_gap"] is not None and ref["router_min_gap"] < MIN_ROUTER_GAP:
        why.append(f"router gap {ref['router_min_gap']:.3g} < {MIN_ROUTER_GAP}")
    c = ref["cases"]
    if len(set(c[0]["generated"])) < MIN_DISTINCT[0] or min(len(set(c[1]["generated1"])),
                                                            len(set(c[1]["generated2"]))) < MIN_DISTINCT[1]:
        why.append("degenerate (repetitive) greedy output")
    if not (ref["kv_generate"]["single"] and ref["kv_generate"]["multiturn"]):
        why.append("KV-cached float32 generate disagrees")
    return ", ".join(why)


def random_ids(seed, tag, n, vocab):
    g = gen_for(seed, tag)
    return torch.randint(0, vocab, (n,), generator=g).tolist()


@torch.no_grad()
def cached_generate_check(model32, case_single, case_mt):
    """transformers' KV-cached greedy generate in float32 must give the same ids."""
    gen_kw = dict(do_sample=False, num_beams=1, eos_token_id=None, pad_token_id=0, min_new_tokens=0,
                  temperature=None, top_p=None, top_k=None, use_cache=True)
    res = {}
    # attention_mask given explicitly: otherwise generate masks every prompt token equal to pad_token_id
    p = torch.tensor([case_single["prompt"]])
    o = model32.generate(p, attention_mask=torch.ones_like(p), max_new_tokens=len(case_single["generated"]),
                         **gen_kw)
    res["single"] = o[0, p.shape[1]:].tolist() == case_single["generated"]
    p1 = torch.tensor([case_mt["prompt"]])
    o1 = model32.generate(p1, attention_mask=torch.ones_like(p1), max_new_tokens=len(case_mt["generated1"]),
                          return_dict_in_generate=True, **gen_kw)
    g1 = o1.sequences[0, p1.shape[1]:].tolist()
    full = torch.tensor([case_mt["prompt"] + g1 + case_mt["append"]])
    # second turn re-uses the cache of the first turn (prompt1 + generated1[:-1] are cached)
    try:
        o2 = model32.generate(full, attention_mask=torch.ones_like(full), past_key_values=o1.past_key_values,
                              max_new_tokens=len(case_mt["generated2"]),
                              **gen_kw)
        how = "cache reused across turns"
    except Exception as e:  # pragma: no cover
        o2 = model32.generate(full, attention_mask=torch.ones_like(full),
                              max_new_tokens=len(case_mt["generated2"]), **gen_kw)
        how = f"fresh generate for turn 2 (cache reuse failed: {type(e).__name__})"
    g2 = o2[0, full.shape[1]:].tolist()
    res["multiturn"] = g1 == case_mt["generated1"] and g2 == case_mt["generated2"]
    res["how"] = how
    return res


def compute_reference(fx, d, seed):
    t = fx["text"]
    V = t["vocab_size"]
    if fx["hybrid"]:
        n_single, n_mt = 203, 201
    else:
        n_single, n_mt = 61, 45
    model = load(fx, d, torch.float64)
    k = t.get("num_experts_per_tok") if t.get("num_experts") else None
    rg = RouterGap(model, k) if k else None

    prompt = random_ids(seed, "prompt_single", n_single, V)
    gen, m1 = greedy(model, prompt, N_GEN)
    p1 = random_ids(seed, "prompt_multiturn", n_mt, V)
    g1, m2 = greedy(model, p1, N_GEN_MT)
    app = random_ids(seed, "append_multiturn", N_APPEND, V)
    g2, m3 = greedy(model, p1 + g1 + app, N_GEN_MT)
    logits_single = forward_logits(model, prompt + gen)
    logits_mt = forward_logits(model, p1 + g1 + app + g2)
    if rg:
        rg.close()
    for lg in (logits_single, logits_mt):
        if not torch.isfinite(lg).all():
            raise RuntimeError(f"{fx['name']}: non-finite logits")
    cases = [dict(name="single", prompt=prompt, generated=gen),
             dict(name="multiturn", prompt=p1, generated1=g1, append=app, generated2=g2)]
    res = dict(cases=cases, min_margin=min(m1, m2, m3), logits_single=logits_single, logits_mt=logits_mt,
               router_min_gap=(rg.min_gap if rg else None),
               logit_std=float(logits_single.std()))
    # float32 run: teacher-forced logits difference, and transformers' KV-cached generate
    model32 = load(fx, d, torch.float32)
    l32 = forward_logits(model32, prompt + gen).double()
    res["f32_max_abs_diff"] = float((l32 - logits_single).abs().max())
    res["kv_generate"] = cached_generate_check(model32, cases[0], cases[1])
    res["state_dict_f64"] = {k2: v.detach().clone() for k2, v in model.state_dict().items()}
    if fx["arch"].endswith("ForConditionalGeneration"):
        res["text_only_identical"] = wrapper_vs_text_only(fx, d, model, p1 + g1 + app + g2)
        if not res["text_only_identical"]:
            raise RuntimeError(f"{fx['name']}: text-only class gives different logits")
    return res


# --------------------------------------------------------------------------------------------
# Output
# --------------------------------------------------------------------------------------------

def dump_reference_json(path, obj):
    """Readable JSON: one key per line, each case on one line."""
    lines = ["{"]
    keys = list(obj)
    for i, key in enumerate(keys):
        comma = "," if i + 1 < len(keys) else ""
        if key == "cases":
            lines.append('  "cases": [')
            for j, c in enumerate(obj["cases"]):
                cc = "," if j + 1 < len(obj["cases"]) else ""
                lines.append("    " + json.dumps(c, separators=(", ", ": ")) + cc)
            lines.append("  ]" + comma)
        else:
            lines.append(f"  {json.dumps(key)}: {json.dumps(obj[key])}{comma}")
    lines.append("}")
    with open(path, "w") as fh:
        fh.write("\n".join(lines) + "\n")


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for b in iter(lambda: fh.read(1 << 20), b""):
            h.update(b)
    return h.hexdigest()


def shape_summary(fx):
    t = fx["text"]
    s = [f"V={t['vocab_size']}", f"H={t['hidden_size']}", f"L={t['num_hidden_layers']}",
         f"nh={t['num_attention_heads']}", f"nkv={t['num_key_value_heads']}",
         f"hd={t.get('head_dim', t['hidden_size'] // t['num_attention_heads'])}"]
    if "intermediate_size" in t and (not t.get("num_experts") or t.get("mlp_only_layers")):
        s.append(f"I={t['intermediate_size']}")
    if t.get("num_experts"):
        s.append(f"E={t['num_experts']} k={t['num_experts_per_tok']} Ie={t['moe_intermediate_size']}")
        if t.get("shared_expert_intermediate_size"):
            s.append(f"Is={t['shared_expert_intermediate_size']}")
        if t.get("mlp_only_layers"):
            s.append(f"mlp_only_layers={t['mlp_only_layers']}")
    if fx["hybrid"]:
        r = t["linear_num_value_heads"] // t["linear_num_key_heads"]
        s.append(f"Hk={t['linear_num_key_heads']} Hv={t['linear_num_value_heads']} (r={r}) "
                 f"dk={t['linear_key_head_dim']} dv={t['linear_value_head_dim']}")
        hd = t["head_dim"]
        s.append(f"rope_dim={int(hd * t['partial_rotary_factor'])}")
        lt = t.get("layer_types") or ["full_attention" if (i + 1) % t.get("full_attention_interval", 4) == 0
                                      else "linear_attention" for i in range(t["num_hidden_layers"])]
        s.append("layers=" + "".join("F" if x == "full_attention" else "L" for x in lt))
    s.append(f"eps={t['rms_norm_eps']:g}")
    s.append(f"theta={t['rope_parameters']['rope_theta']:g}")
    tied = fx.get("outer", t).get("tie_word_embeddings", False)
    s.append("tied" if tied else "untied")
    return " ".join(s)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                                  "tests", "fixtures"))
    ap.add_argument("--only", default="", help="comma-separated fixture names (MANIFEST is then not rewritten)")
    ap.add_argument("--threads", type=int, default=1,
                    help="torch CPU threads (default 1: the float32 DeltaNet kernel's summation order depends on "
                         "the thread count, so other counts change logits in the ~1e-6 range and the sha256 sums; "
                         "the models are so small that 1 thread is as fast)")
    args = ap.parse_args()
    torch.set_num_threads(max(1, args.threads))
    torch.use_deterministic_algorithms(True)
    out_root = os.path.abspath(args.out)
    os.makedirs(out_root, exist_ok=True)
    only = [x for x in args.only.split(",") if x]
    print(f"torch {torch.__version__}  transformers {transformers.__version__}  threads {torch.get_num_threads()}"
          f"  -> {out_root}", flush=True)

    results = {}
    built = {}  # name -> (model, seed)
    t_start = time.time()
    with tempfile.TemporaryDirectory() as work:
        for fx0 in FIXTURES:
            fx = resolved(fx0)
            name = fx["name"]
            if only and name not in only and not any(fixture_by_name(o).get("variant_of") == name for o in only):
                continue
            t0 = time.time()
            out_dir = os.path.join(out_root, name)
            if "variant_of" in fx0:
                model, seed = built[fx0["variant_of"]]
                seeds = [seed]
            else:
                seeds = [fx["seed"] + 1000 * a for a in range(MAX_ATTEMPTS)]
            for attempt, seed in enumerate(seeds):
                if "variant_of" not in fx0:
                    model = build_model(fx, seed)
                notes, names = save_model(model, fx, seed, out_dir, os.path.join(work, name))
                ref = compute_reference(fx, out_dir, seed)
                # the loaded weights must be exactly the bf16 weights we built
                mine = {k: v.double() for k, v in model.state_dict().items()}
                for k, v in ref["state_dict_f64"].items():
                    if k not in mine or not torch.equal(mine[k], v):
                        raise RuntimeError(f"{name}: loaded tensor {k} differs from the built model")
                why = rejection(ref)
                if not why or "variant_of" in fx0:
                    break
                print(f"  {name}: seed {seed} rejected ({why}), retrying", flush=True)
                if os.environ.get("FIXTURE_DEBUG"):
                    c = ref["cases"]
                    print("   ", c[0]["generated"], c[1]["generated1"], c[1]["generated2"], flush=True)
            else:
                raise RuntimeError(f"{name}: no acceptable seed in {MAX_ATTEMPTS} attempts")
            built[name] = (model, seed)
            if "variant_of" in fx0:
                base = results[fx0["variant_of"]]["ref"]
                same = (base["cases"] == ref["cases"] and torch.equal(base["logits_single"], ref["logits_single"])
                        and torch.equal(base["logits_mt"], ref["logits_mt"]))
                if not same:
                    raise RuntimeError(f"{name}: outputs differ from {fx0['variant_of']}")
                notes.append(f"reference identical to {fx0['variant_of']} (checked)")
            if ref.get("text_only_identical"):
                notes.append(fx["arch"].replace("ForConditionalGeneration", "ForCausalLM")
                             + " loads this wrapper checkpoint and gives bitwise identical logits")
            if "add_mtp" in fx.get("post", []):
                notes.append("transformers ignored mtp.* on load (no unexpected keys)")
            mt = fx["arch"]
            cfg_json = json.load(open(os.path.join(out_dir, "config.json")))
            reference = {
                "model_type": cfg_json["model_type"],
                "architecture": mt,
                "dtype_reference": "float64",
                "cases": ref["cases"],
                "min_margin": ref["min_margin"],
                "transformers": transformers.__version__,
                "torch": torch.__version__,
                "seed": seed,
                "router_min_gap": ref["router_min_gap"],
                "f32_max_abs_logit_diff": ref["f32_max_abs_diff"],
                "kv_cached_generate_f32_matches": bool(ref["kv_generate"]["single"]
                                                       and ref["kv_generate"]["multiturn"]),
                "note": ("greedy ids = argmax of the last row of repeated full forwards (no KV cache) of the "
                         "float64 model; transformers 5.17 still computes some steps in float32 inside a float64 "
                         "model (RMSNorms, RoPE cos/sin, router softmax, the gated delta rule kernel); "
                         "reference.safetensors: logits_single [len(prompt)+len(generated), V], logits_multiturn "
                         "[whole multi-turn sequence, V], F32, row t = logits after token t"),
            }
            dump_reference_json(os.path.join(out_dir, "reference.json"), reference)
            save_file({"logits_single": ref["logits_single"].float().contiguous(),
                       "logits_multiturn": ref["logits_mt"].float().contiguous()},
                      os.path.join(out_dir, "reference.safetensors"))
            os.chmod(os.path.join(out_dir, "reference.safetensors"), 0o644)
            results[name] = dict(fx=fx, ref=ref, seed=seed, notes=notes, names=names, secs=time.time() - t0,
                                 attempts=attempt + 1)
            kv = ref["kv_generate"]
            print(f"{name:16s} seed={seed} margin={ref['min_margin']:.4f} router_gap="
                  f"{ref['router_min_gap'] if ref['router_min_gap'] is not None else '-'} "
                  f"f32diff={ref['f32_max_abs_diff']:.2e} kv_generate={kv['single'] and kv['multiturn']} "
                  f"({kv['how']}) {time.time() - t0:.1f}s", flush=True)

    if not only:
        write_manifest(out_root, results)
    print_summary(out_root, results, time.time() - t_start)
    bad = [n for n, r in results.items()
           if not (r["ref"]["kv_generate"]["single"] and r["ref"]["kv_generate"]["multiturn"])]
    if bad:
        print("WARNING: KV-cached float32 generate disagrees for: " + ", ".join(bad))


def dir_files(d):
    return sorted(f for f in os.listdir(d) if os.path.isfile(os.path.join(d, f)))


def layout_summary(names, d):
    parts = []
    parts.append("prefix model.language_model." if any(n.startswith("model.language_model.") for n in names)
                 else "prefix model.")
    if any(".mlp.experts.gate_up_proj" in n for n in names):
        parts.append("experts fused 3-D (mlp.experts.gate_up_proj [E,2Ie,H], mlp.experts.down_proj [E,H,Ie])")
    elif any(".mlp.experts.0." in n for n in names):
        parts.append("experts per-expert (mlp.experts.N.{gate,up,down}_proj.weight)")
    parts.append("lm_head.weight present" if "lm_head.weight" in names else "no lm_head.weight (tied)")
    if any(n.startswith("model.visual.") for n in names):
        parts.append("model.visual.* present")
    if any(n.startswith("mtp.") for n in names):
        parts.append(f"mtp.* present ({sum(n.startswith('mtp.') for n in names)} tensors)")
    shards = [f for f in dir_files(d) if f.startswith("model-")]
    parts.append(f"{len(shards)} shards + model.safetensors.index.json" if shards else "single model.safetensors")
    cfg = json.load(open(os.path.join(d, "config.json")))
    legacy = "rope_parameters" not in cfg and "rope_parameters" not in cfg.get("text_config", {})
    parts.append("legacy config keys" if legacy else "transformers-5 config keys")
    return "; ".join(parts) + f"; {len(names)} tensors"


def write_manifest(out_root, results):
    lines = [
        "# proven conformance fixtures, produced by tools/reference/make_fixtures.py",
        f"# transformers {transformers.__version__}, torch {torch.__version__}, CPU ({torch.get_num_threads()} thread(s)),"
        " reference dtype float64",
        "# weights: random, seeded, rounded to bf16 before any reference computation; stored as bf16 safetensors",
        f"# cases: single = random prompt + {N_GEN} greedy tokens; multiturn = prompt1 + {N_GEN_MT} greedy"
        f" + {N_APPEND} appended + {N_GEN_MT} greedy",
        "# greedy = argmax of the last row of a full forward without KV cache (float64)",
        "# min_margin = smallest top1-top2 logit gap over all greedy steps",
        "",
    ]
    total = 0
    for name, r in results.items():
        fx = r["fx"]
        d = os.path.join(out_root, name)
        ref = r["ref"]
        lines.append(f"[{name}]")
        lines.append(f"architecture: {fx['arch']}")
        lines.append(f"model_type: {json.load(open(os.path.join(d, 'config.json')))['model_type']}")
        lines.append(f"shape: {shape_summary(fx)}")
        lines.append(f"prompt_lengths: single={len(ref['cases'][0]['prompt'])} "
                     f"multiturn={len(ref['cases'][1]['prompt'])}+{N_GEN_MT}+{N_APPEND}+{N_GEN_MT}")
        lines.append(f"layout: {layout_summary(r['names'], d)}")
        lines.append(f"seed: {r['seed']}")
        lines.append(f"min_margin: {ref['min_margin']:.6f}")
        if ref["router_min_gap"] is not None:
            lines.append(f"router_min_gap (k-th vs k+1-th router logit): {ref['router_min_gap']:.6f}")
        lines.append(f"f32_vs_f64_max_abs_logit_diff: {ref['f32_max_abs_diff']:.3e}")
        kv = ref["kv_generate"]
        lines.append(f"kv_cached_generate_f32_matches: {kv['single'] and kv['multiturn']} ({kv['how']})")
        if r["notes"]:
            lines.append("notes: " + "; ".join(r["notes"]))
        lines.append(f"transformers: {transformers.__version__}  torch: {torch.__version__}")
        for f in dir_files(d):
            p = os.path.join(d, f)
            sz = os.path.getsize(p)
            total += sz
            lines.append(f"  {sha256(p)}  {sz:9d}  {name}/{f}")
        lines.append("")
    lines.append(f"total_bytes: {total}")
    with open(os.path.join(out_root, "MANIFEST.txt"), "w") as fh:
        fh.write("\n".join(lines) + "\n")


def print_summary(out_root, results, secs):
    print()
    hdr = (f"{'fixture':16s} {'arch':34s} {'margin':>8s} {'rgap':>8s} {'f32diff':>8s} {'kvgen':>5s} {'files':>5s}"
           f" {'bytes':>9s}")
    print(hdr)
    print("-" * len(hdr))
    total = 0
    for name, r in results.items():
        d = os.path.join(out_root, name)
        size = sum(os.path.getsize(os.path.join(d, f)) for f in dir_files(d))
        total += size
        ref = r["ref"]
        kv = ref["kv_generate"]["single"] and ref["kv_generate"]["multiturn"]
        rg = f"{ref['router_min_gap']:.4f}" if ref["router_min_gap"] is not None else "-"
        print(f"{name:16s} {r['fx']['arch']:34s} {ref['min_margin']:8.4f} {rg:>8s} {ref['f32_max_abs_diff']:8.1e} "
              f"{str(kv):>5s} {len(dir_files(d)):5d} {size:9d}")
        print(f"    {shape_summary(r['fx'])}")
    print("-" * len(hdr))
    print(f"total {total} bytes ({total / 2**20:.2f} MiB) in {len(results)} fixtures, {secs:.0f}s")


if __name__ == "__main__":
    sys.exit(main())
