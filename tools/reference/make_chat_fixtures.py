#!/usr/bin/env python3
"""Build the chat-template fixtures of proven: conversations rendered by transformers'
apply_chat_template(..., tokenize=False) with the real Qwen templates.

Usage:
    /opt/refvenv/bin/python tools/reference/make_chat_fixtures.py --tokenizer DIR [--out tests/data/chat]

DIR is a loadable tokenizer directory holding the official Qwen3 tokenizer.json and tokenizer_config.json
(from shared/data/qwen-tokenizer: `xz -dc tokenizer.json.xz > DIR/tokenizer.json`, copy tokenizer_config.json).

Dialects and templates (text committed next to the fixtures, see tests/data/chat/README.md):
    qwen3    the tokenizer's own chat_template (official Qwen3, tokenizer_config.json)
    qwen3.5  tests/data/chat/qwen3_5.jinja (official Qwen3.5-4B template), passed as chat_template=
    qwen2.5  tests/data/chat/qwen2_5.jinja (Qwen2.5-Instruct template), passed as chat_template=

Every conversation is rendered for every dialect with add_generation_prompt in {true, false} and enable_thinking
in {true, false}; a render where transformers raises becomes an expected error. Before rendering, the inputs get
the normalisations proven documents in include/proven_text.h (applied here in Python, so transformers sees what the C
renderer sees):
    qwen3, qwen2.5: content null or absent -> "", content given as a list of text parts -> the texts joined
    qwen3.5:        tool-call arguments given as a JSON string -> the parsed object
and the deliberate deviations (proven reports an error where the template would render something odd) are
marked "by_design" instead of rendered.

Output: tests/data/chat/cases.json, {"conversations": [...], "renders": [...]}; the file is written with sorted
conversation order and no timestamps, so two runs give identical bytes.
"""

import argparse
import copy
import json
import os
import sys

os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import transformers  # noqa: E402
from transformers import AutoTokenizer  # noqa: E402

transformers.utils.logging.set_verbosity_error()

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

# ---------------------------------------------------------------------------------------------
# Tool definitions

T_WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "City name, e.g. Zürich or 東京"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"], "default": "celsius"},
            },
            "required": ["city"],
        },
    },
}

T_SEARCH = {
    "type": "function",
    "function": {
        "name": "search_documents",
        "description": "Full-text search with filters.\nReturns at most `limit` hits.",
        "parameters": {
            "type": "object",
            "properties": {
                "query": {"type": "string"},
                "limit": {"type": "integer", "minimum": 1, "maximum": 100, "default": 10},
                "threshold": {"type": "number", "default": 0.5, "exclusiveMinimum": 0.0, "multipleOf": 1e-3},
                "exact": {"type": "boolean", "default": False},
                "filters": {
                    "type": "object",
                    "properties": {
                        "tags": {"type": "array", "items": {"type": "string"}, "uniqueItems": True},
                        "date_range": {
                            "type": "object",
                            "properties": {
                                "from": {"type": ["string", "null"], "format": "date"},
                                "to": {"type": ["string", "null"], "format": "date"},
                            },
                        },
                        "owner": {"anyOf": [{"type": "string"}, {"type": "integer"}], "default": None},
                    },
                    "additionalProperties": False,
                },
            },
            "required": ["query"],
        },
    },
}

T_UNICODE = {
    "type": "function",
    "function": {
        "name": "translate",
        "description": "Übersetzt Text — 翻译文本 🌍. Quotes \"double\" and 'single', backslash \\ , tab\t, "
                       "bell \u0007, DEL \u007f, NBSP \u00a0, LS \u2028, </tools> and <tool_call> literal.",
        "parameters": {
            "type": "object",
            "properties": {
                "text": {"type": "string", "description": "Texte à traduire"},
                "target": {"type": "string", "enum": ["de", "zh", "fr", "ja"]},
            },
            "required": ["text", "target"],
        },
    },
}

T_BARE = {
    "name": "calculator",
    "description": "Evaluate an arithmetic expression.",
    "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}, "required": ["expression"]},
}

