#!/usr/bin/env python3
"""Reference outputs of a real Qwen GGUF (Qwen2.5-Coder-0.5B-Instruct Q4_K_M), from Hugging Face transformers.

transformers 5.17 loads a qwen2 GGUF through its *legacy* GGUF loader
(`modeling_gguf_pytorch_utils.load_gguf_checkpoint`): the packed-block path in `integrations/gguf/`
only handles `qwen35`. The legacy loader dequantizes every tensor with the `gguf` package's numpy
dequantizers (float32) and casts to the requested dtype; here float64, so the model's weights are the
exact dequantized values. `output.weight` is present in this file, so `tie_word_embeddings` is False and
`lm_head.weight` is the file's `output.weight` (Q8_0), not `token_embd.weight` (Q5_0). This script
checks all of that itself, independently of transformers: every one of the file's tensors is dequantized
with `gguf.dequantize` and compared bit for bit against the loaded model's parameter.

What it records (tests/data/real/reference.json + logits.safetensors):
  * per prompt: token ids (tokenizer built by transformers from the GGUF, cross-checked against the
    official Qwen tokenizer.json via the `tokenizers` package), top-20 of the next-token logits,
    a 32-token greedy continuation by repeated full forwards (no KV cache) with per-step top-1 margin
    and top-20, and the top-20 of one teacher-forced forward over prompt + continuation;
  * full float32 logit rows: the next-token row of four prompts and the first TF_FULL_ROWS
    teacher-forced rows of the chat prompt (row 0 of those is its next-token row);
  * perplexity on tests/data/text/ppl.txt computed like llama.cpp's `llama-perplexity -c 512`.

Run (CPU only, 2 threads; 42 min measured on a 2-core machine shared with other jobs, roughly half that idle):
    PYTHONPATH=<dir with accelerate+psutil> /opt/refvenv/bin/python tools/reference/real_model_reference.py
`from_pretrained(gguf_file=...)` refuses to run without `accelerate` (it is not in /opt/refvenv). Without
it the script builds the same model by hand with the very code `from_pretrained` runs for this
architecture (AutoConfig from the GGUF, `Qwen2ForCausalLM(config)`, `load_gguf_checkpoint(...,
model_to_load=model)`, strict `load_state_dict`); the weight check below applies either way.
"""

import argparse
import hashlib
import importlib.metadata
import importlib.util
import json
import lzma
import math
import os
import sys
import time

os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")

import numpy as np
import torch

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
MODEL_DIR = os.environ.get("PROVEN_CACHE", "/tmp/pvcache")
MODEL_FILE = "qwen2.5-coder-0.5b.gguf"
MODEL_SHA256 = "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"
MODEL_BYTES = 491400064
TOKENIZER_JSON_XZ = "/work/shared/data/qwen-tokenizer/tokenizer.json.xz"
PPL_TEXT = os.path.join(ROOT, "tests", "data", "text", "ppl.txt")
OUT_DIR = os.path.join(ROOT, "tests", "data", "real")

N_GREEDY = 32
TOPK = 20
PPL_CTX = 512
FULL_NEXT_ROWS = ["prose_france", "c_snippet", "multilingual", "chat_c_reverse"]
TF_FULL_PROMPT = "chat_c_reverse"
TF_FULL_ROWS = 9  # 4 prompts' next-token rows incl. TF row 0 + 8 more TF rows = 12 x 151936 x 4 B = 7.3 MB

LONG_TEXT = (
    "A hash table stores key-value pairs in an array of buckets. To insert a key, the table computes a hash "
    "of the key, reduces it modulo the number of buckets, and places the pair in the bucket at that index. "
    "Two different keys can land in the same bucket; this is called a collision. There are two classic ways "
    "to handle collisions. With separate chaining, every bucket holds a small linked list, and colliding "
    "pairs are appended to that list. With open addressing, all pairs live directly in the array, and a "
    "colliding key is moved to another slot chosen by a probe sequence such as linear probing, quadratic "
    "probing, or double hashing. The load factor, the number of stored pairs divided by the number of "
    "buckets, controls performance: as it grows, chains get longer and probe sequences get slower. Most "
    "implementations therefore resize the table, usually doubling the number of buckets, when the load "
    "factor passes a threshold like 0.75, and then rehash every key into the new array. A good hash "
    "function spreads keys uniformly and is cheap to compute; a poor one clusters keys into a few buckets "
    "and turns constant-time lookups into linear scans. Deletion needs care under open addressing, because "
    "simply emptying a slot can break the probe chain of keys inserted later, so such tables mark deleted "
    "slots with a tombstone instead. In summary, the three most important design decisions for a hash "
    "table are"
)

