#!/usr/bin/env python3
"""serve_bench.py: proven-server against llama-server on the same GGUF, the same prompts and the
same greedy requests: time to first token, inter-token latency and throughput at 1 / 4 / 16
concurrent users. A benchmark, not a test: run it by hand when the machine is quiet
(/proc/loadavg is printed with every level; the two servers alternate, so drift hits both).

  tools/bench/serve_bench.py --model ~/.cache/proven/qwen2.5-coder-0.5b.gguf \\
      --llama-server ~/.cache/proven-peer/build/bin/llama-server [--users 1,4,16] [--rounds 2] \\
      [--max-tokens 64] [--threads 2] [--out docs/results/serve-DATE.md]

Each user sends its requests one after another (streaming chat completions, temperature 0);
TTFT is from sending a request to its first content chunk, ITL the gaps between content chunks,
throughput the completion tokens of all users over the level's wall time. Every server is started
fresh for each level with as many slots as users (proven: --parallel U; llama-server: -np U with
U times the context), warmed up with one request, and stopped after the level.
"""
import argparse
import datetime
import hashlib
import http.client
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time

PROMPTS = [
    "Write a C function that reverses a string in place.",
    "Explain the difference between a process and a thread.",
    "Write a Python function that checks whether a number is prime.",
    "What does the restrict keyword mean in C?",
    "Write a SQL query that finds the second highest salary.",
    "How does a hash table handle collisions?",
    "Write a JavaScript function that debounces another function.",
    "Explain what a memory-mapped file is.",
    "Write a Rust function that sums a vector of integers.",
    "What is the time complexity of quicksort and why?",
    "Write a bash one-liner that counts lines in all .c files.",
    "Explain how TCP slow start works.",
    "Write a Go function that reads a file line by line.",
    "What is the difference between a mutex and a semaphore?",
    "Write a C macro that returns the number of elements of an array.",
    "Explain copy-on-write in operating systems.",
]

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def loadavg():
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


def wait_quiet(limit, max_wait):
    t0 = time.time()
    while loadavg() > limit and time.time() - t0 < max_wait:
        time.sleep(5)
    return loadavg()


class Server:
    def __init__(self, kind, args, users):
        self.kind = kind
        self.dir = tempfile.mkdtemp(prefix="pv-bench-")
        port = free_port()
        ctx = args.ctx
        if kind == "proven":
            cmd = [args.proven_server, "--model", args.model, "--port", str(port), "--parallel", str(users), "--ctx", str(ctx),
                   "--threads", str(args.threads), "--queue", "256"]
        else:
            cmd = [args.llama_server, "-m", args.model, "--port", str(port), "-np", str(users), "-c", str(ctx * users),
                   "-t", str(args.threads), "-tb", str(args.threads), "--host", "127.0.0.1"]
        self.log = open(os.path.join(self.dir, "log"), "wb")
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=self.log)
        self.port = port
        t0 = time.time()
        while time.time() - t0 < 300:
            try:
                c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
                c.request("GET", "/health")
                if c.getresponse().status == 200:
                    return
            except OSError:
                pass
            if self.proc.poll() is not None:
                raise RuntimeError("%s exited: %s" % (kind, open(os.path.join(self.dir, "log")).read()[-2000:]))
            time.sleep(0.2)
        raise RuntimeError("%s did not become ready" % kind)

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


def free_port():
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def one_request(port, prompt, max_tokens):
    """(ttft_s, [gaps_s], completion_tokens, total_s) of one streamed greedy chat request"""
    body = json.dumps({"messages": [{"role": "user", "content": prompt}], "max_tokens": max_tokens, "temperature": 0,
                       "stream": True, "stream_options": {"include_usage": True}})
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    t0 = time.time()
    c.request("POST", "/v1/chat/completions", body=body, headers={"Content-Type": "application/json"})
    r = c.getresponse()
    if r.status != 200:
        raise RuntimeError("status %d: %s" % (r.status, r.read()[:200]))
    times, usage, buf = [], None, b""
    while True:
        d = r.read1(65536)
        if not d:
            break
        buf += d
        while b"\n\n" in buf:
            ev, buf = buf.split(b"\n\n", 1)
            for line in ev.split(b"\n"):
                if not line.startswith(b"data: ") or line == b"data: [DONE]":
                    continue
                j = json.loads(line[6:])
                if j.get("usage"):
                    usage = j["usage"]
                for ch in j.get("choices", []):
                    dl = ch.get("delta", {})
                    if dl.get("content") or dl.get("reasoning_content"):
                        times.append(time.time())
    t1 = time.time()
    c.close()
    n = usage["completion_tokens"] if usage else len(times)
    if not times:
        return None, [], n, t1 - t0
    return times[0] - t0, [b - a for a, b in zip(times, times[1:])], n, t1 - t0