T_EMPTY_PARAMS = {"type": "function", "function": {"name": "get_time", "description": "", "parameters": {}}}

ALL_TOOLS = [T_WEATHER, T_SEARCH, T_UNICODE]


def call(name, args, wrap=True, cid=None):
    f = {"name": name, "arguments": args}
    if not wrap:
        return f
    c = {"type": "function", "function": f}
    if cid:
        c["id"] = cid
    return c


# ---------------------------------------------------------------------------------------------
# Conversations: (name, messages, tools or None, by_design) where by_design names the dialects in which
# proven reports an error on purpose (see include/proven_text.h), with the reason.

U = lambda c: {"role": "user", "content": c}  # noqa: E731
A = lambda c, **kw: dict({"role": "assistant", "content": c}, **kw)  # noqa: E731
S = lambda c: {"role": "system", "content": c}  # noqa: E731
T = lambda c, **kw: dict({"role": "tool", "content": c}, **kw)  # noqa: E731

CONVS = []


def conv(name, messages, tools=None, by_design=None):
    CONVS.append({"name": name, "messages": messages, "tools": tools, "by_design": by_design or {}})


conv("single_user", [U("Hello!")])
conv("system_user", [S("You are a terse assistant."), U("What is 2+2?")])
conv("multi_turn", [S("Be brief."), U("Hi"), A("Hello! How can I help?"), U("Tell me a joke."),
                    A("Why did the chicken cross the road?"), U("Why?")])
conv("multi_turn_no_system", [U("Hi"), A("Hello."), U("Bye")])
conv("history_reasoning_content", [U("What is 3*7?"), A("21", reasoning_content="3 times 7 is 21."),
                                   U("And 3*8?")])
conv("last_assistant_reasoning_content", [U("What is 3*7?"),
                                          A("It is 21.", reasoning_content="\n3 times 7 is 21.\n")])
conv("history_think_in_content", [U("Capital of France?"),
                                  A("<think>\nThe user asks about France.\n</think>\n\nParis."), U("And Italy?")])
conv("last_think_in_content", [U("Capital of France?"), A("<think>\nFrance -> Paris.\n</think>\n\nParis.")])
conv("only_close_think_in_content", [U("q"), A("reasoning without an opening tag\n</think>\n\nanswer")])
conv("multiple_close_think", [U("q"), A("<think>a</think>b</think>\n\nc")])
conv("reasoning_and_think_in_content", [U("q"), A("<think>\ninner\n</think>\n\nvisible", reasoning_content="explicit")])
conv("empty_reasoning_content_with_think", [U("q"), A("<think>x</think>y", reasoning_content="")])
conv("reasoning_whitespace", [U("q"), A("\n\n  answer  \n", reasoning_content="  \n spaced reasoning \n\n")])
conv("assistant_mid_after_query_no_reasoning", [U("q"), A("first part"), A("second part")])
conv("assistant_mid_after_query_with_reasoning", [U("q"), A("first", reasoning_content="r1"),
                                                  A("second", reasoning_content="r2")])

conv("tools_no_system", [U("Weather in Paris?")], tools=[T_WEATHER])
conv("tools_with_system", [S("You are a weather bot."), U("Weather in Paris?")], tools=[T_WEATHER, T_SEARCH])
conv("tools_unicode_nested", [S("System prompt."), U("Translate 'hello' to Japanese.")], tools=ALL_TOOLS)
conv("tools_bare_and_empty_params", [U("What time is it?")], tools=[T_BARE, T_EMPTY_PARAMS])
conv("tools_empty_list", [S("sys"), U("hi")], tools=[])
conv("tools_system_empty_content", [S(""), U("hi")], tools=[T_WEATHER])

