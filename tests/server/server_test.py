#!/usr/bin/env python3
"""server_test.py: proven-server end to end over loopback, one case per run (tests/test_server.c
runs them; each prints one 'ok'/'FAIL' line per check and 'skip' lines).

usage: server_test.py --build BUILD --model MODEL CASE [--real]
"""
import argparse
import json
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
import re
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import (Server, ok, skip, done, chat_text, completion_text, is_error_body, raw_socket, read_sse, venv_python,  # noqa: E402
                    relay)

A = None
MSG = [{"role": "user", "content": "Write a haiku about the sea."}]


def chat(srv, **kw):
    body = {"messages": MSG}
    body.update(kw)
    return srv.post("/v1/chat/completions", body)


# ------------------------------------------------------------------------------------------------
def case_basics():
    srv = Server(A.build, A.model, "--parallel", "2")
    st, hd, data = srv.get("/health")
    ok(st == 200 and json.loads(data) == {"status": "ok"}, "/health 200 ok")
    st, _, data = srv.get("/v1/models")
    m = json.loads(data)
    ok(st == 200 and m["object"] == "list" and m["data"][0]["object"] == "model" and m["data"][0]["id"], "/v1/models lists the model")
    st, _, data = srv.get("/props")
    p = json.loads(data)
    ok(st == 200 and p["total_slots"] == 2 and p["n_ctx"] > 0 and "build_info" in p, "/props")
    st, _, data = srv.get("/slots")
    s = json.loads(data)
    ok(st == 200 and len(s) == 2 and all(x["state"] == "idle" for x in s), "/slots: 2 idle slots")
    st, hd, data = srv.get("/metrics")
    ok(st == 200 and b"# TYPE proven:request_success_total counter" in data and hd["content-type"].startswith("text/plain"),
       "/metrics in Prometheus text")
    st, t = srv.post("/tokenize", {"content": "Hello world, <|im_start|>"})
    ok(st == 200 and len(t["tokens"]) >= 3 and 151644 in t["tokens"], "/tokenize parses special tokens")
    st, t2 = srv.post("/tokenize", {"content": "Hello world, <|im_start|>", "parse_special": False})
    ok(st == 200 and 151644 not in t2["tokens"], "/tokenize parse_special false")
    st, t3 = srv.post("/tokenize", {"content": "Hi", "with_pieces": True})
    ok(st == 200 and t3["tokens"][0]["piece"] == "Hi", "/tokenize with_pieces")
    st, d = srv.post("/detokenize", {"tokens": t["tokens"]})
    ok(st == 200 and d["content"] == "Hello world, <|im_start|>", "/detokenize inverts /tokenize")
    st, a = srv.post("/apply-template", {"messages": MSG})
    ok(st == 200 and a["prompt"].endswith("<|im_start|>assistant\n") and "<|im_start|>user\nWrite a haiku" in a["prompt"],
       "/apply-template renders with the generation prompt")
    st, a2 = srv.post("/apply-template", {"messages": MSG, "chat_template_kwargs": {"enable_thinking": False}})
    ok(st == 200 and ("<think>\n\n</think>" in a2["prompt"] or a2["prompt"] == a["prompt"]), "/apply-template enable_thinking false")
    st, hd, data = srv.get("/")
    ok(st == 200 and hd["content-type"].startswith("text/html") and b"<html" in data.lower(), "GET / serves the chat page")
    st, hd, data = srv.get("/nope")
    ok(st == 404 and is_error_body(json.loads(data), 404), "404 in OpenAI's error shape")
    st, hd, data = srv.get("/v1/chat/completions")
    ok(st == 405 and is_error_body(json.loads(data), 405), "405 for GET on a POST endpoint")
    ok(srv.stop() == 0, "exit code 0 after SIGTERM")


