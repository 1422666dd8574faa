#!/usr/bin/env python3
"""serve_bench.py: proven-server against llama-server on the same GGUF, the same prompts, the same
greedy requests and the same thread count: time to first token (TTFT), per-request decode speed,
inter-token latency and aggregate throughput at several concurrent clients, for one-shot requests
and for multi-turn chats (each turn resends the whole history, so a server that reuses the cached
prefix answers turn 2+ sooner). A benchmark, not a test: run it through tools/bench/serve-peer.sh,
which takes the machine's benchmark lock.

  tools/bench/serve_bench.py --model ~/.cache/proven/qwen2.5-coder-0.5b.gguf \\
      [--llama-server ~/.cache/proven-peer/build/bin/llama-server] [--users 1,2,4] [--rounds 2] \\
      [--max-tokens 48] [--turns 4] [--threads 2] [--out docs/results/serve-DATE.md]

Every request is a streamed chat completion at temperature 0 with an explicit system message
(so that both servers render the same ChatML prompt: llama-server's template would otherwise add
Qwen2.5's default system prompt, proven's too, but the two must be checked equal; the table shows
the prompt tokens each server counted). Each (server, workload, users) cell starts the server
fresh with as many slots as users (proven: --parallel U; llama-server: -np U and U times the
context, so that each slot has the same context), sends one warm-up request, runs the clients,
and stops it. The servers alternate inside every round and the order flips each round, so drift
on a shared machine hits both.

  TTFT           from sending a request to its first content chunk
  decode tok/s   per request: (completion tokens - 1) / (last chunk - first chunk)
  ITL            the gaps between content chunks (one token per chunk for both servers here)
  throughput     completion tokens of all clients / the cell's wall time
"""
import argparse
import datetime
import hashlib
import http.client
import json
import os
import socket
import statistics
import subprocess
import tempfile
import threading
import time

SYSTEM = "You are a concise programming assistant. Answer with code when asked for code."

PROMPTS = [
    "Write a C function that reverses a string in place.",
    "Write a Python function that checks whether a number is prime.",
    "Write a SQL query that finds the second highest salary.",
    "Write a JavaScript function that debounces another function.",
    "Write a Rust function that sums a vector of integers.",
    "Write a Go function that reads a file line by line.",
    "Write a C macro that returns the number of elements of an array.",
    "Write a bash script that counts lines in all .c files.",
    "Write a Python class for a stack with push, pop and peek.",
    "Write a C function that computes the CRC32 of a buffer.",
    "Write a Java method that merges two sorted arrays.",
    "Write a Python generator that yields Fibonacci numbers.",
    "Write a C function that parses a decimal integer from a string.",
    "Write a TypeScript function that deep-clones an object.",
    "Write a Python function that flattens a nested list.",
    "Write a C++ function that removes duplicates from a vector.",
]

FOLLOW_UPS = ["Now add error handling.", "Add a short test for it.", "Make it faster if you can.", "Explain it in two sentences.",
              "Rewrite it without recursion.", "Add comments."]

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def loadavg():
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


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


def one_request(port, messages, max_tokens, cache=True):
    """a dict: ttft, gaps, n (completion tokens), prompt_tokens, cached, decode_tok_s, text"""
    body = {"messages": messages, "max_tokens": max_tokens, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}}
    if not cache:
        body["cache_prompt"] = False
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    t0 = time.time()
    c.request("POST", "/v1/chat/completions", body=json.dumps(body), headers={"Content-Type": "application/json"})
    r = c.getresponse()
    if r.status != 200:
        raise RuntimeError("status %d: %s" % (r.status, r.read()[:200]))
    times, usage, timings, buf, text = [], None, None, b"", []
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
                if j.get("timings"):
                    timings = j["timings"]
                for ch in j.get("choices", []):
                    dl = ch.get("delta", {})
                    piece = dl.get("content") or dl.get("reasoning_content")
                    if piece:
                        times.append(time.time())
                        text.append(dl.get("content") or "")
    c.close()
    n = usage["completion_tokens"] if usage else len(times)
    cached = None
    if usage and usage.get("prompt_tokens_details"):
        cached = usage["prompt_tokens_details"].get("cached_tokens")
    if cached is None and timings and "cache_n" in timings:
        cached = timings["cache_n"]
    return {"ttft": times[0] - t0 if times else None, "gaps": [b - a for a, b in zip(times, times[1:])], "n": n,
            "prompt_tokens": usage["prompt_tokens"] if usage else None, "cached": cached,
            "decode_tok_s": (n - 1) / (times[-1] - times[0]) if len(times) > 1 and n > 1 and times[-1] > times[0] else None,
            "text": "".join(text)}


