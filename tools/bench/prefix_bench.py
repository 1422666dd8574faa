#!/usr/bin/env python3
"""prefix_bench.py: time to first token at each turn of a 10-turn chat, with the slot's cached
prefix reused (cache_prompt true, the default) and without (cache_prompt false), on proven-server
and, when given, llama-server (which takes the same field). A benchmark, not a test.

  tools/bench/prefix_bench.py --model M [--llama-server PATH] [--turns 10] [--max-tokens 32] [--out FILE.md]

The conversation is the same for every run: a system prompt and 10 questions; each turn's answer
(greedy) goes back into the history, so turn N's prompt holds the N - 1 turns before it.
"""
import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_bench import Server, loadavg, ROOT  # noqa: E402
import http.client  # noqa: E402

QUESTIONS = [
    "What is a linked list?", "How do I reverse one in C?", "What about a doubly linked list?",
    "How would I free all its nodes?", "Is recursion a good idea for that?", "How do I detect a cycle?",
    "Explain Floyd's algorithm in two sentences.", "What is its complexity?", "Can you show it in Python?",
    "Summarise our conversation in one line.",
]
SYSTEM = "You are a concise programming tutor. " * 8


def ttft_of(port, messages, max_tokens, cache):
    body = json.dumps({"messages": messages, "max_tokens": max_tokens, "temperature": 0, "stream": True, "cache_prompt": cache})
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    t0 = time.time()
    c.request("POST", "/v1/chat/completions", body=body, headers={"Content-Type": "application/json"})
    r = c.getresponse()
    first, text, buf = None, "", b""
    while True:
        d = r.read1(65536)
        if not d:
            break
        buf += d
        while b"\n\n" in buf:
            ev, buf = buf.split(b"\n\n", 1)
            for line in ev.split(b"\n"):
                if line.startswith(b"data: {"):
                    j = json.loads(line[6:])
                    for ch in j.get("choices", []):
                        piece = ch.get("delta", {}).get("content")
                        if piece:
                            if first is None:
                                first = time.time() - t0
                            text += piece
    c.close()
    return first, text


def run(kind, args, cache):
    class A:
        pass
    a = A()
    a.model, a.proven_server, a.llama_server, a.ctx, a.threads = args.model, args.proven_server, args.llama_server, 4096, args.threads
    srv = Server(kind, a, 1)
    try:
        ttft_of(srv.port, [{"role": "user", "content": "Hi."}], 4, True)  # warm-up
        msgs = [{"role": "system", "content": SYSTEM}]
        out = []
        for q in QUESTIONS[:args.turns]:
            msgs.append({"role": "user", "content": q})
            t, text = ttft_of(srv.port, msgs, args.max_tokens, cache)
            out.append(t)
            msgs.append({"role": "assistant", "content": text})
        return out
    finally:
        srv.stop()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--proven-server", default=os.path.join(ROOT, "build", "proven-server"))
    ap.add_argument("--llama-server")
    ap.add_argument("--turns", type=int, default=10)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out")
    args = ap.parse_args()
    kinds = ["proven"] + (["llama"] if args.llama_server else [])
    res = {}
    for kind in kinds:
        for cache in (True, False):
            la = loadavg()
            res[(kind, cache)] = run(kind, args, cache)
            print(kind, "reuse" if cache else "no reuse", "load %.1f" % la, " ".join("%.3f" % t for t in res[(kind, cache)]), flush=True)
    lines = ["# Turn-N time to first token, with and without prefix reuse", "",
             "Written by `tools/bench/prefix_bench.py` (greedy, max_tokens %d, --threads %d, one slot)." % (args.max_tokens, args.threads), "",
             "| turn | " + " | ".join("%s %s" % (k, "reuse" if c else "no reuse") for k in kinds for c in (True, False)) + " |",
             "|---|" + "---|" * (2 * len(kinds))]
    for i in range(args.turns):
        lines.append("| %d | " % (i + 1) + " | ".join("%.3f s" % res[(k, c)][i] for k in kinds for c in (True, False)) + " |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