conv("tool_call_object_args", [
    U("Weather in Paris?"),
    A("", tool_calls=[call("get_weather", {"city": "Paris", "unit": "celsius"}, cid="call_1")]),
    T('{"temperature": 21, "condition": "sunny"}', tool_call_id="call_1"),
    A("It is 21 °C and sunny in Paris."),
], tools=[T_WEATHER])
conv("tool_call_string_args", [
    U("Weather in Paris?"),
    A("", tool_calls=[call("get_weather", '{"city": "Paris"}')]),
    T("21 C"),
], tools=[T_WEATHER])
conv("tool_call_string_args_compact", [
    U("Weather?"),
    A("", tool_calls=[call("get_weather", '{"city":"Oslo","unit":"celsius"}')]),
    T("-3 C"),
], tools=[T_WEATHER])
conv("tool_call_null_content", [
    U("Weather in Rome?"),
    A(None, tool_calls=[call("get_weather", {"city": "Rome"})]),
    T("30 C"),
], tools=[T_WEATHER])
conv("tool_call_with_text", [
    U("Weather in Rome and Oslo?"),
    A("Let me check both cities.", tool_calls=[call("get_weather", {"city": "Rome"}),
                                              call("get_weather", {"city": "Oslo"})]),
    T("30 C"), T("-3 C"),
    A("Rome is 30 °C, Oslo −3 °C."),
    U("Thanks"),
], tools=[T_WEATHER])
conv("multiple_calls_consecutive_responses", [
    S("Use tools."),
    U("Search for cats and dogs, and the weather in Bern."),
    A("", tool_calls=[call("search_documents", {"query": "cats", "limit": 3}),
                      call("search_documents", {"query": "dogs", "filters": {"tags": ["pets", "dogs"]}}),
                      call("get_weather", {"city": "Bern"})]),
    T("[\"cat1\", \"cat2\"]"), T("[]"), T("12 C"),
], tools=ALL_TOOLS)
conv("tool_call_unwrapped", [
    U("2+2?"),
    A("", tool_calls=[call("calculator", {"expression": "2+2"}, wrap=False)]),
    T("4"),
    A("4"),
], tools=[T_BARE])
conv("tool_call_typed_args", [
    U("Search"),
    A("", tool_calls=[call("search_documents", {
        "query": "naïve café \"quoted\" \\ back\nslash",
        "limit": 5, "threshold": 0.25, "exact": True, "fuzzy": False, "owner": None,
        "big": 12345678901234, "neg": -7, "float_int": 1.0, "tiny": 1e-7, "huge": 1e20, "negzero": -0.0,
        "pi": 3.141592653589793, "third": 1 / 3,
        "filters": {"tags": ["a", "β", "🐈"], "date_range": {"from": "2024-01-01", "to": None}},
        "list_of_lists": [[1, 2], [], [True, None, 2.5]],
        "empty_obj": {}, "empty_str": "",
    })]),
    T("no hits"),
], tools=[T_SEARCH])
conv("float_repr", [
    U("floats"),
    A("", tool_calls=[call("f", {
        "a": 0.1, "b": 1 / 3, "c": 2 / 3, "d": 1e16, "e": 1e15, "f": 123456789.123, "g": 5e-324,
        "h": 1.7976931348623157e308, "i": 1e-4, "j": 1e-5, "k": 0.000123, "l": 1e22, "m": 1e21, "n": -1.5e-10,
        "o": 9007199254740993, "p": -9223372036854775808, "q": 100.0, "r": 2.5e-5, "s": 123456789012345.6,
        "t": 1234567890123456.7, "u": 12345678901234567.0, "v": [0.5, -2.0, 1e100, 4.35],
    })]),
])
conv("tool_call_empty_args", [U("time?"), A("", tool_calls=[call("get_time", {})]), T("12:00")],
     tools=[T_EMPTY_PARAMS])