def cell(kind, args, workload, users):
    srv = Server(kind, args, users)
    try:
        one_request(srv.port, [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Say hello."}], 8)  # warm-up
        results = [[] for _ in range(users)]
        errors = []

        def client(u):
            try:
                if workload == "single":
                    for k in range(args.requests_per_user):
                        msgs = [{"role": "system", "content": SYSTEM},
                                {"role": "user", "content": PROMPTS[(u * args.requests_per_user + k) % len(PROMPTS)]}]
                        res = one_request(srv.port, msgs, args.max_tokens)
                        res["turn"] = 1
                        results[u].append(res)
                else:  # a chat: each turn resends the history with the previous answer in it
                    msgs = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": PROMPTS[u % len(PROMPTS)]}]
                    for t in range(args.turns):
                        res = one_request(srv.port, msgs, args.max_tokens)
                        res["turn"] = t + 1
                        results[u].append(res)
                        msgs = msgs + [{"role": "assistant", "content": res["text"]},
                                       {"role": "user", "content": FOLLOW_UPS[(u + t) % len(FOLLOW_UPS)]}]
            except Exception as e:  # noqa: an error is counted and shown, never hidden
                errors.append("%s: %s" % (type(e).__name__, e))
        la0 = loadavg()
        t0 = time.time()
        ts = [threading.Thread(target=client, args=(u,)) for u in range(users)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        wall = time.time() - t0
        flat = [x for r in results for x in r]
        first = [x["ttft"] for x in flat if x["ttft"] is not None and x["turn"] == 1]
        later = [x["ttft"] for x in flat if x["ttft"] is not None and x["turn"] > 1]
        gaps = [g for x in flat for g in x["gaps"]]
        dec = [x["decode_tok_s"] for x in flat if x["decode_tok_s"]]
        toks = sum(x["n"] for x in flat)
        med = lambda v: statistics.median(v) if v else None  # noqa: E731
        return {"server": kind, "workload": workload, "users": users, "requests": len(flat), "errors": len(errors),
                "error_sample": errors[:2], "tokens": toks, "wall_s": wall, "throughput_tok_s": toks / wall,
                "prompt_tokens": sum(x["prompt_tokens"] or 0 for x in flat), "cached_tokens": sum(x["cached"] or 0 for x in flat),
                "ttft_turn1_s": med(first), "ttft_later_s": med(later), "decode_tok_s": med(dec),
                "itl_median_ms": med(gaps) * 1e3 if gaps else None,
                "itl_p90_ms": sorted(gaps)[int(0.9 * (len(gaps) - 1))] * 1e3 if gaps else None,
                "loadavg_start": la0, "loadavg_end": loadavg()}
    finally:
        srv.stop()


def identity(args):
    pv = subprocess.run([args.proven_server, "--version"], capture_output=True, text=True).stdout.strip().splitlines()
    ll = []
    if args.llama_server:
        p = subprocess.run([args.llama_server, "--version"], capture_output=True, text=True)
        ll = [x for x in (p.stdout + p.stderr).strip().splitlines() if x.startswith(("version", "built"))]
    h = hashlib.sha256()
    with open(args.model, "rb") as f:
        for blk in iter(lambda: f.read(1 << 20), b""):
            h.update(blk)
    cpu = [ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name")]
    return {"proven": "; ".join(pv[:2]), "llama": "; ".join(ll), "model": os.path.basename(args.model), "sha256": h.hexdigest(),
            "cpu": "%s x %d" % (cpu[0] if cpu else "?", len(cpu))}


def fmt(v, f):
    return "-" if v is None else f % v


def ratio(a, b):
    return None if a is None or b is None or b == 0 else a / b


def report(args, ident, rows):
    """the markdown receipt: medians over the rounds per cell, then proven / llama ratios"""
    kinds = sorted({r["server"] for r in rows}, key=lambda k: k != "proven")
    keys = sorted({(r["workload"], r["users"]) for r in rows}, key=lambda k: (k[0] != "single", k[1]))

    def med(kind, key, field):
        v = [r[field] for r in rows if r["server"] == kind and (r["workload"], r["users"]) == key and r[field] is not None]
        return statistics.median(v) if v else None
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    L = ["# proven-server vs llama-server on CPU (%s)" % when, "",
         "Written by `tools/bench/serve_bench.py`, run under the machine's benchmark lock (`tools/bench/serve-peer.sh` takes it).", "",
         "- proven: `%s`" % ident["proven"],
         "- llama-server: `%s` (%s)" % (ident["llama"] or "-", args.llama_server),
         "- model: %s (sha256 %s...)" % (ident["model"], ident["sha256"][:16]),
         "- machine: %s, shared with other work (load average per cell in the JSON rows); --threads %d for both servers" % (ident["cpu"], args.threads),
         "- requests: streamed chat completions, temperature 0, max_tokens %d, explicit system message; `single`: %d one-shot "
         "requests per client; `chat`: one %d-turn conversation per client (each turn resends the history with the answer)" % (
             args.max_tokens, args.requests_per_user, args.turns),
         "- %d rounds, servers alternating (order flipped each round), a fresh server per cell with one slot per client; "
         "medians over the rounds" % args.rounds, ""]
    L += ["| workload | clients | server | throughput tok/s | decode tok/s per request | TTFT turn 1 s | TTFT turn 2+ s | ITL median ms | ITL p90 ms | prompt tok | cached tok | errors |",
          "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for key in keys:
        for k in kinds:
            L.append("| %s | %d | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
                key[0], key[1], k, fmt(med(k, key, "throughput_tok_s"), "%.1f"), fmt(med(k, key, "decode_tok_s"), "%.1f"),
                fmt(med(k, key, "ttft_turn1_s"), "%.3f"), fmt(med(k, key, "ttft_later_s"), "%.3f"),
                fmt(med(k, key, "itl_median_ms"), "%.1f"), fmt(med(k, key, "itl_p90_ms"), "%.1f"),
                fmt(med(k, key, "prompt_tokens"), "%d"), fmt(med(k, key, "cached_tokens"), "%d"),
                "%d" % sum(r["errors"] for r in rows if r["server"] == k and (r["workload"], r["users"]) == key)))
    if len(kinds) == 2:
        L += ["", "Ratios proven / llama-server (throughput and decode: > 1 means proven is faster; TTFT: < 1 means proven answers sooner):", "",
              "| workload | clients | throughput | decode per request | TTFT turn 1 | TTFT turn 2+ |", "|---|---:|---:|---:|---:|---:|"]
        for key in keys:
            L.append("| %s | %d | %s | %s | %s | %s |" % (
                key[0], key[1], fmt(ratio(med("proven", key, "throughput_tok_s"), med("llama", key, "throughput_tok_s")), "%.2f"),
                fmt(ratio(med("proven", key, "decode_tok_s"), med("llama", key, "decode_tok_s")), "%.2f"),
                fmt(ratio(med("proven", key, "ttft_turn1_s"), med("llama", key, "ttft_turn1_s")), "%.2f"),
                fmt(ratio(med("proven", key, "ttft_later_s"), med("llama", key, "ttft_later_s")), "%.2f")))
    return "\n".join(L) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--proven-server", default=os.path.join(ROOT, "build", "proven-server"))
    ap.add_argument("--llama-server", default=os.path.expanduser("~/.cache/proven-peer/build/bin/llama-server"))
    ap.add_argument("--users", default="1,2,4")
    ap.add_argument("--workloads", default="single,chat")
    ap.add_argument("--requests-per-user", type=int, default=2, help="single: requests each client sends in turn")
    ap.add_argument("--turns", type=int, default=4, help="chat: turns of each client's conversation")
    ap.add_argument("--max-tokens", type=int, default=48)
    ap.add_argument("--ctx", type=int, default=2048, help="context per slot")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--only", choices=["proven", "llama"], help="one server only")
    ap.add_argument("--out", help="the markdown receipt (the JSON rows go beside it, .jsonl)")
    args = ap.parse_args()
    if args.only == "proven":
        args.llama_server = None
    kinds = [args.only] if args.only else ["proven", "llama"]
    ident = identity(args)
    print(json.dumps(ident), flush=True)
    rows = []
    for rnd in range(args.rounds):
        for workload in args.workloads.split(","):
            for users in [int(u) for u in args.users.split(",")]:
                order = kinds if rnd % 2 == 0 else kinds[::-1]
                for kind in order:
                    r = cell(kind, args, workload, users)
                    r["round"] = rnd
                    rows.append(r)
                    print(json.dumps(r), flush=True)
    text = report(args, ident, rows)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
        with open(os.path.splitext(args.out)[0] + ".jsonl", "w") as f:
            f.write(json.dumps(ident) + "\n")
            for r in rows:
                f.write(json.dumps(r) + "\n")


if __name__ == "__main__":
    main()