# ------------------------------------------------------------------------------------------------
def case_chat():
    srv = Server(A.build, A.model, "--parallel", "2")
    st, r = chat(srv, max_tokens=12, seed=7, temperature=0.9)
    u = r["usage"]
    ok(st == 200 and r["object"] == "chat.completion" and r["choices"][0]["message"]["role"] == "assistant", "chat: 200, an assistant message")
    ok(u["total_tokens"] == u["prompt_tokens"] + u["completion_tokens"], "usage adds up")
    st, a = srv.post("/apply-template", {"messages": MSG})
    st, t = srv.post("/tokenize", {"content": a["prompt"]})
    ok(u["prompt_tokens"] == len(t["tokens"]), "prompt_tokens = tokens of the rendered template (%d)" % u["prompt_tokens"])
    fin = r["choices"][0]["finish_reason"]
    ok((fin == "length") == (u["completion_tokens"] == 12) and u["completion_tokens"] <= 12, "max_tokens 12: finish_reason %s" % fin)
    tm = r.get("timings", {})
    ok(tm.get("predicted_n") == u["completion_tokens"] and tm.get("cache_n") == u["prompt_tokens_details"]["cached_tokens"]
       and tm.get("prompt_n", -1) + tm.get("cache_n", 0) == u["prompt_tokens"], "timings agree with usage")
    # the same seed: the same answer, streamed or not
    st, r2 = chat(srv, max_tokens=12, seed=7, temperature=0.9)
    ok(r2["choices"][0]["message"] == r["choices"][0]["message"], "same seed, same answer")
    ok(r2["usage"]["prompt_tokens_details"]["cached_tokens"] == u["prompt_tokens"] - 1, "second identical prompt reuses %d cached tokens" % (u["prompt_tokens"] - 1))
    st, ev = srv.stream("/v1/chat/completions", {"messages": MSG, "max_tokens": 12, "seed": 7, "temperature": 0.9, "stream": True,
                                                 "stream_options": {"include_usage": True}})
    content, reasoning, calls, finish, usage = chat_text(ev)
    m = r["choices"][0]["message"]
    ok(st == 200 and ev[-1] == "[DONE]", "stream ends with [DONE]")
    ok(content == (m.get("content") or "") and reasoning == (m.get("reasoning_content") or ""), "stream = non-stream (content and reasoning)")
    ok(finish == fin, "stream finish_reason = non-stream's")
    ok(usage and usage["completion_tokens"] == u["completion_tokens"] and usage["prompt_tokens"] == u["prompt_tokens"], "stream usage chunk")
    ok(ev[-2].get("choices") == [] and "usage" in ev[-2], "usage chunk has empty choices, right before [DONE]")
    ids = {e["id"] for e in ev if isinstance(e, dict)}
    cr = {e["created"] for e in ev if isinstance(e, dict)}
    ok(len(ids) == 1 and len(cr) == 1, "every chunk has the same id and created")
    ok(ev[0]["choices"][0]["delta"].get("role") == "assistant", "first chunk carries the role")
    # greedy twice
    st, g1 = chat(srv, max_tokens=10, temperature=0)
    st, g2 = chat(srv, max_tokens=10, temperature=0, seed=123)
    ok(g1["choices"][0]["message"] == g2["choices"][0]["message"], "greedy is seed-independent")
    # logprobs
    st, lp = chat(srv, max_tokens=8, temperature=0, logprobs=True, top_logprobs=3)
    ent = (lp["choices"][0].get("logprobs") or {}).get("content") or []
    ok(st == 200 and len(ent) == lp["usage"]["completion_tokens"], "one logprobs entry per completion token (%d)" % len(ent))
    ok(all(len(e["top_logprobs"]) == 3 and e["logprob"] <= 0 and e["token"] == e["top_logprobs"][0]["token"] for e in ent),
       "greedy token = top alternative, 3 alternatives each")
    st, ev = srv.stream("/v1/chat/completions", {"messages": MSG, "max_tokens": 8, "temperature": 0, "logprobs": True, "top_logprobs": 3,
                                                 "stream": True})
    sent = [x for e in ev if isinstance(e, dict) for ch in e["choices"] for x in ((ch.get("logprobs") or {}).get("content") or [])]
    ok([e["token"] for e in sent] == [e["token"] for e in ent] and [e["logprob"] for e in sent] == [e["logprob"] for e in ent],
       "streamed logprobs = non-streamed")
    # thinking off renders differently but works
    st, r3 = chat(srv, max_tokens=4, chat_template_kwargs={"enable_thinking": False}, temperature=0)
    ok(st == 200 and r3["usage"]["prompt_tokens"] == u["prompt_tokens"] + 4, "enable_thinking false: empty think block in the prompt")
    # tools are rendered into the prompt
    tools = [{"type": "function", "function": {"name": "get_weather", "description": "Weather of a city",
                                               "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]
    st, rt = chat(srv, max_tokens=4, tools=tools, temperature=0)
    ok(st == 200 and rt["usage"]["prompt_tokens"] > u["prompt_tokens"] + 20, "tools are rendered into the prompt")
    st, rn = chat(srv, max_tokens=4, tools=tools, tool_choice="none", temperature=0)
    ok(st == 200 and rn["usage"]["prompt_tokens"] == u["prompt_tokens"], "tool_choice none: no tools in the prompt")
    ok(srv.stop() == 0, "exit code 0 after SIGTERM")


# ------------------------------------------------------------------------------------------------
def proven_run(prompt, n):
    out = subprocess.run([os.path.join(A.build, "proven"), "run", "--model", A.model, "-p", prompt, "--max-tokens", str(n), "--temp", "0"],
                         capture_output=True, timeout=300)
    s = out.stdout.decode("utf-8", "replace")
    assert s.startswith(prompt) and s.endswith("\n"), s[:200]
    return s[len(prompt):-1]


def case_completions():
    srv = Server(A.build, A.model, "--parallel", "2")
    prompt = "def fibonacci(n):\n    "
    st, r = srv.post("/v1/completions", {"prompt": prompt, "max_tokens": 24, "temperature": 0})
    text = r["choices"][0]["text"]
    ok(st == 200 and r["object"] == "text_completion", "completions: 200")
    ref = proven_run(prompt, 24)
    ok(text == ref if r["choices"][0]["finish_reason"] == "length" else ref.startswith(text),
       "greedy completion = `proven run` on the same prompt")
    st, t = srv.post("/tokenize", {"content": prompt})
    st, r2 = srv.post("/v1/completions", {"prompt": t["tokens"], "max_tokens": 24, "temperature": 0})
    ok(r2["choices"][0]["text"] == text, "a token-id prompt gives the same text")
    st, ev = srv.stream("/v1/completions", {"prompt": prompt, "max_tokens": 24, "temperature": 0, "stream": True,
                                            "stream_options": {"include_usage": True}})
    stext, fin, usage = completion_text(ev)
    ok(stext == text and fin == r["choices"][0]["finish_reason"] and usage["completion_tokens"] == r["usage"]["completion_tokens"],
       "streamed completion = non-streamed")
    # stop strings: a piece of the greedy text cuts it there
    long = srv.post("/v1/completions", {"prompt": prompt, "max_tokens": 40, "temperature": 0})[1]["choices"][0]["text"]
    k = len(long) // 2
    stop = long[k:k + 3]
    cut = long[:long.find(stop)]
    st, rs = srv.post("/v1/completions", {"prompt": prompt, "max_tokens": 40, "temperature": 0, "stop": stop})
    ok(rs["choices"][0]["text"] == cut and rs["choices"][0]["finish_reason"] == "stop", "stop string: text cut before it, finish stop")
    st, ev = srv.stream("/v1/completions", {"prompt": prompt, "max_tokens": 40, "temperature": 0, "stop": ["never-appears-here", stop], "stream": True})
    stext, fin, _ = completion_text(ev)
    ok(stext == cut and fin == "stop", "stop string (list) while streaming: nothing of it leaks")
    # seeds
    body = {"prompt": prompt, "max_tokens": 16, "temperature": 1.0, "top_k": 0, "top_p": 1.0}
    a = srv.post("/v1/completions", dict(body, seed=1))[1]["choices"][0]["text"]
    b = srv.post("/v1/completions", dict(body, seed=1))[1]["choices"][0]["text"]
    c = srv.post("/v1/completions", dict(body, seed=2))[1]["choices"][0]["text"]
    ok(a == b, "same seed, same sample")
    ok(a != c, "another seed, another sample")
    # completions logprobs
    st, rl = srv.post("/v1/completions", {"prompt": prompt, "max_tokens": 6, "temperature": 0, "logprobs": 2})
    lp = rl["choices"][0]["logprobs"]
    ok(st == 200 and len(lp["tokens"]) == rl["usage"]["completion_tokens"] and all(len(x) <= 2 for x in lp["top_logprobs"])
       and "".join(lp["tokens"]) == rl["choices"][0]["text"], "completions logprobs: tokens spell the text")
    ok(srv.stop() == 0, "exit code 0 after SIGTERM")


# ------------------------------------------------------------------------------------------------
def case_errors():
    srv = Server(A.build, A.model, "--parallel", "1", "--queue", "1", "--max-body", "65536", "--ctx", "512",
                 "--request-timeout", "2")
    P = "/v1/chat/completions"
    good = {"messages": MSG, "max_tokens": 2}
    cases = [
        (b"{", 400, "invalid JSON"),
        (b"[]", 400, "JSON object"),
        (b"", 400, "invalid JSON"),
        (json.dumps({"messages": "hi"}).encode(), 400, "messages"),
        (json.dumps(dict(good, max_tokens=-1)).encode(), 400, "max_tokens"),
        (json.dumps(dict(good, max_tokens=0)).encode(), 400, "max_tokens"),
        (json.dumps(dict(good, max_tokens=1e300)).encode(), 400, "max_tokens"),
        (b'{"messages":[{"role":"user","content":"x"}],"max_tokens":99999999999999999999999999}', 400, "invalid JSON"),
        (b'{"messages":[{"role":"user","content":"x"}],"temperature":1e999}', 400, "invalid JSON"),
        (json.dumps(dict(good, temperature="hot")).encode(), 400, "temperature"),
        (json.dumps(dict(good, temperature=5)).encode(), 400, "temperature"),
        (json.dumps(dict(good, top_p=-0.5)).encode(), 400, "top_p"),
        (json.dumps(dict(good, seed="x")).encode(), 400, "seed"),
        (json.dumps(dict(good, stream="yes")).encode(), 400, "stream"),
        (json.dumps(dict(good, foo=1)).encode(), 400, "unknown field 'foo'"),
        (b'{"messages":[{"role":"user","content":"\xff\xfe"}]}', 400, "invalid JSON"),
        (b'{"messages":[{"role":"user","content":"x"}],"messages":[]}', 400, "invalid JSON"),
        (b'{"messages":[{"role":"user","content":"a\\u0000b"}]}', 400, "invalid JSON"),
        (json.dumps(dict(good, response_format={"type": "json_object"})).encode(), 400, "not supported"),
        (json.dumps(dict(good, response_format={"type": "json_schema", "json_schema": {}})).encode(), 400, "not supported"),
        (json.dumps(dict(good, n=2)).encode(), 400, "n = 2"),
        (json.dumps(dict(good, tool_choice="required")).encode(), 400, "required"),
        (json.dumps(dict(good, presence_penalty=0.5)).encode(), 400, "presence_penalty"),
        (json.dumps(dict(good, logit_bias={"1": 5})).encode(), 400, "logit_bias"),
        (json.dumps(dict(good, top_logprobs=2)).encode(), 400, "logprobs"),
        (json.dumps(dict(good, stream_options={"include_usage": True})).encode(), 400, "stream"),
        (json.dumps({"messages": [{"role": "bogus", "content": "x"}]}).encode(), 400, "messages"),
        (json.dumps({"messages": [{"role": "user", "content": "x " * 2000}]}).encode(), 400, "context"),
        (json.dumps({"messages": []}).encode(), 400, "messages"),
        (json.dumps({"max_tokens": 3}).encode(), 400, "messages"),
        (json.dumps(dict(good, stop=[1, 2])).encode(), 400, "stop"),
        (json.dumps(dict(good, chat_template_kwargs={"foo": 1})).encode(), 400, "chat_template_kwargs"),
    ]
    for body, want, sub in cases:
        st, hd, data = srv.request("POST", P, body, {"Content-Type": "application/json"})
        try:
            obj = json.loads(data)
        except ValueError:
            obj = None
        ok(st == want and is_error_body(obj, want) and sub.lower() in obj["error"]["message"].lower(),
           "%r -> %d %r" % (body[:60], st, (obj or {}).get("error", {}).get("message", data[:80])))
    for path, body, want, sub in [
        ("/v1/completions", {"prompt": [1, 2, 99999999]}, 400, "token id"),
        ("/v1/completions", {"prompt": [-1]}, 400, "token id"),
        ("/v1/completions", {"prompt": ["a", "b"]}, 400, "one prompt"),
        ("/v1/completions", {"prompt": "x", "echo": True}, 400, "echo"),
        ("/v1/completions", {"prompt": "x", "suffix": "y"}, 400, "suffix"),
        ("/v1/completions", {}, 400, "prompt"),
        ("/detokenize", {"tokens": [151936 * 4]}, 400, "token id"),
        ("/tokenize", {"content": 5}, 400, "content"),
        ("/apply-template", {"messages": [{"role": "user", "content": "x"}], "stream": True}, 400, "unknown field"),
    ]:
        st, obj = srv.post(path, body)
        ok(st == want and is_error_body(obj, want) and sub.lower() in obj["error"]["message"].lower(),
           "%s %r -> %d %r" % (path, body, st, (obj or {}).get("error")))
    # 413: with a Content-Length, and chunked without one
    big = json.dumps({"messages": [{"role": "user", "content": "x" * 100000}]}).encode()
    st, hd, data = srv.request("POST", P, big, {"Content-Type": "application/json"})
    ok(st == 413 and is_error_body(json.loads(data), 413), "a 100 kB body -> 413 (Content-Length)")
    s = raw_socket(srv.port)
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Type: application/json\r\n\r\n")
    try:
        for _ in range(20):
            s.sendall(b"2710\r\n" + b"x" * 10000 + b"\r\n")
        s.sendall(b"0\r\n\r\n")
    except OSError:
        pass
    resp = recv_all(s)
    ok(resp.startswith(b"HTTP/1.1 413"), "a chunked 200 kB body -> 413 (%r)" % resp[:40])
    # headers too large (libmicrohttpd's memory limit)
    st_line = raw_exchange(srv.port, b"GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 100000 + b"\r\n\r\n")
    ok(st_line.startswith(b"HTTP/1.1 431") or st_line.startswith(b"HTTP/1.1 413") or st_line == b"",
       "100 kB of headers refused (%r)" % st_line[:40])
    # slow loris: headers one byte at a time; the connection is closed after --request-timeout (2 s)
    t0 = time.time()
    s = raw_socket(srv.port, timeout=15)
    closed = False
    try:
        for ch in b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 100:
            s.sendall(bytes([ch]))
            time.sleep(0.2)
            if time.time() - t0 > 12:
                break
    except OSError:
        closed = True
    if not closed:
        try:
            closed = s.recv(100) == b""
        except OSError:
            closed = True
    dt = time.time() - t0
    ok(closed and dt < 6, "slow headers: closed after %.1f s (--request-timeout 2)" % dt)
    # slow body: headers complete, the body never finishes
    t0 = time.time()
    s = raw_socket(srv.port, timeout=15)
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"mess")
    try:
        data = s.recv(100)
    except OSError:
        data = b""
    dt = time.time() - t0
    ok(data == b"" and dt < 6, "slow body: closed after %.1f s" % dt)
    # the server still answers
    st, r = srv.post(P, good)
    ok(st == 200, "still serving after the bad clients")
    # 429: one slot, a queue of one, three long requests at once
    results = []

    def long_req():
        try:
            st, ev = srv.stream(P, dict(good, max_tokens=400, stream=True), timeout=60)
            results.append(st)
        except Exception as e:  # noqa
            results.append(str(e))
    ts = [threading.Thread(target=long_req) for _ in range(3)]
    for t in ts:
        t.start()
        time.sleep(0.15)
    for t in ts:
        t.join()
    ok(sorted(results) == [200, 200, 429], "one slot + queue of one: the third request gets 429 (%r)" % results)
    st, r = srv.post(P, dict(good, max_tokens=2))
    ok(st == 200, "served again after the 429")
    ok(srv.stop() == 0, "exit code 0 after SIGTERM")
    # API keys
    srv = Server(A.build, A.model, "--api-key", "sesame", wait=False)
    srv.wait_ready()
    st, obj = srv.post(P, good)
    ok(st == 401 and is_error_body(obj, 401), "no key -> 401")
    st, obj = srv.post(P, good, {"Authorization": "Bearer wrong"})
    ok(st == 401, "wrong key -> 401")
    st, obj = srv.post(P, good, {"Authorization": "Bearer sesame"})
    ok(st == 200, "Bearer key -> 200")
    st, obj = srv.post(P, good, {"X-Api-Key": "sesame"})
    ok(st == 200, "X-Api-Key -> 200")
    st, _, _ = srv.get("/health")
    ok(st == 200, "/health needs no key")
    st, _, _ = srv.get("/metrics")
    ok(st == 401, "/metrics needs the key")
    ok(srv.stop() == 0, "exit code 0 after SIGTERM")


def recv_all(s, limit=1 << 20):
    out = b""
    try:
        while len(out) < limit:
            d = s.recv(65536)
            if not d:
                break
            out += d
    except OSError:
        pass
    return out


def raw_exchange(port, data):
    s = raw_socket(port)
    try:
        s.sendall(data)
    except OSError:
        pass
    return recv_all(s)


# ------------------------------------------------------------------------------------------------
def case_batching():
    """several users at once: each sequence's ids are the ids it gets alone"""
    srv = Server(A.build, A.model, "--parallel", "4", "--prefill-chunk", "16")
    prompts = ["def add(a, b):", "The capital of France is", "Once upon a time", "import numpy as np\n" * 5,
               "SELECT * FROM", "1, 2, 3, 4,"]
    reqs = []
    for i, p in enumerate(prompts):
        reqs.append({"prompt": p, "max_tokens": 24, "temperature": 0.9, "seed": 100 + i, "top_k": 40})
        reqs.append({"prompt": p, "max_tokens": 24, "temperature": 0})
    alone = []
    for r in reqs:
        st, res = srv.post("/v1/completions", dict(r, cache_prompt=False))
        alone.append(res["choices"][0]["text"])
    together = [None] * len(reqs)

    def run(i):
        st, ev = srv.stream("/v1/completions", dict(reqs[i], stream=True))
        together[i] = completion_text(ev)[0]
    ts = [threading.Thread(target=run, args=(i,)) for i in range(len(reqs))]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    ok(together == alone, "12 requests on 4 slots at once: every text = its text alone (%d equal)" % sum(a == b for a, b in zip(alone, together)))
    st, _, data = srv.get("/metrics")
    busy = [ln for ln in data.decode().splitlines() if ln.startswith("proven:busy_slots_per_decode ")]
    ok(busy and float(busy[0].split()[1]) > 1.0, "decode steps carried several slots (%s)" % (busy[0] if busy else "?"))
    ok((metric(srv, "batched_rows_total") or 0) > 24, "rows of several slots went through one forward (%s rows)" % metric(srv, "batched_rows_total"))
    ok(srv.stop() == 0, "exit code 0 after SIGTERM")
    # speculation (n-gram drafts) in every slot: the same texts again
    srv = Server(A.build, A.model, "--parallel", "4", "--prefill-chunk", "16", "--draft", "ngram")
    together = [None] * len(reqs)
    ts = [threading.Thread(target=run, args=(i,)) for i in range(len(reqs))]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    ok(together == alone, "with --draft ngram, at once: every text = its plain text alone")
    ok(metric(srv, "spec_decode_num_draft_tokens_total") > 0, "drafts were verified (%s drafted, %s accepted)" %
       (metric(srv, "spec_decode_num_draft_tokens_total"), metric(srv, "spec_decode_num_accepted_tokens_total")))
    ok(srv.stop() == 0, "exit code 0 after SIGTERM")


# ------------------------------------------------------------------------------------------------
def case_prefix():
    """prefix reuse: identical output with and without a cached prefix; multi-turn chat"""
    srv = Server(A.build, A.model, "--parallel", "2", "--prefill-chunk", "32")
    base = "You are a helpful assistant. " * 20
    st, r1 = srv.post("/v1/completions", {"prompt": base + "Question one?", "max_tokens": 16, "temperature": 0})
    st, r2 = srv.post("/v1/completions", {"prompt": base + "Question two?", "max_tokens": 16, "temperature": 0})
    c2 = r2["usage"]["prompt_tokens_details"]["cached_tokens"]
    ok(c2 > 100, "a shared prefix is reused (%d cached tokens)" % c2)
    st, r3 = srv.post("/v1/completions", {"prompt": base + "Question two?", "max_tokens": 16, "temperature": 0, "cache_prompt": False})
    ok(r3["usage"]["prompt_tokens_details"]["cached_tokens"] == 0, "cache_prompt false: nothing reused")
    ok(r3["choices"][0]["text"] == r2["choices"][0]["text"], "same text with and without the cached prefix")
    st, r4 = srv.post("/v1/completions", {"prompt": base + "Question two?", "max_tokens": 16, "temperature": 0.8, "seed": 5})
    st, r5 = srv.post("/v1/completions", {"prompt": base + "Question two?", "max_tokens": 16, "temperature": 0.8, "seed": 5, "cache_prompt": False})
    ok(r4["choices"][0]["text"] == r5["choices"][0]["text"], "same sampled text with and without the cached prefix")
    # a 10-turn conversation: each turn reuses the previous turns
    msgs = [{"role": "system", "content": "You are terse."}]
    cached = []
    for turn in range(10):
        msgs.append({"role": "user", "content": "Turn %d: tell me something." % turn})
        st, r = srv.post("/v1/chat/completions", {"messages": msgs, "max_tokens": 8, "temperature": 0})
        cached.append((r["usage"]["prompt_tokens_details"]["cached_tokens"], r["usage"]["prompt_tokens"]))
        msgs.append({"role": "assistant", "content": r["choices"][0]["message"]["content"] or ""})
    ok(all(cached[i][0] >= cached[i - 1][1] for i in range(1, 10)), "turns 2..10 reuse at least the previous turn's prompt: %s" % cached)
    ok(srv.stop() == 0, "exit code 0 after SIGTERM")
    # the LRU prefix cache beyond the slots: one slot, two long conversations taking turns
    srv = Server(A.build, A.model, "--parallel", "1", "--cache-entries", "2", "--prefill-chunk", "64")
    pa, pb = "Alpha. " * 60 + "Go:", "Beta gamma. " * 60 + "Go:"
    ra = srv.post("/v1/completions", {"prompt": pa, "max_tokens": 8, "temperature": 0})[1]
    rb = srv.post("/v1/completions", {"prompt": pb, "max_tokens": 8, "temperature": 0})[1]
    ra2 = srv.post("/v1/completions", {"prompt": pa, "max_tokens": 8, "temperature": 0})[1]
    ok(ra2["usage"]["prompt_tokens_details"]["cached_tokens"] >= ra["usage"]["prompt_tokens"] - 1 and
       metric(srv, "prefix_cache_restores_total") >= 1,
       "a prefix evicted from the slot comes back from the LRU cache (%d cached)" % ra2["usage"]["prompt_tokens_details"]["cached_tokens"])
    ok(ra2["choices"][0]["text"] == ra["choices"][0]["text"], "the same text from the restored prefix")
    ok(srv.stop() == 0, "exit code 0 after SIGTERM")


# ------------------------------------------------------------------------------------------------
def slots_idle(srv, timeout=5):
    t0 = time.time()
    while time.time() - t0 < timeout:
        st, _, data = srv.get("/slots")
        if all(s["state"] == "idle" for s in json.loads(data)):
            return time.time() - t0
        time.sleep(0.02)
    return None


def metric(srv, name):
    st, _, data = srv.get("/metrics")
    for ln in data.decode().splitlines():
        if ln.startswith("proven:" + name + " "):
            return float(ln.split()[1])
    return None


def case_cancel():
    srv = Server(A.build, A.model, "--parallel", "1", "--ctx", "4096")
    body = json.dumps({"messages": MSG, "max_tokens": 4000, "stream": True, "temperature": 0.5}).encode()
    s = raw_socket(srv.port)
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
    got = b""
    while got.count(b"data: ") < 3:
        got += s.recv(4096)
    s.close()
    dt = slots_idle(srv)
    ok(dt is not None and dt < 2, "a client gone mid-stream frees its slot (%.2f s)" % (dt or -1))
    ok(metric(srv, "request_cancelled_total") == 1, "counted as cancelled")
    # a non-streaming request whose client leaves
    body = json.dumps({"messages": MSG, "max_tokens": 4000, "temperature": 0.5}).encode()
    s = raw_socket(srv.port)
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
    time.sleep(0.3)
    s.close()
    dt = slots_idle(srv)
    ok(dt is not None and dt < 2, "a client gone while waiting for a whole answer frees its slot (%.2f s)" % (dt or -1))
    t0 = time.time()
    st, r = chat(srv, max_tokens=4)
    ok(st == 200 and time.time() - t0 < 5, "the next request is served at once")
    ok(srv.stop() == 0, "exit code 0 after SIGTERM")


# ------------------------------------------------------------------------------------------------
def wait_busy(srv, timeout=30):
    """until a slot generates (the request reached the engine)"""
    t0 = time.time()
    while time.time() - t0 < timeout:
        st, _, data = srv.get("/slots")
        if any(s["state"] == "generating" for s in json.loads(data)):
            return
        time.sleep(0.01)


def case_drain():
    srv = Server(A.build, A.model, "--parallel", "2", "--ctx", "4096")
    out = {}

    def long_stream():
        st, ev = srv.stream("/v1/chat/completions", {"messages": MSG, "max_tokens": 600, "stream": True, "temperature": 0.5, "seed": 1})
        out["ev"] = ev
    t = threading.Thread(target=long_stream)
    t.start()
    wait_busy(srv)
    srv.proc.send_signal(signal.SIGTERM)
    time.sleep(0.1)
    try:
        st, obj = srv.post("/v1/chat/completions", {"messages": MSG, "max_tokens": 2})
        ok(st == 503 and "shutting down" in obj["error"]["message"], "a new request while draining -> 503")
        st, _, _ = srv.get("/health")
        ok(st == 503, "/health says 503 while draining")
    except OSError as e:
        ok(False, "the server stopped listening while draining: %s" % e)
    t.join()
    ev = out.get("ev", [])
    content, _, _, fin, _ = chat_text(ev)
    ok(ev and ev[-1] == "[DONE]" and fin in ("length", "stop"), "the running stream finished normally (%s)" % fin)
    ok(srv.stop() == 0, "exit code 0 after draining")
    # a drain timeout shorter than the work: the stream ends with an error event, then [DONE]
    srv = Server(A.build, A.model, "--parallel", "1", "--ctx", "4096", "--drain-timeout", "0.3")
    out = {}
    t = threading.Thread(target=lambda: out.update(ev=srv.stream("/v1/chat/completions", {"messages": MSG, "max_tokens": 4000,
                                                                                         "stream": True, "temperature": 0.5})[1]))
    t.start()
    wait_busy(srv)
    srv.proc.send_signal(signal.SIGTERM)
    t.join()
    ev = out.get("ev", [])
    errs = [e for e in ev if isinstance(e, dict) and "error" in e]
    ok(ev and ev[-1] == "[DONE]" and len(errs) == 1 and "shutting down" in errs[0]["error"]["message"],
       "cut by the drain timeout: an error event, then [DONE]")
    ok(srv.stop() == 0, "exit code 0")


def case_fault():
    """a generation that fails midway: the stream ends with an error event, the others go on"""
    env = dict(os.environ, PV_SERVER_FAIL_AFTER="5")
    srv = Server(A.build, A.model, "--parallel", "2", env=env)
    st, ev = srv.stream("/v1/chat/completions", {"messages": MSG, "max_tokens": 50, "stream": True})
    errs = [e for e in ev if isinstance(e, dict) and "error" in e]
    content = chat_text(ev)[0]
    ok(st == 200 and ev[-1] == "[DONE]" and len(errs) == 1 and errs[0]["error"]["code"] == 500 and
       "injected fault" in errs[0]["error"]["message"] and len(content) > 0,
       "a stream that fails after 5 tokens: content, then one error event, then [DONE]")
    ok(not any(isinstance(e, dict) and e.get("choices") and e["choices"][0].get("finish_reason") for e in ev),
       "no finish_reason claims the failed stream ended well")
    st, obj = chat(srv, max_tokens=50)
    ok(st == 500 and is_error_body(obj, 500) and "injected fault" in obj["error"]["message"], "not streamed: 500 with the error")
    st, r = chat(srv, max_tokens=3)
    ok(st == 200 and r["usage"]["completion_tokens"] <= 3, "a request that ends before the fault is served")
    ok(metric(srv, "request_failure_total") == 2, "counted as failures")
    ok(srv.stop() == 0, "exit code 0 after SIGTERM")


def case_hybrid():
    """a hybrid (Gated DeltaNet) model: batching, prefix reuse and speculation give the same ids;
    a chat's next turn rolls back to the checkpoint at the end of the previous prompt"""
    base = ["--parallel", "3", "--prefill-chunk", "32", "--exact-prefill", "1"]
    srv = Server(A.build, A.model, *base)
    rnd = random.Random(5)
    prompts = ["".join(rnd.choice("abcdefgh ") for _ in range(40 + 50 * i)) for i in range(5)]
    reqs = [{"prompt": p, "max_tokens": 20, "temperature": 0.8, "seed": i, "top_k": 30} for i, p in enumerate(prompts)]
    reqs += [{"prompt": p, "max_tokens": 20, "temperature": 0} for p in prompts]
    alone = [srv.post("/v1/completions", dict(r, cache_prompt=False))[1]["choices"][0]["text"] for r in reqs]
    together = [None] * len(reqs)

    def run(i):
        together[i] = completion_text(srv.stream("/v1/completions", dict(reqs[i], stream=True))[1])[0]
    ts = [threading.Thread(target=run, args=(i,)) for i in range(len(reqs))]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    ok(together == alone, "hybrid: 10 requests on 3 slots at once = each alone (%d equal)" % sum(a == b for a, b in zip(alone, together)))
    # the next turn of a conversation: its prompt extends the previous prompt and answer
    p1 = prompts[3]
    st, r1 = srv.post("/v1/completions", {"prompt": p1, "max_tokens": 12, "temperature": 0})
    p2 = p1 + r1["choices"][0]["text"] + " and then " + prompts[0]
    st, r2 = srv.post("/v1/completions", {"prompt": p2, "max_tokens": 12, "temperature": 0})
    c2 = r2["usage"]["prompt_tokens_details"]["cached_tokens"]
    ok(c2 >= r1["usage"]["prompt_tokens"], "hybrid: the next turn reuses at least the previous prompt (%d of %d cached)" %
       (c2, r2["usage"]["prompt_tokens"]))
    st, r3 = srv.post("/v1/completions", {"prompt": p2, "max_tokens": 12, "temperature": 0, "cache_prompt": False})
    ok(r3["choices"][0]["text"] == r2["choices"][0]["text"], "hybrid: the same text without the cached prefix")
    ok(srv.stop() == 0, "exit code 0 after SIGTERM")
    srv = Server(A.build, A.model, *base, "--draft", "ngram")
    together = [None] * len(reqs)
    ts = [threading.Thread(target=run, args=(i,)) for i in range(len(reqs))]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    ok(together == alone, "hybrid with --draft ngram (snapshot rollback) at once = plain alone")
    ok(srv.stop() == 0, "exit code 0 after SIGTERM")


# ------------------------------------------------------------------------------------------------
def case_soak():
    """32 clients, some killed mid-stream, a restart: no lost or corrupted answer; memory returns"""
    rnd = random.Random(1234)
    prompts = ["Tell me about %s." % w for w in ("cats", "dogs", "the sea", "C", "rust", "cheese", "Paris", "tea")]
    variants = [(p, seed) for p in prompts for seed in (1, 2)]
    expect = {}
    lock = threading.Lock()
    state = {"srv": None, "bad": [], "ok": 0, "killed": 0, "retried": 0}

    def body(p, seed, stream):
        return {"messages": [{"role": "user", "content": p}], "max_tokens": 12, "temperature": 0.8, "seed": seed, "stream": stream}

    def one(p, seed, stream, kill):
        # retries for up to 90 s: the restart below must outlast them even when the new server's
        # start is slow (ASan, a busy 2-core machine: 100 tries of 0.1 s once gave up in CI)
        t_end = time.time() + 90
        while time.time() < t_end:
            srv = state["srv"]
            try:
                if kill:
                    b = json.dumps(body(p, seed, True)).encode()
                    s = raw_socket(srv.port)
                    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(b) + b)
                    s.recv(300)
                    s.close()
                    with lock:
                        state["killed"] += 1
                    return
                if stream:
                    st, ev = srv.stream("/v1/chat/completions", body(p, seed, True), timeout=120)
                    if st == 200:
                        if ev[-1] != "[DONE]" or any(isinstance(e, dict) and "error" in e for e in ev):
                            raise OSError("a cut stream: %r" % ev[-2:])
                        text = chat_text(ev)[0]
                else:
                    st, r = srv.post("/v1/chat/completions", body(p, seed, False), timeout=120)
                    if st == 200:
                        text = r["choices"][0]["message"]["content"]
                if st in (503, 429):
                    raise OSError("%d" % st)
                if st != 200:
                    with lock:
                        state["bad"].append("status %d" % st)
                    return
                with lock:
                    if expect.setdefault((p, seed), text) != text:
                        state["bad"].append("%r seed %d: %r != %r" % (p, seed, text, expect[(p, seed)]))
                    state["ok"] += 1
                return
            except (OSError, ConnectionError, http_exc()) as e:  # restarting: try again
                with lock:
                    state["retried"] += 1
                time.sleep(0.1)
        with lock:
            state["bad"].append("gave up on %r" % p)

    def client(n, jobs):
        for (p, seed, stream, kill) in jobs:
            one(p, seed, stream, kill)

    srv = Server(A.build, A.model, "--parallel", "4", "--queue", "64")
    state["srv"] = srv
    for (p, seed) in variants:  # warm-up and the expected texts
        one(p, seed, False, False)
    time.sleep(0.3)
    base = srv.rss_kb()

    def wave(n_per_client):
        jobs = [[(*rnd.choice(variants), rnd.random() < 0.5, rnd.random() < 0.1) for _ in range(n_per_client)] for _ in range(32)]
        ts = [threading.Thread(target=client, args=(i, jobs[i])) for i in range(32)]
        for t in ts:
            t.start()
        return ts

    ts = wave(5)
    for t in ts:
        t.join()
    time.sleep(0.5)
    after = srv.rss_kb()
    if os.environ.get("PV_SANITIZED") == "1":
        skip("the memory baseline under AddressSanitizer (its quarantine keeps freed memory; LeakSanitizer checks the "
             "exit instead): %d kB -> %d kB" % (base, after))
    else:
        ok(after <= base * 1.25 + 24 * 1024, "memory back near its baseline after 160 requests: %d kB -> %d kB" % (base, after))
    # a restart while 32 clients are busy
    ts = wave(5)
    time.sleep(1.0)
    ok(srv.stop() == 0, "drained and exited 0 under load")
    srv2 = Server(A.build, A.model, "--parallel", "4", "--queue", "64")
    state["srv"] = srv2
    for t in ts:
        t.join()
    ok(not state["bad"], "0 lost or corrupted answers (%d served, %d killed on purpose, %d retries): %s" %
       (state["ok"], state["killed"], state["retried"], state["bad"][:3]))
    dt = slots_idle(srv2)
    ok(dt is not None, "every slot idle at the end")
    ok(srv2.stop() == 0, "exit code 0")


def http_exc():
    import http.client
    return http.client.HTTPException


# ------------------------------------------------------------------------------------------------
def case_real():
    """the real Qwen2.5-Coder-0.5B: greedy chat = `proven run` on the rendered prompt; tool calls"""
    srv = Server(A.build, A.model, "--parallel", "2")
    msgs = [{"role": "user", "content": "Write a C function that returns the larger of two ints."}]
    n = 16 if A.quick else 48
    st, r = srv.post("/v1/chat/completions", {"messages": msgs, "max_tokens": n, "temperature": 0}, timeout=600)
    st2, a = srv.post("/apply-template", {"messages": msgs})
    ref = proven_run(a["prompt"], n)
    got = r["choices"][0]["message"]["content"]
    ok(st == 200 and got == ref.strip(), "greedy chat answer = `proven run` on the rendered prompt")
    u = r["usage"]
    ok(u["total_tokens"] == u["prompt_tokens"] + u["completion_tokens"] and u["completion_tokens"] <= n, "usage adds up")
    tools = [{"type": "function", "function": {"name": "get_weather", "description": "Get the current weather in a city",
                                               "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                              "required": ["city"]}}}]
    q = [{"role": "user", "content": "What is the weather like in Paris right now?"}]
    st, r = srv.post("/v1/chat/completions", {"messages": q, "tools": tools, "max_tokens": 64, "temperature": 0})
    m = r["choices"][0]["message"]
    calls = m.get("tool_calls") or []
    ok(st == 200 and r["choices"][0]["finish_reason"] == "tool_calls" and len(calls) == 1, "a tool call: finish_reason tool_calls")
    if calls:
        c = calls[0]
        ok(c["type"] == "function" and c["function"]["name"] == "get_weather" and c["id"], "tool call: id, type, name")
        ok(json.loads(c["function"]["arguments"]).get("city") == "Paris", "tool call arguments are a JSON string: %s" % c["function"]["arguments"])
        ok(not (m.get("content") or "").count("<tool_call>"), "no tool-call markup left in content")
    if A.quick:
        ok(srv.stop() == 0, "exit code 0 after SIGTERM")
        return
    st, ev = srv.stream("/v1/chat/completions", {"messages": q, "tools": tools, "max_tokens": 64, "temperature": 0, "stream": True})
    content, _, scalls, fin, _ = chat_text(ev)
    ok(fin == "tool_calls" and [x["function"] for x in scalls] == [x["function"] for x in calls] and all("index" in x for x in scalls),
       "streamed tool call deltas (with index) = the non-streamed call")
    # the tool's answer goes back in and the model uses it
    q2 = q + [{"role": "assistant", "content": None, "tool_calls": calls},
              {"role": "tool", "tool_call_id": calls[0]["id"] if calls else "x", "content": "{\"temperature\": 21, \"sky\": \"clear\"}"}]
    st, r = srv.post("/v1/chat/completions", {"messages": q2, "tools": tools, "max_tokens": 40, "temperature": 0})
    ok(st == 200 and "21" in (r["choices"][0]["message"]["content"] or ""), "the answer uses the tool result: %r" % r["choices"][0]["message"]["content"])
    # stop strings on real text
    st, r = srv.post("/v1/chat/completions", {"messages": msgs, "max_tokens": 48, "temperature": 0, "stop": ["int"]})
    ok(st == 200 and "int" not in r["choices"][0]["message"]["content"] and r["choices"][0]["finish_reason"] == "stop", "stop string on real text")
    ok(srv.stop() == 0, "exit code 0 after SIGTERM")


# ------------------------------------------------------------------------------------------------
HERE = os.path.dirname(os.path.abspath(__file__))
OPENAI = {"openai": "openai==3.57.0"}
SCHEMATHESIS = {"schemathesis": "schemathesis==4.32.5"}


def case_openai():
    """the official openai client (pip, in the build directory's venv)"""
    py = venv_python(A.build, OPENAI)
    if not py:
        return
    srv = Server(A.build, A.model, "--parallel", "2")
    rc = relay([py, os.path.join(HERE, "openai_test.py"), str(srv.port)] + (["--real"] if A.real else []), 600)
    ok(rc == 0, "openai_test.py exit code %d" % rc)
    ok(srv.stop() == 0, "exit code 0 after SIGTERM")


def case_schemathesis():
    """schemathesis generates requests from docs/openapi.yaml: no 5xx, every status and body as documented,
    every schema-violating request refused"""
    py = venv_python(A.build, SCHEMATHESIS)
    if not py:
        return
    srv = Server(A.build, A.model, "--parallel", "2", "--ctx", "160", "--queue", "256")
    spec = os.path.join(os.path.dirname(os.path.dirname(HERE)), "docs", "openapi.yaml")
    cmd = [os.path.join(os.path.dirname(py), "schemathesis"), "run", spec, "--url", "http://127.0.0.1:%d" % srv.port,
           "--checks", "not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance,"
           "negative_data_rejection", "--max-examples", "6", "--seed", "1", "--generation-allow-x00", "false", "--no-color",
           "--workers", "1", "--phases", "coverage,fuzzing", "--suppress-health-check", "all", "--request-timeout", "60"]
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=900, cwd=srv.dir)
    out = r.stdout.decode("utf-8", "replace")
    summary = [ln for ln in out.splitlines() if "generated" in ln or ln.startswith("=") or "❌" in ln or "🚫" in ln]
    if r.returncode:
        print(out[-6000:])
    ok(r.returncode == 0, "schemathesis: %s" % " | ".join(x.strip("= ") for x in summary[-3:]))
    ok(srv.stop() == 0, "exit code 0 after SIGTERM (after the schemathesis run)")


def case_page():
    """the chat page in headless Chromium: it streams an answer and shows its receipt"""
    import browser
    exe = browser.find_chromium()
    if not exe:
        skip("no Chromium (apt-get install chromium): the chat page was not tried in a browser")
        return
    srv = Server(A.build, A.model, "--parallel", "1")
    b = browser.Browser(exe)
    try:
        b.call("Page.enable")
        q = "Write a C function that adds two integers." if A.real else "Hello there"
        b.call("Page.navigate", url="http://127.0.0.1:%d/?q=%s&max=%d&temp=0" % (srv.port, urllib.parse.quote(q), 32 if A.real else 64))
        state = b.wait("document.body && document.body.dataset.state === 'done' && 'done'", 300)
        answer = b.eval("document.querySelector('.assistant .answer') && document.querySelector('.assistant .answer').textContent") or ""
        receipt = b.eval("document.querySelector('.assistant .receipt') && document.querySelector('.assistant .receipt').textContent") or ""
        model = b.eval("document.getElementById('model').textContent")
        shot = os.path.join(os.path.abspath(A.build), "tests", "page-%s.png" % ("real" if A.real else "fixture"))
        b.screenshot(shot)
        ok(state == "done", "the page finished its answer")
        ok(len(answer) > 0, "the answer streamed into the page (%d characters)" % len(answer))
        ok(re.search(r"\d+ tokens", receipt) and "tok/s" in receipt and "cached" in receipt and "error" not in receipt,
           "the receipt: %s" % receipt)
        ok(bool(model), "the page shows the model: %s" % model)
        print("screenshot: " + shot)
        # a second message in the same conversation: the cache holds the first turn
        b.eval("document.getElementById('input').value = 'And subtract?'; document.getElementById('form').requestSubmit(); 1")
        b.wait("document.querySelectorAll('.assistant').length == 2 && document.body.dataset.state === 'done' && 'done'", 300)
        receipt2 = b.eval("document.querySelectorAll('.assistant .receipt')[1].textContent") or ""
        m = re.search(r"\((\d+) cached\)", receipt2)
        ok(m and int(m.group(1)) > 0, "the second turn reuses the first: %s" % receipt2)
        b.screenshot(shot)
    finally:
        b.close()
    ok(srv.stop() == 0, "exit code 0 after SIGTERM")


CASES = {k[5:]: v for k, v in globals().items() if k.startswith("case_")}

if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("case", choices=sorted(CASES))
    ap.add_argument("--real", action="store_true", help="the model is the real Qwen2.5-Coder-0.5B")
    ap.add_argument("--quick", action="store_true", help="fewer tokens (under the sanitizers)")
    A = ap.parse_args()
    try:
        CASES[A.case]()
    except Exception as e:  # a crash is a failure with its traceback
        import traceback
        traceback.print_exc()
        ok(False, "%s raised %s: %s" % (A.case, type(e).__name__, e))
    done()
