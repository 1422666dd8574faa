#!/usr/bin/env python3
"""results_table.py: the H200 results table (markdown) from the JSON lines `proven bench --backend
cuda --json-only` printed in a device run (tools/cuda/device-check.sh writes them to bench.jsonl).

    python3 tools/cuda/results_table.py docs/results/h200-...jsonl > table.md

One row per bench line: decode tok/s at its context (depth + prompt + half the decoded tokens),
prefill tok/s of its prompt, bytes read per decode token, the share of the device-to-device copy
bandwidth measured in the same run, launches/kernels/syncs per token, GPU memory in use, and
llama.cpp's figure for the same model where the issue quotes one (measured on the project's H200
with llama.cpp build 10587, random-weight GGUF files with the real shapes). Nothing is computed
here that the bench did not measure; ratios are proven / llama.cpp.
"""
import json
import sys

# llama.cpp on the project's H200 (issue 4): tg128 and pp512 tok/s
PEER = {
    ("qwen3-8b", "bf16"): (200.8, 23000.0),
    ("qwen3-8b", "q8_0"): (243.1, 10600.0),
    ("qwen3-8b", "q4_k_m"): (249.3, 9500.0),
    ("qwen3.5-9b", "bf16"): (178.9, 16400.0),
    ("qwen3.5-35b-a3b", "q8_0"): (227.6, 5500.0),
    ("qwen3.5-35b-a3b", "q4_k_m"): (246.3, 4900.0),
}
PEER_DEPTH4K = {("qwen3-8b", "bf16"): 190.6}


def peer_key(name):
    for (m, t) in PEER:
        if name.startswith(m + "-" + t):
            return (m, t)
    return None


def main():
    rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
    bw = [r for r in rows if r.get("test") == "d2d_copy"]
    if bw:
        r = bw[0]
        print(f"Device: {r['gpu']}, {r['sms']} SMs, SM clock {r['sm_clock_mhz']} MHz, memory clock {r['mem_clock_mhz']} MHz, "
              f"driver CUDA {r['driver_cuda']}, nvcc {r['nvcc']}; device-to-device copy {r['d2d_gb_s']:.0f} GB/s "
              f"(read + write, 4 GiB, median of 20).\n")
    benches = [r for r in rows if "tg_tok_s" in r and r.get("backend") == "cuda"]
    if benches:
        b = benches[0]
        print(f"Build: commit {b['build_commit']}, {b['compiler']}, nvcc {b.get('nvcc', '?')}; random-weight GGUF files "
              f"written by `proven synth` with the published shapes.\n")
    print("| run | weights | context (decode) | decode tok/s | llama.cpp tg | ratio | prompt | prefill tok/s | llama.cpp pp512 | ratio "
          "| bytes/token | share of D2D | graph launches / kernels / syncs per token | prompt kernels / syncs | GPU MiB |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- | ---: |")
    for r in benches:
        name = r.get("name", r["model"])
        ctx = r.get("depth", 0) + r["pp"] + r["tg"] // 2
        key = peer_key(name)
        ptg = ppp = None
        if key:
            ptg, ppp = PEER[key]
            if ctx > 1024:  # llama.cpp's figures are at short context, one (8B bf16) at depth 4096
                ptg = PEER_DEPTH4K.get(key) if 3500 <= ctx <= 5000 else None
            if r.get("depth", 0) or r["pp"] != 512:
                ppp = None
        tg_ratio = f"{r['tg_tok_s'] / ptg:.2f}x" if ptg else ""
        pp_ratio = f"{r['pp_tok_s'] / ppp:.2f}x" if ppp else ""
        mb = (r["weight_bytes_per_token"] + r["kv_bytes_per_token"]) / 1e9
        print(f"| {name} | {r['weight_dtype']} | {ctx} | {r['tg_tok_s']:.1f} | {ptg or ''} | {tg_ratio} | {r['pp']} | "
              f"{r['pp_tok_s']:.0f} | {ppp or ''} | {pp_ratio} | {mb:.2f} GB | "
              f"{100 * r['tg_bw_share']:.1f} % | {r['graph_launches_per_token']:.2f} / {r['kernels_per_token']} / "
              f"{r['syncs_per_token']:.2f} | {r.get('pp_kernels', 0):.0f} / {r.get('pp_syncs', 0):.0f} | {r['gpu_used_mib']:.0f} |")
    profs = [r for r in benches if r.get("profile")]
    for r in profs:
        print(f"\nWhere a decode token's time goes, {r.get('name', r['model'])} ({r['profile_total_us']:.0f} us/token, "
              "graph replays with timing events between op groups):\n")
        print("| op group | us/token | share | kernels | MB/token | GB/s |")
        print("| --- | ---: | ---: | ---: | ---: | ---: |")
        for p in sorted(r["profile"], key=lambda p: -p["us"]):
            gbs = f"{p['bytes'] / (p['us'] * 1e3):.0f}" if p["bytes"] and p["us"] else ""
            print(f"| {p['group']} | {p['us']:.0f} | {100 * p['us'] / r['profile_total_us']:.1f} % | {p['kernels']} | "
                  f"{p['bytes'] / 1e6:.1f} | {gbs} |")


if __name__ == "__main__":
    main()