def level(kind, args, users):
    srv = Server(kind, args, users)
    try:
        one_request(srv.port, "Say hello.", 8)  # warm-up
        per_user = max(1, args.requests // users)
        results = [[] for _ in range(users)]
        errors = []

        def user(u):
            for k in range(per_user):
                try:
                    results[u].append(one_request(srv.port, PROMPTS[(u * per_user + k) % len(PROMPTS)], args.max_tokens))
                except Exception as e:  # noqa
                    errors.append(str(e))
        la0 = loadavg()
        t0 = time.time()
        ts = [threading.Thread(target=user, args=(u,)) for u in range(users)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        wall = time.time() - t0
        flat = [x for r in results for x in r]
        ttft = [x[0] for x in flat if x[0] is not None]
        gaps = [g for x in flat for g in x[1]]
        toks = sum(x[2] for x in flat)
        return {"server": kind, "users": users, "requests": len(flat), "errors": len(errors), "tokens": toks, "wall_s": wall,
                "throughput_tok_s": toks / wall, "ttft_median_s": statistics.median(ttft) if ttft else None,
                "ttft_p90_s": sorted(ttft)[int(0.9 * (len(ttft) - 1))] if ttft else None,
                "itl_median_ms": statistics.median(gaps) * 1e3 if gaps else None,
                "itl_p90_ms": sorted(gaps)[int(0.9 * (len(gaps) - 1))] * 1e3 if gaps else None,
                "per_user_tok_s": statistics.median([x[2] / (x[3] - x[0]) for x in flat if x[0] is not None and x[3] > x[0]]),
                "loadavg_start": la0, "loadavg_end": loadavg()}
    finally:
        srv.stop()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--proven-server", default=os.path.join(ROOT, "build", "proven-server"))
    ap.add_argument("--llama-server", default=os.path.expanduser("~/.cache/proven-peer/build/bin/llama-server"))
    ap.add_argument("--users", default="1,4,16")
    ap.add_argument("--requests", type=int, default=16, help="requests per level, split among the users")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--ctx", type=int, default=2048, help="context per slot")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--quiet-load", type=float, default=1.5, help="wait (up to 10 min) for a load average below this")
    ap.add_argument("--only", choices=["proven", "llama"], help="one server only")
    ap.add_argument("--out", help="a markdown receipt (and the JSON rows beside it)")
    args = ap.parse_args()
    kinds = [args.only] if args.only else ["proven", "llama"]
    rows = []
    for rnd in range(args.rounds):
        for users in [int(u) for u in args.users.split(",")]:
            order = kinds if rnd % 2 == 0 else kinds[::-1]
            for kind in order:
                la = wait_quiet(args.quiet_load, 600)
                r = level(kind, args, users)
                r["round"] = rnd
                rows.append(r)
                print(json.dumps(r), flush=True)
    if args.out:
        write_receipt(args, rows)


def fmt(v, f):
    return "-" if v is None else f % v


def write_receipt(args, rows):
    commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True).stdout.strip()
    h = hashlib.sha256()
    with open(args.model, "rb") as f:
        for blk in iter(lambda: f.read(1 << 20), b""):
            h.update(blk)
    cpu = [ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name")]
    lines = ["# proven-server vs llama-server: concurrent users", "",
             "Written by `tools/bench/serve_bench.py` on %s." % datetime.datetime.now().strftime("%Y-%m-%d %H:%M"), "",
             "- proven commit %s; llama-server %s" % (commit, args.llama_server),
             "- model %s (sha256 %s)" % (os.path.basename(args.model), h.hexdigest()[:16]),
             "- CPU: %s x %d; --threads %d for both; context %d per slot" % (cpu[0] if cpu else "?", len(cpu), args.threads, args.ctx),
             "- %d requests per level split among the users, streamed greedy chat, max_tokens %d; %d rounds, the servers "
             "alternating" % (args.requests, args.max_tokens, args.rounds), "",
             "| server | users | requests | tokens | throughput tok/s | per-user tok/s | TTFT median s | TTFT p90 s | ITL median ms | ITL p90 ms | load |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append("| %s | %d | %d | %d | %.1f | %s | %s | %s | %s | %s | %.1f-%.1f |" % (
            r["server"], r["users"], r["requests"], r["tokens"], r["throughput_tok_s"], fmt(r["per_user_tok_s"], "%.1f"),
            fmt(r["ttft_median_s"], "%.3f"), fmt(r["ttft_p90_s"], "%.3f"), fmt(r["itl_median_ms"], "%.1f"),
            fmt(r["itl_p90_ms"], "%.1f"), r["loadavg_start"], r["loadavg_end"]))
    with open(args.out, "w") as f:
        f.write("\n".join(lines) + "\n")
    with open(os.path.splitext(args.out)[0] + ".jsonl", "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")


if __name__ == "__main__":
    main()