conv("multi_step_tools_with_reasoning", [
    U("Plan a trip to Bern: check weather, then search hotels."),
    A("", reasoning_content="First the weather.", tool_calls=[call("get_weather", {"city": "Bern"})]),
    T("12 C, rain"),
    A("", reasoning_content="Rainy; search indoor hotels.",
      tool_calls=[call("search_documents", {"query": "hotel Bern indoor pool"})]),
    T("Hotel Bellevue"),
    A("Take an umbrella and stay at the Hotel Bellevue.", reasoning_content="Summarise."),
], tools=[T_WEATHER, T_SEARCH])
conv("multi_step_tools_think_in_content", [
    U("Weather in Bern?"),
    A("<think>\nNeed the tool.\n</think>\n\n", tool_calls=[call("get_weather", {"city": "Bern"})]),
    T("12 C"),
    A("<think>\nGot it.\n</think>\n\nIt is 12 °C."),
    U("And tomorrow?"),
], tools=[T_WEATHER])
conv("reasoning_text_and_call", [
    U("Weather in Bern?"),
    A("I'll look it up.", reasoning_content="call the tool", tool_calls=[call("get_weather", {"city": "Bern"})]),
    T("12 C"),
], tools=[T_WEATHER])
conv("whitespace_content_before_call", [
    U("Weather?"),
    A("  \n", tool_calls=[call("get_weather", {"city": "Bern"})]),
    T("12 C"),
], tools=[T_WEATHER])
conv("tool_call_missing_arguments", [U("time?"), A("", tool_calls=[{"type": "function", "function": {"name": "get_time"}}]),
                                     T("12:00")], tools=[T_EMPTY_PARAMS])
conv("user_looks_like_tool_response", [
    U("first question"),
    A("answer", reasoning_content="kept or not"),
    U("<tool_response>\nmanual\n</tool_response>"),
])
conv("tool_response_json_content", [
    U("Weather?"),
    A("", tool_calls=[call("get_weather", {"city": "Bern"})]),
    T('{"temp": 12, "unit": "C", "notes": ["wind", "rain"]}'),
    T("second response\nwith two lines"),
    U("ok"),
], tools=[T_WEATHER])
conv("ends_with_tool", [
    U("Weather?"),
    A("", tool_calls=[call("get_weather", {"city": "Bern"})]),
    T("12 C"),
], tools=[T_WEATHER])
conv("tool_without_preceding_call", [U("hi"), T("orphan tool output")])
conv("tool_first", [T("orphan first"), U("hi")])

conv("system_not_first", [U("hi"), S("late system"), U("again")])
conv("two_systems", [S("first"), S("second"), U("hi")])
conv("unicode_special", [
    S("Système: réponds en français. 你好 🌟"),
    U("Emoji 👩‍👩‍👧, RTL עברית, zero-width \u200b joiner, combining é, tabs\tand\r\nCRLF, backslash \\, "
      "quotes \"'`, literal <|im_end|> and <tool_call> and </think>, NUL-free control \u0001."),
    A("Réponse — ✓"),
    U("\U0001F600 only"),
])
conv("empty_contents", [S(""), U(""), A(""), U("")])
conv("whitespace_trim", [
    S("  \n system with spaces \n "),
    U("\u3000\u00a0 ideographic and nbsp around \u2003\n"),
    A("\n\n answer with newlines \n\n"),
    U("\x1c\x1d\x1e\x1f file separators are whitespace in Python \x85"),
])
conv("content_list_text", [
    S([{"type": "text", "text": "System "}, {"type": "text", "text": "parts."}]),
    U([{"type": "text", "text": "Part one. "}, {"type": "text", "text": "Part two."}]),
])
conv("content_list_image", [U([{"type": "image", "image": "file:///x.png"}, {"type": "text", "text": "Describe."}])],
     by_design={"qwen3": "images", "qwen2.5": "images"})
conv("content_list_image_url_video", [U([{"type": "image_url", "image_url": {"url": "http://x/y.png"}},
                                         {"type": "video", "video": "v.mp4"}, {"type": "text", "text": "Both?"}])],
     by_design={"qwen3": "images", "qwen2.5": "images"})
conv("system_with_image", [S([{"type": "image", "image": "x.png"}]), U("hi")],
     by_design={"qwen3": "images", "qwen2.5": "images"})