CHAT_TEXT = (
    "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
    "<|im_start|>user\nWrite a C function that reverses a string in place.<|im_end|>\n"
    "<|im_start|>assistant\n"
)

PROMPTS = [
    ("py_header", "def is_prime(n: int) -> bool:\n    \"\"\"Return True if n is a prime number.\"\"\"\n"),
    ("c_snippet", "#include <stdio.h>\n\nint main(void) {\n    int sum = 0;\n    for (int i = 1; i <= 10; i++) {\n"),
    ("prose_france", "The capital of France is"),
    ("chat_c_reverse", CHAT_TEXT),
    ("multilingual", "北京是中国的首都。Москва — столица России. La capitale de l'Italie est"),
    ("long_hash_table", LONG_TEXT),
]


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def log(*a):
    print(f"[{time.strftime('%H:%M:%S')}]", *a, flush=True)


def load_model(path, dtype):
    """The model as transformers builds it from the GGUF; returns (model, how)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    if importlib.util.find_spec("accelerate") is not None:
        model = AutoModelForCausalLM.from_pretrained(
            os.path.dirname(path), gguf_file=os.path.basename(path), dtype=dtype, attn_implementation="sdpa"
        )
        return model.eval(), "AutoModelForCausalLM.from_pretrained(gguf_file=...)"
    # Same steps as from_pretrained for an architecture the packed GGUF path does not support
    # (GgufHfQuantizer.get_state_dict -> legacy load_gguf_checkpoint).
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING

    config = AutoConfig.from_pretrained(os.path.dirname(path), gguf_file=os.path.basename(path))
    config._attn_implementation = "sdpa"
    cls = MODEL_FOR_CAUSAL_LM_MAPPING[type(config)]
    model = cls(config).to(dtype)
    tensors = load_gguf_checkpoint(path, return_tensors=True, model_to_load=model, torch_dtype=dtype)["tensors"]
    missing, unexpected = model.load_state_dict(tensors, strict=False)
    # rotary inv_freq buffers are not in the state dict; everything else must be
    missing = [k for k in missing if "rotary_emb" not in k]
    if missing or unexpected:
        raise SystemExit(f"manual GGUF load: missing {missing} unexpected {unexpected}")
    return model.eval(), "manual: AutoConfig(gguf_file) + Qwen2ForCausalLM + load_gguf_checkpoint (no accelerate)"


def gguf_to_hf_name(name):
    """Independent name map for the qwen2 layout (not transformers')."""
    top = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight",
           "output.weight": "lm_head.weight"}
    if name in top:
        return top[name]
    blk, i, rest = name.split(".", 2)
    assert blk == "blk"
    sub = {"attn_norm.weight": "input_layernorm.weight", "ffn_norm.weight": "post_attention_layernorm.weight",
           "attn_q.weight": "self_attn.q_proj.weight", "attn_q.bias": "self_attn.q_proj.bias",
           "attn_k.weight": "self_attn.k_proj.weight", "attn_k.bias": "self_attn.k_proj.bias",
           "attn_v.weight": "self_attn.v_proj.weight", "attn_v.bias": "self_attn.v_proj.bias",
           "attn_output.weight": "self_attn.o_proj.weight", "ffn_gate.weight": "mlp.gate_proj.weight",
           "ffn_up.weight": "mlp.up_proj.weight", "ffn_down.weight": "mlp.down_proj.weight"}[rest]
    return f"model.layers.{i}.{sub}"


def check_weights(model, path):
    """Every tensor of the file == gguf.dequantize(...) of it, bit for bit, at the right place."""
    from gguf import GGUFReader, dequantize

    reader = GGUFReader(path)
    params = dict(model.named_parameters())
    seen, types = set(), {}
    for t in reader.tensors:
        hf = gguf_to_hf_name(t.name)
        ref = dequantize(t.data, t.tensor_type)
        ref = np.array(ref, dtype=np.float32).reshape(tuple(int(x) for x in reversed(t.shape)))
        got = params[hf].detach()
        if tuple(got.shape) != ref.shape or not torch.equal(got, torch.from_numpy(ref).to(got.dtype)):
            raise SystemExit(f"weight mismatch: {t.name} -> {hf}")
        seen.add(hf)
        types[t.tensor_type.name] = types.get(t.tensor_type.name, 0) + 1
    if set(params) != seen:
        raise SystemExit(f"parameters not from the file: {sorted(set(params) - seen)}")
    emb = params["model.embed_tokens.weight"]
    lm = params["lm_head.weight"]
    if emb.data_ptr() == lm.data_ptr() or torch.equal(emb, lm):
        raise SystemExit("lm_head is tied to the embedding although the file has output.weight")
    meta = {}
    for key in ("qwen2.rope.freq_base", "qwen2.attention.layer_norm_rms_epsilon", "qwen2.context_length",
                "tokenizer.ggml.add_bos_token", "tokenizer.ggml.eos_token_id", "tokenizer.ggml.bos_token_id"):
        meta[key] = reader.fields[key].contents()
    return {"tensors_checked": len(reader.tensors), "tensor_types": types, "gguf_metadata": meta}


