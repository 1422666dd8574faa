#!/bin/sh
# proven vs llama.cpp (llama-bench) on the CPU, same GGUF files, alternating the engines round by
# round (DRAM stream, proven, llama.cpp, DRAM stream, proven, ...) so that drift hits both, and
# decode's bytes per token set against the DRAM read bandwidth measured in the same rounds.
# Adapted from shared/tools/peer-cpu-bench.sh. Run it from the repo root after `make all tools`.
#
#   tools/bench/peer-cpu.sh [-t THREADS] [-r ROUNDS] [-d DEPTH] [-o RAWDIR] MODEL.gguf...
#
# proven's knobs come from the environment (PV_CPU_EXACT=1, PV_CPU_ISA=...); its JSON lists them.
# PV_CACHE=f16|bf16|q8_0 runs proven with that KV cache type (--cache-type; default f32).
# The peer: PEER names a folder holding a CPU-only llama-bench; unset, the script builds
# llama.cpp 0c1e57098 (vendored in the PyPI sdist of llama-cpp-python 0.3.36, about 6 minutes on
# 2 cores) under ${PEER_CACHE:-~/.cache/proven-peer} and uses that. Nothing of it enters the repo.
#
# Each round, per model: build/tools/bench_membw (the threads' read bandwidth, best of 5 passes
# over 1 GiB), `build/proven bench --pp 512 --tg 128 --reps 3 --threads T --json-only [--depth D]`,
# then `llama-bench -t T -p 512 -n 128 -r 3 -o jsonl [-d D]`. Before every run it waits (up to 5
# min, IDLE_WAIT seconds) for the machine to be idle (under 0.1 core busy over 1 s), and during it
# counts the CPU time used by anything else: a round where a run saw more than FOREIGN (default
# 0.05) cores of foreign load is repeated (up to 3 extra tries) and left out of the medians, kept
# in the raw log; a model with no clean round at all is reported from its loaded rounds, marked.
#
# Decode bytes per token: every matrix of the layers (routed experts at k/E of their size) and
# the LM head (the tied embedding where there is no output.weight), the f32 vectors, as stored in
# the GGUF; each engine's GB/s adds its KV cache read at the mean decode position D + tg/2 (both
# decode from the depth): proven's cache type (f32 unless PV_CACHE), llama.cpp's f16. Peak RSS
# of each run (wait4's ru_maxrss; both at context D + pp + tg). Output: markdown tables (median
# over clean rounds, min..max), the build identities, and the raw log's path.
set -eu
T=2; ROUNDS=3; DEPTH=0; RAW=
while getopts t:r:d:o: opt; do
	case $opt in
	t) T=$OPTARG ;; r) ROUNDS=$OPTARG ;; d) DEPTH=$OPTARG ;; o) RAW=$OPTARG ;;
	*) sed -n '2,28p' "$0" >&2; exit 2 ;;
	esac
