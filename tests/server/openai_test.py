#!/usr/bin/env python3
"""openai_test.py: the official `openai` Python client against a running proven-server (run in
the build directory's venv by server_test.py's `openai` and `real` cases). Prints ok/FAIL lines.

usage: openai_test.py PORT [--real]
"""
import json
import sys

import openai

port = int(sys.argv[1])
real = "--real" in sys.argv
fails = 0


def ok(cond, msg):
    global fails
    print(("ok " if cond else "FAIL ") + msg, flush=True)
    fails += 0 if cond else 1


c = openai.OpenAI(base_url="http://127.0.0.1:%d/v1" % port, api_key="unused", max_retries=0, timeout=300)
model = c.models.list().data[0].id
ok(bool(model), "models.list: %s" % model)
msgs = [{"role": "user", "content": "Write a C function that returns the larger of two ints."}]
r = c.chat.completions.create(model=model, messages=msgs, max_tokens=24, temperature=0)
ch = r.choices[0]
ok(r.object == "chat.completion" and ch.message.role == "assistant" and isinstance(ch.message.content, str), "chat.completions.create")
ok(r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens, "usage adds up")
chunks = list(c.chat.completions.create(model=model, messages=msgs, max_tokens=24, temperature=0, stream=True,
                                        stream_options={"include_usage": True}))
text = "".join((k.choices[0].delta.content or "") for k in chunks if k.choices)
fin = [k.choices[0].finish_reason for k in chunks if k.choices and k.choices[0].finish_reason]
ok(text.strip() == (ch.message.content or "").strip() and fin == [ch.finish_reason], "streamed = not streamed (%d chunks)" % len(chunks))
ok(chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == r.usage.completion_tokens, "stream usage chunk")
a = c.chat.completions.create(model=model, messages=msgs, max_tokens=12, temperature=0.9, seed=11).choices[0].message.content
b = c.chat.completions.create(model=model, messages=msgs, max_tokens=12, temperature=0.9, seed=11).choices[0].message.content
ok(a == b, "seed: the same sample twice")
s = c.chat.completions.create(model=model, messages=msgs, max_tokens=40, temperature=0, stop=["int", "\n\n"])
ok(s.choices[0].finish_reason in ("stop", "length") and "int" not in (s.choices[0].message.content or ""), "stop strings")
comp = c.completions.create(model=model, prompt="def fibonacci(n):", max_tokens=16, temperature=0)
ok(comp.object == "text_completion" and isinstance(comp.choices[0].text, str) and comp.usage.completion_tokens <= 16, "completions.create")
cs = "".join(k.choices[0].text for k in c.completions.create(model=model, prompt="def fibonacci(n):", max_tokens=16, temperature=0,
                                                             stream=True) if k.choices)
ok(cs == comp.choices[0].text, "completions stream = not streamed")
lp = c.chat.completions.create(model=model, messages=msgs, max_tokens=5, temperature=0, logprobs=True, top_logprobs=2)
ok(lp.choices[0].logprobs is not None and len(lp.choices[0].logprobs.content) == lp.usage.completion_tokens
   and all(len(t.top_logprobs) == 2 for t in lp.choices[0].logprobs.content), "logprobs / top_logprobs")
try:
    c.chat.completions.create(model=model, messages=msgs, max_tokens=5, response_format={"type": "json_object"})
    ok(False, "response_format json_object is refused")
except openai.BadRequestError as e:
    ok(e.status_code == 400 and "not supported" in str(e), "response_format json_object -> BadRequestError: %s" % e.message[:80])
try:
    c.chat.completions.create(model=model, messages=msgs, max_tokens=5, n=2)
    ok(False, "n=2 is refused")
except openai.BadRequestError as e:
    ok(e.status_code == 400, "n=2 -> BadRequestError")
tools = [{"type": "function", "function": {"name": "get_weather", "description": "Get the current weather in a city",
                                           "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                          "required": ["city"]}}}]
q = [{"role": "user", "content": "What is the weather like in Paris right now?"}]
t = c.chat.completions.create(model=model, messages=q, tools=tools, max_tokens=64, temperature=0)
if real:
    calls = t.choices[0].message.tool_calls or []
    ok(t.choices[0].finish_reason == "tool_calls" and len(calls) == 1 and calls[0].function.name == "get_weather"
       and json.loads(calls[0].function.arguments).get("city") == "Paris", "tools: a get_weather(Paris) call")
    st = list(c.chat.completions.create(model=model, messages=q, tools=tools, max_tokens=64, temperature=0, stream=True))
    deltas = [tc for k in st if k.choices for tc in (k.choices[0].delta.tool_calls or [])]
    ok(len(deltas) == 1 and deltas[0].index == 0 and deltas[0].function.name == "get_weather" and deltas[0].id,
       "tools streamed as a delta with index, id and name")
    q2 = q + [{"role": "assistant", "content": None, "tool_calls": [tc.model_dump() for tc in calls]},
              {"role": "tool", "tool_call_id": calls[0].id if calls else "x", "content": "{\"temperature\": 21}"}]
    f = c.chat.completions.create(model=model, messages=q2, tools=tools, max_tokens=40, temperature=0)
    ok("21" in (f.choices[0].message.content or ""), "the tool's result comes back in the answer")
else:
    ok(t.choices[0].finish_reason in ("stop", "length", "tool_calls"), "a request with tools is served")
sys.exit(1 if fails else 0)
