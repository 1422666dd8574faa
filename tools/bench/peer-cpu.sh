#!/bin/sh
# Side-by-side CPU benchmark of proven and llama.cpp's llama-bench on the same GGUF, in one run,
# alternating the two (ROUNDS times) so machine noise hits both. llama.cpp is not part of this
# repository: build it yourself and pass the path of its llama-bench.
#
#   tools/bench/peer-cpu.sh /path/to/llama-bench MODEL.gguf [threads] [rounds]
set -eu
LB=$1; MODEL=$2; T=${3:-2}; ROUNDS=${4:-2}
B=${BUILD:-build}
out=$(mktemp -d)
i=1
while [ $i -le "$ROUNDS" ]; do
	"$B/proven" bench --model "$MODEL" --pp 512 --tg 128 --reps 1 --threads "$T" --json-only >> "$out/proven.jsonl"
	"$LB" -m "$MODEL" -t "$T" -p 512 -n 128 -r 1 -o jsonl >> "$out/llama.jsonl" 2>/dev/null
	i=$((i + 1))
done
python3 - "$out" "$MODEL" "$T" <<'PY'
import json, statistics, sys, os
out, model, t = sys.argv[1:]
pv = [json.loads(l) for l in open(os.path.join(out, "proven.jsonl")) if l.strip()]
ll = [json.loads(l) for l in open(os.path.join(out, "llama.jsonl")) if l.strip()]
pv_pp = statistics.median(r["pp_tok_s"] for r in pv); pv_tg = statistics.median(r["tg_tok_s"] for r in pv)
ll_pp = statistics.median(r["avg_ts"] for r in ll if r["n_prompt"] > 0)
ll_tg = statistics.median(r["avg_ts"] for r in ll if r["n_gen"] > 0)
print(f"model {model}, {t} threads, {len(pv)} rounds alternating")
print(f"proven   {pv[0]['build_commit']}  {pv[0]['compiler']}  isa {pv[0]['isa']}  cpu {pv[0]['cpu']}")
print(f"llama.cpp {ll[0].get('build_commit')} (build {ll[0].get('build_number')})  cpu {ll[0].get('cpu_info')}")
print("| test | proven t/s | llama.cpp t/s | proven / llama.cpp |")
print("| --- | ---: | ---: | ---: |")
print(f"| pp512 | {pv_pp:.2f} | {ll_pp:.2f} | {pv_pp / ll_pp:.2f} |")
print(f"| tg128 | {pv_tg:.2f} | {ll_tg:.2f} | {pv_tg / ll_tg:.2f} |")
PY
rm -rf "$out"