done
shift $((OPTIND - 1))
[ $# -ge 1 ] || { sed -n '2,28p' "$0" >&2; exit 2; }
B=${BUILD:-build}
[ -x "$B/proven" ] && [ -x "$B/tools/bench_membw" ] || { echo "no $B/proven or $B/tools/bench_membw (make all tools)" >&2; exit 1; }
if [ -z "${PEER:-}" ]; then
	cache=${PEER_CACHE:-${HOME:-/tmp}/.cache/proven-peer}
	PEER=$cache/build/bin
	if [ ! -x "$PEER/llama-bench" ]; then
		mkdir -p "$cache"
		( cd "$cache" && python3 -m pip download -q --no-deps --no-binary :all: llama-cpp-python==0.3.36 -d . &&
		  tar xzf llama_cpp_python-0.3.36.tar.gz &&
		  cmake -S llama_cpp_python-0.3.36/vendor/llama.cpp -B build -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON \
		        -DGGML_CUDA=OFF -DGGML_BLAS=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF >/dev/null &&
		  cmake --build build -j2 --target llama-bench llama-perplexity >/dev/null ) >&2
	fi
fi
[ -x "$PEER/llama-bench" ] || { echo "no $PEER/llama-bench" >&2; exit 1; }
[ -n "$RAW" ] || RAW=$(mktemp -d)
mkdir -p "$RAW"
exec python3 - "$B" "$PEER/llama-bench" "$T" "$ROUNDS" "$DEPTH" "$RAW" "${FOREIGN:-0.05}" "$@" <<'PY'
import json, os, resource, statistics, struct, subprocess, sys, tempfile, time
B, lbench, T, ROUNDS, DEPTH, RAW, FOREIGN = sys.argv[1:8]
models = sys.argv[8:]
T, ROUNDS, DEPTH, FOREIGN = int(T), int(ROUNDS), int(DEPTH), float(FOREIGN)
proven, membw = os.path.join(B, "proven"), os.path.join(B, "tools", "bench_membw")
TCK = os.sysconf("SC_CLK_TCK")
PP, TG = 512, 128

# ---- GGUF: bytes a decode token reads ----
TSIZE = {0: (4, 1), 1: (2, 1), 2: (18, 32), 3: (20, 32), 6: (22, 32), 7: (24, 32), 8: (34, 32), 12: (144, 256),
         13: (176, 256), 14: (210, 256), 30: (2, 1)}
def gguf_bytes(path):
    f = open(path, "rb")
    rd = lambda fmt: struct.unpack("<" + fmt, f.read(struct.calcsize("<" + fmt)))
    magic, ver = f.read(4), rd("I")[0]
    assert magic == b"GGUF" and ver >= 2, path
    nt, nkv = rd("QQ")
    def rstr():
        return f.read(rd("Q")[0]).decode("utf-8", "replace")
    SC = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
    def rval(t):
        if t == 8: return rstr()
        if t == 9:
            et, n = rd("IQ")
            return [rval(et) for _ in range(n)]
        return rd(SC[t])[0]
    kv = {}
    for _ in range(nkv):
        k = rstr(); t = rd("I")[0]; v = rval(t)
        if not isinstance(v, list): kv[k] = v
    arch = kv.get("general.architecture", "")
    E, K = kv.get(arch + ".expert_count", 0), kv.get(arch + ".expert_used_count", 0)
    L, H = kv.get(arch + ".block_count", 0), kv.get(arch + ".embedding_length", 0)
    kvh, hd = kv.get(arch + ".attention.head_count_kv", 0), kv.get(arch + ".attention.key_length", 0)
    if not hd and kv.get(arch + ".attention.head_count"): hd = H // kv[arch + ".attention.head_count"]
    full = kv.get(arch + ".full_attention_interval", 1) or 1
    tensors = {}
    for _ in range(nt):
        name = rstr(); nd = rd("I")[0]; dims = rd("Q" * nd); ty = rd("I")[0]; rd("Q")
        n = 1
        for d in dims: n *= d
        bs, bk = TSIZE.get(ty, (4, 1))
        tensors[name] = n // bk * bs
    total = 0
    for name, b in tensors.items():
        if name == "token_embd.weight": continue
        total += b * K / E if "_exps." in name and E else b
    if "output.weight" not in tensors: total += tensors.get("token_embd.weight", 0)
    n_attn = L // full if full > 1 else L
    return total, n_attn * kvh * hd  # weight bytes, K (or V) floats per position over all layers

def stat():
    v = [int(x) for x in open("/proc/stat").readline().split()[1:]]
    return (v[0] + v[1] + v[2] + v[5] + v[6]) / TCK

def wait_idle(limit=int(os.environ.get("IDLE_WAIT", "300"))):
    t0 = time.time()
    while True:
        b0 = stat(); time.sleep(1); b1 = stat()
        if b1 - b0 < 0.1 or time.time() - t0 > limit:
            return b1 - b0, time.time() - t0 - 1

def run(cmd, env=None):
    pre_busy, waited = wait_idle()
    la0 = open("/proc/loadavg").read().split()[:3]
    # output to files and wait4 on the child: its own CPU time and peak RSS
    with tempfile.TemporaryFile("w+") as fo, tempfile.TemporaryFile("w+") as fe:
        b0 = stat(); w0 = time.time()
        p = subprocess.Popen(cmd, stdout=fo, stderr=fe, text=True, env=env)
        _, status, ru = os.wait4(p.pid, 0)
        p.returncode = os.waitstatus_to_exitcode(status)
        w1 = time.time(); b1 = stat()
        fo.seek(0); fe.seek(0)
        out, err = fo.read(), fe.read()
    own = ru.ru_utime + ru.ru_stime
    wall = w1 - w0
    info = {"cmd": cmd, "rc": p.returncode, "wall_s": round(wall, 2), "own_cpu_s": round(own, 2),
            "maxrss_mib": round(ru.ru_maxrss / 1024.0, 1),
            "foreign_cores": round(max(0.0, (b1 - b0) - own) / wall, 3), "busy_before": round(pre_busy, 3),
            "waited_idle_s": round(waited, 1), "loadavg_before": la0}
    if p.returncode != 0: info["stderr_tail"] = err[-2000:]
    return out, info

def last_json(out):
    return [json.loads(l) for l in out.splitlines() if l.strip().startswith("{")]

env = dict(os.environ)
log = open(os.path.join(RAW, "runs.jsonl"), "a")
rows = []
for m in models:
    name = os.path.basename(m)
    wbytes, kvf = gguf_bytes(m)
    pcmd = [proven, "bench", "--model", m, "--pp", str(PP), "--tg", str(TG), "--reps", "3", "--threads", str(T), "--json-only"]
    lcmd = [lbench, "-m", m, "-t", str(T), "-p", str(PP), "-n", str(TG), "-r", "3", "-o", "jsonl"]
    if DEPTH: pcmd += ["--depth", str(DEPTH)]; lcmd += ["-d", str(DEPTH)]
    cache = os.environ.get("PV_CACHE", "")
    if cache: pcmd += ["--cache-type", cache]
    # bytes per decode token: weights + the KV cache read at the mean decode position (both
    # engines decode from the depth): proven's type (f32 4 bytes, f16/bf16 2, q8_0 34/32), llama.cpp f16
    p_el = {"": 4, "f32": 4, "f16": 2, "bf16": 2, "q8_0": 34 / 32}[cache]
    p_kv = 2 * kvf * p_el * (DEPTH + TG / 2.0)
    l_kv = 2 * kvf * 2 * (DEPTH + TG / 2.0)
    clean, dirty_vals, meta = [], [], {}
    for rnd in range(1, ROUNDS + 1):
        for attempt in range(4):
            mout, minfo = run([membw, str(T), "1024", "5"])
            pout, pinfo = run(pcmd, env)
            lout, linfo = run(lcmd)
            ok = pinfo["rc"] == 0 and linfo["rc"] == 0 and minfo["rc"] == 0
            dirty = max(pinfo["foreign_cores"], linfo["foreign_cores"], minfo["foreign_cores"]) > FOREIGN
            rec = {"model": name, "depth": DEPTH, "round": rnd, "attempt": attempt, "dirty": dirty,
                   "membw": minfo, "proven": pinfo, "llama": linfo}
            vals = None
            if ok:
                bw = last_json(mout)[-1]["membw_gb_s"]
                pj = last_json(pout)[-1]
                lj = last_json(lout)
                lpp = [r for r in lj if r["n_prompt"] > 0 and r["n_gen"] == 0][0]
                ltg = [r for r in lj if r["n_gen"] > 0 and r["n_prompt"] == 0][0]
                vals = (pj["pp_tok_s"], pj["tg_tok_s"], lpp["avg_ts"], ltg["avg_ts"], bw, pinfo["maxrss_mib"],
                        linfo["maxrss_mib"])
                rec["proven_json"] = pj; rec["llama_json"] = [lpp, ltg]; rec["membw_gb_s"] = bw
                meta.setdefault("proven", pj); meta.setdefault("llama", lpp)
            log.write(json.dumps(rec) + "\n"); log.flush()
            tag = "FAILED" if not ok else ("dirty" if dirty else "ok")
            print(f"# {name} d{DEPTH} round {rnd}.{attempt}: {tag} " +
                  (f"membw {vals[4]:.1f} GB/s | proven pp {vals[0]:.2f} tg {vals[1]:.2f} | llama pp {vals[2]:.2f} tg {vals[3]:.2f} " if vals else "") +
                  f"(foreign {minfo['foreign_cores']}/{pinfo['foreign_cores']}/{linfo['foreign_cores']} cores)",
                  file=sys.stderr, flush=True)
            if not ok:
                for who, i in (("bench_membw", minfo), ("proven", pinfo), ("llama-bench", linfo)):
                    if i["rc"] != 0: print(f"#   {who} rc {i['rc']}: {i.get('stderr_tail', '')[-600:]}", file=sys.stderr)
                break
            if not dirty:
                clean.append(vals); break
            dirty_vals.append(vals)
        if not ok: break
    # no clean round at all (a machine that never went quiet): report the dirty ones, marked
    marked = not clean and bool(dirty_vals)
    rows.append((name + (" (under foreign load)" if marked else ""), clean or dirty_vals, meta, wbytes, p_kv, l_kv))

def med(xs): return statistics.median(xs)
def rng(xs): return f"{min(xs):.2f}..{max(xs):.2f}"
d = f" @ d{DEPTH}" if DEPTH else ""
print(f"threads {T}, rounds {ROUNDS} (clean rounds counted below), raw log {RAW}/runs.jsonl")
for name, clean, meta, *_ in rows:
    if meta:
        p, l = meta["proven"], meta["llama"]
        print(f"{name}: proven {p['build_commit']} ({p['compiler']}, knobs {json.dumps(p.get('knobs', {}))}, {p['weight_dtype']}); "
              f"llama.cpp {l.get('build_commit')} (build {l.get('build_number')}, {l.get('cpu_info')}, {l.get('backends')})")
print("| model | test | proven t/s (median) | proven min..max | llama.cpp t/s (median) | llama.cpp min..max | proven / llama.cpp | rounds |")
print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
for name, clean, *_ in rows:
    if not clean:
        print(f"| {name} | - | failed or no clean round | | | | | 0 |"); continue
    for test, pi, li in (("pp512" + d, 0, 2), ("tg128" + d, 1, 3)):
        ps, ls = [c[pi] for c in clean], [c[li] for c in clean]
        print(f"| {name} | {test} | {med(ps):.2f} | {rng(ps)} | {med(ls):.2f} | {rng(ls)} | {med(ps) / med(ls):.2f} | {len(clean)} |")
print()
print("| model | decode MB/token (weights) | + KV proven / llama.cpp | DRAM read GB/s (median, min..max) | proven tg GB/s | % of DRAM | llama.cpp tg GB/s | % of DRAM | peak RSS MiB proven / llama.cpp |")
print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
for name, clean, meta, wbytes, p_kv, l_kv in rows:
    if not clean: continue
    bw = [c[4] for c in clean]
    pg = [(wbytes + p_kv) * c[1] / 1e9 for c in clean]
    lg = [(wbytes + l_kv) * c[3] / 1e9 for c in clean]
    # per round: the share of that round's bandwidth
    psh = [100 * (wbytes + p_kv) * c[1] / 1e9 / c[4] for c in clean]
    lsh = [100 * (wbytes + l_kv) * c[3] / 1e9 / c[4] for c in clean]
    print(f"| {name} | {wbytes / 1e6:.1f} | {p_kv / 1e6:.1f} / {l_kv / 1e6:.1f} | {med(bw):.1f} ({rng(bw)}) | {med(pg):.1f} | "
          f"{med(psh):.1f} | {med(lg):.1f} | {med(lsh):.1f} | {med([c[5] for c in clean]):.0f} / {med([c[6] for c in clean]):.0f} |")
PY