def topk(row, k=TOPK):
    v, i = torch.topk(row, k)
    return [int(x) for x in i], [round(float(x), 6) for x in v]


def margin(row):
    v, _ = torch.topk(row, 2)
    return float(v[0] - v[1])


@torch.no_grad()
def last_logits(model, ids):
    out = model(torch.tensor([ids]), use_cache=False, logits_to_keep=1)
    return out.logits[0, -1]


@torch.no_grad()
def rows_logits(model, ids, n_last):
    out = model(torch.tensor([ids]), use_cache=False, logits_to_keep=n_last)
    return out.logits[0]


def official_tokenizer():
    from tokenizers import Tokenizer

    with lzma.open(TOKENIZER_JSON_XZ, "rb") as f:
        return Tokenizer.from_str(f.read().decode("utf-8"))


def perplexity(model, tok_ids, ctx, max_chunks):
    """llama-perplexity: chunks of ctx tokens from an empty context, positions ctx/2 .. ctx-2 predict the next."""
    n_chunk = min(len(tok_ids) // ctx, max_chunks)
    first = ctx // 2
    nll = nll2 = 0.0
    count = 0
    chunks = []
    for c in range(n_chunk):
        t0 = time.time()
        chunk = tok_ids[c * ctx:(c + 1) * ctx]
        # rows first .. ctx-1 (last ctx-first rows); the last row (position ctx-1) is not scored
        logits = rows_logits(model, chunk, ctx - first)[: ctx - 1 - first].double()
        targets = torch.tensor(chunk[first + 1:ctx])
        logp = torch.log_softmax(logits, dim=-1).gather(1, targets[:, None])[:, 0]
        v = (-logp).tolist()
        nll += sum(v)
        nll2 += sum(x * x for x in v)
        count += len(v)
        chunks.append({"chunk": c + 1, "mean_nll": sum(v) / len(v), "ppl_running": math.exp(nll / count)})
        log(f"ppl chunk {c + 1}/{n_chunk}: running PPL {math.exp(nll / count):.4f} ({time.time() - t0:.1f}s)")
    mean = nll / count
    var = nll2 / count - mean * mean
    ppl = math.exp(mean)
    err = math.sqrt(var / (count - 1)) * ppl if var > 0 else None
    return {"ppl": ppl, "ppl_plus_minus": err, "mean_nll": mean, "n_chunks": n_chunk, "n_chunks_available":
            len(tok_ids) // ctx, "ctx": ctx, "scored_per_chunk": ctx - 1 - first, "tokens_scored": count,
            "n_tokens_text": len(tok_ids), "per_chunk": chunks}


@torch.no_grad()
def f64_everywhere_delta(model, prompts_ids):
    """How far transformers' own float32 steps (RMSNorm, RoPE tables) move the float64 logits."""
    from transformers.models.qwen2 import modeling_qwen2 as mq

    norm_fwd, rope_fwd = mq.Qwen2RMSNorm.forward, mq.Qwen2RotaryEmbedding.forward

    def norm64(self, x):
        x = x.double()
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.variance_epsilon))

    def rope64(self, x, position_ids):
        cfg = model.config
        dim = cfg.hidden_size // cfg.num_attention_heads
        inv = 1.0 / (cfg.rope_parameters["rope_theta"] ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))
        freqs = position_ids[:, :, None].double() * inv[None, None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos().to(x.dtype), emb.sin().to(x.dtype)

    base = [last_logits(model, ids) for ids in prompts_ids]
    mq.Qwen2RMSNorm.forward, mq.Qwen2RotaryEmbedding.forward = norm64, rope64
    try:
        pure = [last_logits(model, ids) for ids in prompts_ids]
    finally:
        mq.Qwen2RMSNorm.forward, mq.Qwen2RotaryEmbedding.forward = norm_fwd, rope_fwd
    return max(float((a - b).abs().max()) for a, b in zip(base, pure)), \
        all(int(a.argmax()) == int(b.argmax()) for a, b in zip(base, pure))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=os.path.join(MODEL_DIR, MODEL_FILE))
    ap.add_argument("--out", default=OUT_DIR)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--max-chunks", type=int, default=40)
    ap.add_argument("--dtype", default="float64", choices=["float64", "float32"])
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    dtype = getattr(torch, args.dtype)
    t_start = time.time()

    import gguf
    import tokenizers
    import transformers
    from safetensors.torch import save_file
    from transformers import AutoTokenizer

    if os.path.getsize(args.model) != MODEL_BYTES or sha256_file(args.model) != MODEL_SHA256:
        raise SystemExit(f"{args.model}: wrong size or sha256 (get it with tools/get-model.sh)")
    log("sha256 ok")

    tok = AutoTokenizer.from_pretrained(os.path.dirname(args.model), gguf_file=os.path.basename(args.model))
    model, how = load_model(args.model, dtype)
    log(f"loaded ({how}), {type(model).__name__}, {type(tok).__name__}")
    cfg = model.config
    if cfg.tie_word_embeddings or cfg.rope_parameters["rope_theta"] != 1e6 or cfg.model_type != "qwen2":
        raise SystemExit(f"unexpected config: {cfg}")
    wcheck = check_weights(model, args.model)
    log(f"weights: all {wcheck['tensors_checked']} tensors == gguf.dequantize, lm_head = output.weight")

    official = official_tokenizer()
    rendered = tok.apply_chat_template(
        [{"role": "user", "content": "Write a C function that reverses a string in place."}],
        tokenize=False, add_generation_prompt=True)

    results, full = [], {}
    for name, text in PROMPTS:
        t0 = time.time()
        ids = tok(text, add_special_tokens=True)["input_ids"]
        off = official.encode(text, add_special_tokens=False).ids
        step_rows, greedy, margins, steps = [], [], [], []
        for s in range(N_GREEDY):
            row = last_logits(model, ids + greedy)
            step_rows.append(row)
            nxt = int(row.argmax())
            m = margin(row)
            ti, tv = topk(row)
            steps.append({"top_ids": ti, "top_logits": tv})
            margins.append(m)
            greedy.append(nxt)
        tf = rows_logits(model, ids + greedy[:-1], N_GREEDY)
        tf_diff = max(float((tf[s] - step_rows[s]).abs().max()) for s in range(N_GREEDY))
        tf_top = [dict(zip(("top_ids", "top_logits"), topk(tf[s]))) for s in range(N_GREEDY)]
        if name in FULL_NEXT_ROWS and name != TF_FULL_PROMPT:
            full[f"next.{name}"] = step_rows[0].float().contiguous()
        if name == TF_FULL_PROMPT:
            full[f"tf.{name}"] = tf[:TF_FULL_ROWS].float().contiguous()
        eos = [i for i, t in enumerate(greedy) if t in (cfg.eos_token_id, 151643, 151645)]
        r = {
            "name": name, "text": text, "ids": ids, "n_tokens": len(ids),
            "official_tokenizer_json_ids_equal": off == ids,
            "next_top_ids": steps[0]["top_ids"], "next_top_logits": steps[0]["top_logits"],
            "greedy_ids": greedy, "greedy_text": tok.decode(greedy),
            "first_eos_step": eos[0] if eos else None,
            "margins": [round(m, 6) for m in margins], "min_margin": round(min(margins), 6),
            "n_margin_below_0.05": sum(m < 0.05 for m in margins),
            "greedy_steps_top20": steps,
            "teacher_forced_top20": tf_top,
            "teacher_forced_vs_stepwise_max_abs_diff": tf_diff,
        }
        if off != ids:
            r["official_tokenizer_json_ids"] = off
        results.append(r)
        log(f"{name}: {len(ids)} tok, greedy {tok.decode(greedy)!r}, min margin {min(margins):.4f}, "
            f"tf diff {tf_diff:.2e}, official ids equal {off == ids} ({time.time() - t0:.0f}s)")

    delta, same_argmax = f64_everywhere_delta(model, [r["ids"] for r in results])
    log(f"float32 steps inside transformers move next-token logits by <= {delta:.2e}; argmax same: {same_argmax}")

    text = open(PPL_TEXT, encoding="utf-8").read()
    ppl_ids = tok(text, add_special_tokens=True)["input_ids"]
    ppl_off = official.encode(text, add_special_tokens=False).ids
    log(f"ppl text: {len(text)} chars, {len(ppl_ids)} tokens, official ids equal {ppl_ids == ppl_off}")
    ppl = perplexity(model, ppl_ids, PPL_CTX, args.max_chunks)
    ppl.update({"text": "tests/data/text/ppl.txt", "text_sha256": sha256_file(PPL_TEXT),
                "official_tokenizer_json_ids_equal": ppl_ids == ppl_off,
                "method": "llama-perplexity: whole text tokenized without BOS/special tokens; chunks of ctx tokens, "
                          "each from an empty context; logits at positions ctx/2..ctx-2 score tokens ctx/2+1..ctx-1; "
                          "PPL = exp(mean NLL); +/- = sqrt((E[nll^2]-E[nll]^2)/(count-1)) * PPL"})
    log(f"PPL = {ppl['ppl']:.4f} +/- {ppl['ppl_plus_minus']:.5f} over {ppl['n_chunks']} chunks")

    os.makedirs(args.out, exist_ok=True)
    st_path = os.path.join(args.out, "logits.safetensors")
    save_file(full, st_path, metadata={
        "model_sha256": MODEL_SHA256, "dtype_reference": args.dtype,
        "layout": "next.<prompt>: [V] logits after the prompt; tf.<prompt>: [n, V], row s = logits after "
                  "prompt + greedy_ids[:s] (row 0 = next-token row)"})
    all_margins = [m for r in results for m in r["margins"]]
    ref = {
        "model": MODEL_FILE, "model_sha256": MODEL_SHA256, "model_bytes": MODEL_BYTES,
        "model_description": "Qwen2.5-Coder-0.5B-Instruct, llama.cpp Q4_K_M (Q5_0/Q8_0/Q6_K/Q4_K/F32)",
        "transformers": transformers.__version__, "torch": torch.__version__, "gguf": gguf.__version__
        if hasattr(gguf, "__version__") else importlib.metadata.version("gguf"),
        "tokenizers": tokenizers.__version__, "dtype_reference": args.dtype, "threads": args.threads,
        "loader": how, "attn_implementation": "sdpa",
        "notes": [
            "transformers 5.17 loads qwen2 GGUFs with the legacy loader: gguf.dequantize (numpy, float32) then a "
            "cast to the model dtype; checked here: every tensor equals gguf.dequantize bit for bit.",
            "output.weight (Q8_0) is present, so tie_word_embeddings=False and lm_head = output.weight.",
            "rope_theta 1e6 and rms_norm_eps 9.999999974752427e-07 (the file's float32 1e-6) come from the file.",
            "float64 model, but transformers computes RMSNorm and the RoPE cos/sin tables in float32; "
            "f64_everywhere_max_abs_diff is how far that moves the next-token logits.",
            "greedy: repeated full forwards without KV cache (logits_to_keep=1); EOS does not stop it.",
            "margins: top1 - top2 logit at each greedy step (float64).",
            f"full rows: next-token rows of {FULL_NEXT_ROWS}; for {TF_FULL_PROMPT} the first {TF_FULL_ROWS} "
            "teacher-forced rows (row 0 is its next-token row) -- not all 32, to keep the file under 8 MB.",
        ],
        "config": {"rope_theta": cfg.rope_parameters["rope_theta"], "rms_norm_eps": cfg.rms_norm_eps,
                   "tie_word_embeddings": cfg.tie_word_embeddings, "vocab_size": cfg.vocab_size,
                   "hidden_size": cfg.hidden_size, "num_hidden_layers": cfg.num_hidden_layers,
                   "num_attention_heads": cfg.num_attention_heads, "num_key_value_heads": cfg.num_key_value_heads,
                   "intermediate_size": cfg.intermediate_size},
        "weight_check": wcheck,
        "chat_template_renders_chat_prompt": rendered == CHAT_TEXT,
        "f64_everywhere_max_abs_diff": delta, "f64_everywhere_same_argmax": same_argmax,
        "n_greedy": N_GREEDY, "topk": TOPK,
        "margin_summary": {"steps": len(all_margins), "below_0.05": sum(m < 0.05 for m in all_margins),
                           "below_0.2": sum(m < 0.2 for m in all_margins), "min": round(min(all_margins), 6)},
        "full_rows": {k: list(v.shape) for k, v in full.items()},
        "prompts": results,
        "perplexity": ppl,
        "runtime_s": round(time.time() - t_start, 1),
    }
    with open(os.path.join(args.out, "reference.json"), "w", encoding="utf-8") as f:
        json.dump(ref, f, ensure_ascii=False, indent=1)
        f.write("\n")
    log(f"wrote {args.out}/reference.json, {st_path} ({os.path.getsize(st_path)} bytes); "
        f"{ref['runtime_s']:.0f}s total")


if __name__ == "__main__":
    main()