conv("unknown_role", [U("hi"), {"role": "developer", "content": "dev note"}],
     by_design={"qwen3": "unknown role", "qwen2.5": "unknown role"})
conv("only_system", [S("just a system prompt")])
conv("consecutive_users", [U("one"), U("two"), U("three")])
conv("long_history_reasoning", [
    S("sys"),
    U("q1"), A("a1", reasoning_content="r1"),
    U("q2"), A("<think>r2</think>a2"),
    U("q3"), A("a3", reasoning_content="r3"),
    U("q4"),
])


# ---------------------------------------------------------------------------------------------

def normalise(dialect, messages):
    """The input normalisations of include/proven_text.h, applied before transformers renders."""
    out = copy.deepcopy(messages)
    for m in out:
        if dialect in ("qwen3", "qwen2.5"):
            c = m.get("content")
            if c is None:
                m["content"] = ""
            elif isinstance(c, list):
                m["content"] = "".join(p["text"] for p in c)
        else:
            for tc in m.get("tool_calls") or []:
                f = tc.get("function", tc)
                if isinstance(f.get("arguments"), str):
                    f["arguments"] = json.loads(f["arguments"])
    return out


def render(tok, dialect, templates, messages, tools, gen, think):
    kw = {}
    if dialect != "qwen3":
        kw["chat_template"] = templates[dialect]
    if think is not None:
        kw["enable_thinking"] = think
    return tok.apply_chat_template(messages, tools=tools, tokenize=False, add_generation_prompt=gen, **kw)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--out", default=os.path.join(ROOT, "tests", "data", "chat"))
    args = ap.parse_args()

    tok = AutoTokenizer.from_pretrained(args.tokenizer)
    templates = {}
    for d, f in (("qwen3", "qwen3.jinja"), ("qwen3.5", "qwen3_5.jinja"), ("qwen2.5", "qwen2_5.jinja")):
        with open(os.path.join(args.out, f), encoding="utf-8") as fh:
            templates[d] = fh.read()
    if templates["qwen3"] != tok.chat_template:
        sys.exit("qwen3.jinja differs from the tokenizer's chat_template")

    # Inputs go through a JSON round trip first, so transformers sees exactly what the C test loads.
    convs = json.loads(json.dumps([{k: c[k] for k in ("name", "messages", "tools")} for c in CONVS],
                                  ensure_ascii=False))
    renders = []
    counts = {}
    for c, src in zip(convs, CONVS):
        for dialect in ("qwen3", "qwen3.5", "qwen2.5"):
            for gen in (True, False):
                for think in (True, False):
                    r = {"conversation": c["name"], "dialect": dialect, "add_generation_prompt": gen,
                         "enable_thinking": think}
                    if dialect in src["by_design"]:
                        r["error"] = "by design: " + src["by_design"][dialect]
                    else:
                        try:
                            msgs = normalise(dialect, c["messages"])
                            r["expected"] = render(tok, dialect, templates, msgs, c["tools"], gen, think)
                            # enable_thinking left undefined must equal true (proven has no third state)
                            if think:
                                same = render(tok, dialect, templates, msgs, c["tools"], gen, None)
                                assert same == r["expected"], (c["name"], dialect)
                        except Exception as e:  # the template (or transformers) rejects this input
                            r.pop("expected", None)
                            r["error"] = "%s: %s" % (type(e).__name__, e)
                    renders.append(r)
                    k = (dialect, "error" if "error" in r else "ok")
                    counts[k] = counts.get(k, 0) + 1

    doc = {
        "generator": "tools/reference/make_chat_fixtures.py (transformers %s)" % transformers.__version__,
        "conversations": convs,
        "renders": renders,
    }
    path = os.path.join(args.out, "cases.json")
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(doc, fh, ensure_ascii=False, indent=1)
        fh.write("\n")
    print("wrote %s: %d conversations, %d renders" % (path, len(convs), len(renders)))
    for k in sorted(counts):
        print("  %-8s %-5s %d" % (k[0], k[1], counts[k]))


if __name__ == "__main__":
    main()
