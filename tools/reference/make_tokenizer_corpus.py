#!/usr/bin/env python3
"""Build the tokenizer parity corpus for tests/test_tokenizer.c.

Usage:
    python3 tools/reference/make_tokenizer_corpus.py [--tokenizer PATH] [--out tests/data/tokenizer/corpus.jsonl.xz]
    python3 tools/reference/make_tokenizer_corpus.py --class-table   # prints the C tables of src/text/tokenizer*.c

Generates a deterministic set of test strings (fixed seed, everything built from the text in
this file: multilingual prose, NFD and combining marks, code, emoji and ZWJ sequences, flags,
unusual whitespace, long runs (combining marks too), numbers, contractions in every case, added-token strings in text,
random code points from every plane, and byte strings that are not valid UTF-8) and records
what the Hugging Face `tokenizers` package (PyPI; developed against 0.23.3) does with them using
the real Qwen tokenizer.json (default: ../shared/data/qwen-tokenizer/tokenizer.json.xz, relative
to the repository root).

Output: xz-compressed JSON lines, one object per string:
    {"text": str,            the input as HF sees it
     "ids": [int],           tokenizer.encode(text, add_special_tokens=False).ids
     "ids_ns": [int],        only when different: the same with encode_special_tokens = True
                             (special tokens not parsed; proven's parse_special = 0)
     "raw": "hex",           only for byte strings: the raw bytes; text = raw.decode("utf-8", "replace")
     "dec": str}             only when different from text: tokenizer.decode(ids)
Line 1 is a header object {"header": {...}} with the versions and counts.

--class-table: the code points that Oniguruma (inside `tokenizers`) has in \\p{L}, \\p{N}, \\p{M}
and the system's PCRE2 (libpcre2-8, through ctypes) does not, as the C string literals that
src/text/tokenizer_load.c appends to those classes. It also reports the \\s differences.
"""

import argparse
import ctypes
import ctypes.util
import json
import lzma
import os
import random
import sys
import unicodedata

SEED = 20261129
# Long runs of combining marks in every order of combining class (issue 9: NFC's canonical
# reordering must stay linear in the run and identical to HF's); fixed cases, so N_TARGET grows by
# their count and the random cases stay what they were.
LONG_MARKS = [
    "e" + "\u0323\u0301\u0302\u0308" * 5000,        # the case, 40 KB: ccc 220 230 230 230
    "a" + "\u0301\u0323" * 10000 + "b",               # 230 220 alternating: each 220 moves
    "\u0345\u0301\u0323\u05b0\u093c" * 4000,        # 240 230 220 10 7, no starter: reversed classes
    ("\u1100\u1161\u11a8" + "\u0301\u0323" * 50) * 200,  # Hangul jamo between runs
    ("o" + "\u0308\u0323\u0304" * 3) * 3000,          # short runs that compose (o + 0323 -> U+1ECD)
    "\u0f71\u0f72\u0f80\u0f74" * 5000,              # Tibetan 129 130 130 132
]
N_TARGET = 12000 + len(LONG_MARKS)

# ---------------------------------------------------------------------------------------------
# Source text

PROSE = {
    "en": [
        "The quick brown fox jumps over the lazy dog.",
        "It's a truth universally acknowledged that a single man in possession of a good fortune must be in want of a wife.",
        "We'll see what they've done; I'd rather not say what you're thinking.",
        "Tokenizers split text into pieces, then merge bytes by rank until nothing applies.",
        "In 1969, Apollo 11 landed on the Moon; 600 million people watched.",
        "Please send the report to alice@example.com before 5:30 p.m. on Friday, March 3rd.",
        "Hello world", "Hello, world!", " Hello world", "   Hello", "HELLO WORLD!!!", "hello\tworld",
        "She said: \"Don't touch that!\" -- and he didn't.",
        "The price rose 12.5% to $1,234.56 (EUR 1.099,00) in Q3 2024.",
        "Mr. O'Neill's dog isn't the Smiths' cat; it's theirs.",
    ],
    "de": ["Führer", "Äpfel und Birnen schmecken süß.", "Straße, Maß, Größe — Übermäßig schöne Grüße aus München!",
           "Die Würde des Menschen ist unantastbar."],
    "fr": ["Ça va? Où est la bibliothèque? L'été dernier, j'ai mangé des crêpes à Noël.",
           "Qu'est-ce que c'est ? « Bonjour », dit-elle.", "Les élèves ont révisé leurs leçons."],
    "es": ["¿Dónde está el baño? ¡Qué día más bonito! Mañana será otro día, señor Núñez."],
    "pt": ["Não sei se você já comeu pão de queijo, mas é ótimo."],
    "it": ["Perché l'università è così lontana? Però è bellissima."],
    "pl": ["Zażółć gęślą jaźń. Łódź jest w Polsce."],
    "tr": ["İstanbul'da ılık bir gün; ŞEKER, ÇAY ve Ğ harfi. Iğdır ısırgan."],
    "vi": ["Tiếng Việt có nhiều dấu: Cửa Việt, Vieết Nam, người, được, những.",
           "Hà Nội là thủ đô của nước Cộng hòa Xã hội chủ nghĩa Việt Nam."],
    "ru": ["Съешь же ещё этих мягких французских булок, да выпей чаю.", "Москва — столица России. Ёлка, ёжик!",
           "ПРИВЕТ, мир! Как дела?"],
    "uk": ["Ґанок, їжак, євшан-зілля і Україна."],
    "el": ["Καλημέρα κόσμε! Η γλώσσα μου έδωσαν ελληνική. Café — κόσμος 🚀"],
    "he": ["שלום עולם! זהו משפט בעברית עם ניקוד: שָׁלוֹם."],
    "ar": ["مرحبا بالعالم! هذه جملة عربية.", "اللغة العربية جميلة جداً، أليس كذلك؟ ١٢٣٤٥٦٧٨٩٠",
           "السَّلَامُ عَلَيْكُمْ وَرَحْمَةُ اللهِ"],
    "fa": ["سلام دنیا! این یک جمله‌ی فارسی است با نیم‌فاصله. ۱۲۳۴"],
    "hi": ["नमस्ते दुनिया! यह एक हिंदी वाक्य है।", "क़िला, ज़रूर, फ़िल्म — नुक़्ता वाले अक्षर। १२३४५"],
    "bn": ["আমি বাংলায় গান গাই। ১২৩"],
    "ta": ["வணக்கம் உலகம்! தமிழ் மொழி மிகவும் பழமையானது."],
    "th": ["สวัสดีชาวโลก ภาษาไทยไม่มีการเว้นวรรคระหว่างคำ", "กรุงเทพมหานคร อมรรัตนโกสินทร์"],
    "ka": ["გამარჯობა მსოფლიო!"],
    "hy": ["Բարեւ աշխարհ!"],
    "am": ["ሰላም ልዑል! አማርኛ"],
    "zh": ["你好，世界！", "我爱北京天安门，天安门上太阳升。", "机器学习是人工智能的一个分支。2024年的模型有1000亿个参数。",
           "繁體中文與簡體中文：臺灣、台灣。", "请问“大语言模型”是什么？（这是一个问题）"],
    "ja": ["こんにちは世界！", "東京は日本の首都です。カタカナとひらがな、漢字を混ぜて書きます。",
           "ｶﾀｶﾅ（半角）と全角ＡＢＣ１２３。", "ガ が ぱ ヴ — 濁点と半濁点。"],
    "ko": ["안녕하세요 세계! 한국어 문장입니다.", "대한민국의 수도는 서울입니다. 1234원"],
    "emoji": ["🚀🔥💯", "👍🏽 👩‍💻 👨‍👩‍👧‍👦 🏳️‍🌈 🇺🇸🇯🇵🇩🇪 ❤️ ☺︎ 1️⃣", "🧑🏿‍🤝‍🧑🏻 and 🫠🫶🏻", "🏴󠁧󠁢󠁳󠁣󠁴󠁿 flag of Scotland"],
}

CODE = [
    "def foo(x):\n    return x * 2\n",
    "int main(void) {\n\tprintf(\"%d\\n\", 42);\n\treturn 0;\n}\n",
    "for (size_t i = 0; i < n; i++) a[i] += b[i] * c;",
    "{\"name\": \"proven\", \"version\": [1, 2, 3], \"ok\": true, \"x\": null}",
    "<div class=\"main\"><p>Hello &amp; welcome</p></div>",
    "SELECT id, name FROM users WHERE age >= 18 ORDER BY name DESC;",
    "#!/bin/sh\nset -e\nfor f in *.c; do cc -O2 -c \"$f\"; done\n",
    "fn main() { let v: Vec<i32> = (0..10).map(|x| x * x).collect(); println!(\"{:?}\", v); }",
    "    if (a && b || !c) { x <<= 2; y >>= 3; z ^= 0xFF; }",
    "import numpy as np\narr = np.zeros((3, 4), dtype=np.float32)\r\nprint(arr.shape)\r\n",
    "const f = async (a, b) => { await g(a ?? b); };",
    "x = [i**2 for i in range(100) if i % 3 == 0]  # comment",
    "/* block comment */ // line comment\n#include <stdio.h>\n",
    "$ git commit -m \"fix: off-by-one\" && git push origin main",
    "    \n\n\t\t\n    # indented\n\n\n",
    "a_b_c = __init__(self, *args, **kwargs)",
    "https://example.com/path?query=1&x=%20y#frag",
    "C:\\Users\\name\\file.txt",
    "matrix[i][j] = (double)sum / (n - 1.0e-9);",
    "λx. x + 1 ≠ ∀y ∈ ℝ: y² ≥ 0 → ∑ᵢ xᵢ ≤ ∞",
]

WHITESPACE = ["\t", "\n", "\r\n", "\r", " ", "  ", "\u00a0", "\u3000", "\u2003", "\u2009", "\u200b", "\u200c", "\u200d",
              "\ufeff", "\u2060", "\u180e", "\u0085", "\u2028", "\u2029", "\u000b", "\u000c", "\u001c", "\u001f",
              "\u1680", "\u202f", "\u205f", "\u00ad", "\x00", "\x7f"]

ADDED = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>", "<|box_start|>",
         "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>", "<|vision_end|>", "<|vision_pad|>",
         "<|image_pad|>", "<|video_pad|>", "<tool_call>", "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>",
         "<|fim_suffix|>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>", "<tool_response>", "</tool_response>",
         "<think>", "</think>"]
NEAR_ADDED = ["<|im_", "<|im_end", "<|im_end|", "im_end|>", "<||>", "<|>", "<think", "</think", "<thinking>", "<|IM_END|>",
              "< |im_end|>", "<<|im_end|>>", "<|im_start|><|im_start|>", "<think></think>"]

CONTRACTIONS = ["s", "t", "re", "ve", "m", "ll", "d"]

NUMBERS = ["0", "7", "42", "3333", "1234567890", "3.14159", "-0.5", "1e-9", "6.022e23", "1,000,000", "1.000.000,5",
           "2024-11-29", "12:30:45", "+1 (555) 123-4567", "0xDEADBEEF", "0b1011", "١٢٣", "۴۵۶", "१२३", "০১২",
           "๑๒๓", "０１２３", "²³¹", "½ ¾ ⅓", "Ⅻ ⅻ", "①②③", "𝟙𝟚𝟛", "٣.١٤"]

NFD_WORDS = ["e\u0301", "re\u0301sume\u0301", "Cafe\u0301", "n\u0303", "A\u030a", "o\u0308\u0304", "\u1100\u1161\u11a8",
             "\u1112\u1161\u11ab\u1100\u1173\u11af", "a\u0301\u0301\u0301", "\u0915\u093c", "\u0627\u0653",
             "\u0041\u0327\u0301", "q\u0307\u0323", "\u212b", "\u2126", "\u1e9b\u0323", "\u00c5", "e\u0301\u0327",
             "\U00011935\U00011930", "\U00016D67\U00016D67", "\U000113C2\U000113C2", "\U0001611E\U0001611E",
             "\u0b47\u0b3e", "\u0dd9\u0dcf", "\U000110a5\U000110ba", "\u30ab\u3099", "\uff76\uff9e", "\u0e4d\u0e32",
             # marks HF's older NFC tables do not know (src/text/tokenizer.c nfc_opaque)
             "a\u07fd\u0301", "a\u0301\u07fd", "\u0628\u0898\u064e", "x\u1ac0\u0316\u0301", "\U0001e4ee\u0301",
             "q\u0301\U0001e4ec\u0323", "\U00011935\u0301\U00011930", "\u0c15\u0c3c\u0c4d", "e\u1dfa\u0300"]

# Unicode ranges for random code points: (start, end, weight)
RANGES = [
    (0x20, 0x7E, 10), (0x00, 0x1F, 1), (0x80, 0xFF, 3), (0x100, 0x24F, 3), (0x250, 0x2FF, 1), (0x300, 0x36F, 3),
    (0x370, 0x3FF, 2), (0x400, 0x4FF, 2), (0x530, 0x58F, 1), (0x590, 0x5FF, 1), (0x600, 0x6FF, 2), (0x700, 0x8FF, 1),
    (0x900, 0x97F, 2), (0x980, 0xDFF, 2), (0xE00, 0xE7F, 2), (0xE80, 0xFFF, 1), (0x1000, 0x10FF, 1),
    (0x1100, 0x11FF, 2), (0x1200, 0x1FFF, 2), (0x2000, 0x206F, 2), (0x2070, 0x2BFF, 2), (0x2C00, 0x2FFF, 1),
    (0x3000, 0x303F, 2), (0x3040, 0x30FF, 3), (0x3100, 0x33FF, 1), (0x3400, 0x4DBF, 1), (0x4E00, 0x9FFF, 5),
    (0xA000, 0xABFF, 1), (0xAC00, 0xD7AF, 3), (0xD7B0, 0xD7FF, 1), (0xE000, 0xF8FF, 1), (0xF900, 0xFAFF, 1),
    (0xFB00, 0xFDFF, 1), (0xFE00, 0xFE0F, 1), (0xFE10, 0xFFFF, 2), (0x10000, 0x1FFFF, 4), (0x1E000, 0x1E8FF, 2),
    (0x1F000, 0x1FAFF, 4), (0x20000, 0x2FFFF, 2), (0x30000, 0x323AF, 1), (0xE0000, 0xE01EF, 1),
    (0xF0000, 0x10FFFF, 1),
    # Unicode 15.0-16.0 letters, digits and marks (the class table in src/text/tokenizer_load.c)
    (0x11F00, 0x11F5A, 2), (0x1E030, 0x1E08F, 1), (0x1E4D0, 0x1E4F9, 1), (0x1E5D0, 0x1E5FA, 1), (0x10D40, 0x10D85, 1),
    (0x11380, 0x113E2, 1), (0x16100, 0x16139, 1), (0x16D40, 0x16D79, 1), (0x2EBF0, 0x2EE5D, 1), (0x31350, 0x323AF, 1),
    (0x13430, 0x13460, 1), (0x1CCF0, 0x1CCF9, 1), (0x0897, 0x0897, 1), (0xA7CB, 0xA7DC, 1), (0x1C89, 0x1C8A, 1),
    # combining marks with older/newer normalisation data (nfc_opaque)
    (0x07FD, 0x07FD, 1), (0x0898, 0x08D3, 1), (0x1AB0, 0x1ACE, 1), (0x1DF6, 0x1DFF, 1), (0x10F46, 0x10F50, 1),
    (0x1E130, 0x1E136, 1), (0x0300, 0x034F, 2),
]


def rand_cp(rng):
    total = sum(w for _, _, w in RANGES)
    x = rng.uniform(0, total)
    for a, b, w in RANGES:
        if x < w:
            break
        x -= w
    while True:
        c = rng.randint(a, b)
        if not 0xD800 <= c < 0xE000:
            return chr(c)


def all_prose():
    return [s for v in PROSE.values() for s in v]


def words(rng, k):
    src = " ".join(all_prose()).split(" ")
    return " ".join(rng.choice(src) for _ in range(k))


def change_case(rng, s):
    m = rng.randrange(4)
    if m == 0:
        return s.upper()
    if m == 1:
        return s.lower()
    if m == 2:
        return s.title()
    return "".join(c.upper() if rng.random() < 0.5 else c.lower() for c in s)


def gen_prose(rng):
    lang = rng.choice(list(PROSE))
    s = rng.choice(PROSE[lang])
    r = rng.random()
    if r < 0.3:
        return s
    if r < 0.5:
        return s + rng.choice(["\n", " ", "\n\n", "\r\n", "\t"]) + rng.choice(all_prose())
    if r < 0.7:
        return change_case(rng, s)
    if r < 0.85:
        ws = s.split(" ")
        rng.shuffle(ws)
        return " ".join(ws)
    return words(rng, rng.randint(1, 40))


def gen_mix(rng):
    parts = []
    for _ in range(rng.randint(1, 8)):
        k = rng.randrange(7)
        if k == 0:
            parts.append(rng.choice(all_prose()))
        elif k == 1:
            parts.append(rng.choice(WHITESPACE) * rng.randint(1, 4))
        elif k == 2:
            parts.append(rng.choice(NUMBERS))
        elif k == 3:
            parts.append(rng.choice(NFD_WORDS))
        elif k == 4:
            parts.append(rng.choice(PROSE["emoji"]))
        elif k == 5:
            parts.append(rng.choice(CODE))
        else:
            parts.append("".join(rand_cp(rng) for _ in range(rng.randint(1, 6))))
    sep = rng.choice(["", " ", "\n", ""])
    return sep.join(parts)


def gen_contraction(rng):
    c = rng.choice(CONTRACTIONS)
    c = "".join(ch.upper() if rng.random() < 0.5 else ch for ch in c)
    apo = rng.choice(["'", "'", "'", "\u2019", "`", "''"])
    pre = rng.choice(["it", "IT", "we", "You", "they", "", " ", "x", "1", "é", "\n", "'", "O"])
    post = rng.choice(["", " ", "s", "ve", " good", "!", "\n", "'", "ſ", "ß", "K"])
    s = pre + apo + c + post
    if rng.random() < 0.3:
        s += " " + gen_contraction(rng)
    return s


def gen_code(rng):
    s = rng.choice(CODE)
    if rng.random() < 0.4:
        s = s.replace("    ", "\t")
    if rng.random() < 0.3:
        s = s.replace("\n", "\r\n")
    if rng.random() < 0.3:
        s = s + rng.choice(CODE)
    return s


def gen_emoji(rng):
    base = ["😀", "🚀", "👍", "👩", "👨", "🧑", "❤", "☺", "✌", "🏳", "🐕", "🫠", "🤌", "🇦", "🇿"]
    mods = ["", "", "\U0001F3FB", "\U0001F3FF", "\ufe0f", "\ufe0e", "\u200d", "\u20e3"]
    s = ""
    for _ in range(rng.randint(1, 10)):
        s += rng.choice(base) + rng.choice(mods)
        if rng.random() < 0.3:
            s += "\u200d" + rng.choice(base)
        if rng.random() < 0.2:
            s += " "
    if rng.random() < 0.3:
        flags = ["🇺🇸", "🇯🇵", "🇩🇪", "🇫🇷", "🇨🇳", "🇧🇷", "🇮🇳", "🇺🇦"]
        s += "".join(rng.choice(flags) for _ in range(rng.randint(1, 4)))
    if rng.random() < 0.3:
        s = rng.choice(all_prose()) + " " + s
    return s


def gen_whitespace(rng):
    s = ""
    for _ in range(rng.randint(1, 10)):
        r = rng.random()
        if r < 0.5:
            s += "".join(rng.choice(WHITESPACE) for _ in range(rng.randint(1, 5)))
        elif r < 0.8:
            s += rng.choice(["a", "Hello", "世界", "1", "!", "é", "'s", "x y", "\u0301"])
        else:
            s += rng.choice(all_prose())
    return s


def gen_number(rng):
    s = rng.choice(NUMBERS)
    if rng.random() < 0.5:
        s = "".join(rng.choice("0123456789") for _ in range(rng.randint(1, 40)))
    if rng.random() < 0.5:
        s = rng.choice(["Total: ", "x=", "v", "$", "#", " ", "第", "No."]) + s + rng.choice(["", " items", "%", "年", "."])
    return s


def gen_added(rng):
    parts = []
    for _ in range(rng.randint(1, 8)):
        r = rng.random()
        if r < 0.45:
            parts.append(rng.choice(ADDED))
        elif r < 0.6:
            parts.append(rng.choice(NEAR_ADDED))
        elif r < 0.8:
            parts.append(rng.choice(all_prose()))
        else:
            parts.append(rng.choice(["\n", " ", "user\n", "assistant\n", "system\n", "\u0301", "é", "<", "|", ">"]))
    return "".join(parts)


def gen_chat(rng):
    turns = []
    if rng.random() < 0.5:
        turns.append("<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n")
    for _ in range(rng.randint(1, 3)):
        turns.append("<|im_start|>user\n" + rng.choice(all_prose()) + "<|im_end|>\n")
        body = rng.choice(all_prose())
        if rng.random() < 0.5:
            body = "<think>\n" + rng.choice(all_prose()) + "\n</think>\n\n" + body
        if rng.random() < 0.3:
            body += '\n<tool_call>\n{"name": "f", "arguments": {"x": 1}}\n</tool_call>'
        turns.append("<|im_start|>assistant\n" + body + "<|im_end|>\n")
    turns.append("<|im_start|>assistant\n")
    return "".join(turns)


def gen_random_cps(rng):
    return "".join(rand_cp(rng) for _ in range(rng.randint(1, 40)))


def gen_long(rng):
    unit = rng.choice([" ", "a", "1", "\n", "!", "é", "\u0301", "ab", " a", "a ", "\t", "\r\n", "世", "🚀", "e\u0301",
                       "'s", "\u00a0", "\u3000", "x1", "<|im_end|>", "  \n", ".", "-", "=", "#", "Hello "])
    n = rng.choice([100, 500, 1000, 3000])
    s = unit * (n // len(unit))
    if rng.random() < 0.5:
        s = rng.choice(["", "x", " ", "Hello", "1"]) + s + rng.choice(["", "x", " ", "world", "\n"])
    return s


def gen_invalid(rng):
    """Byte strings that are not valid UTF-8 (and some that are)."""
    pieces = [b"\x80", b"\xbf", b"\xc0\x80", b"\xc1\xbf", b"\xe0\x80\x80", b"\xe0\x9f\xbf", b"\xed\xa0\x80",
              b"\xed\xbf\xbf", b"\xf0\x80\x80\x80", b"\xf4\x90\x80\x80", b"\xf5\x80\x80\x80", b"\xff", b"\xfe",
              b"\xc3", b"\xe4\xb8", b"\xf0\x9f\x9a", b"\xf0\x9f", b"\xe2\x82", b"\xc3\x28", b"\xa0\xa1",
              b"\xe2\x28\xa1", b"\xf0\x28\x8c\xbc", b"\xf8\x88\x80\x80\x80", b"\xfc\x84\x80\x80\x80\x80"]
    out = b""
    for _ in range(rng.randint(1, 8)):
        r = rng.random()
        if r < 0.4:
            out += rng.choice(pieces)
        elif r < 0.55:
            out += bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
        else:
            out += rng.choice(all_prose() + WHITESPACE + NUMBERS).encode()
            if rng.random() < 0.3:  # cut a valid string in the middle of a character
                out = out[: rng.randint(0, len(out))]
    return out


GENERATORS = [
    (gen_prose, 22), (gen_mix, 14), (gen_contraction, 6), (gen_code, 8), (gen_emoji, 6), (gen_whitespace, 8),
    (gen_number, 6), (gen_added, 8), (gen_chat, 3), (gen_random_cps, 8), (gen_long, 2), (gen_invalid, 9),
]


def fixed_cases():
    out = [s for s in all_prose()] + CODE + NUMBERS + NFD_WORDS + ADDED + NEAR_ADDED + WHITESPACE
    out += ["", " ", "  ", "\n", "\n\n\n", "\t", "\t\t", "\r\n", " \n", "\n ", "a", "'", "''", "'s", "'S", "'ſ", "x'ſt"]
    out += [ws * 3 for ws in WHITESPACE]
    out += ["a" + ws * 3 + "b c" for ws in WHITESPACE]
    out += [" " * 20000, "a" * 20000, "1" * 5000, "\n" * 5000, "é" * 5000, "e\u0301" * 3000, "!" * 5000, "🚀" * 2000,
            ("Hello world. " * 1500), "\u0301" * 3000, " \n" * 3000, "a1" * 3000]
    return out + LONG_MARKS


# ---------------------------------------------------------------------------------------------


def load_tokenizer(path):
    from tokenizers import Tokenizer

    if path.endswith(".xz"):
        with lzma.open(path, "rb") as f:
            return Tokenizer.from_str(f.read().decode("utf-8"))
    return Tokenizer.from_file(path)


def make_corpus(args):
    import tokenizers

    tok = load_tokenizer(args.tokenizer)
    tok_ns = load_tokenizer(args.tokenizer)
    tok_ns.encode_special_tokens = True
    rng = random.Random(SEED)

    cases = [(s, None) for s in fixed_cases()]
    total_w = sum(w for _, w in GENERATORS)
    seen = set(s for s, _ in cases)
    while len(cases) < N_TARGET:
        x = rng.uniform(0, total_w)
        for g, w in GENERATORS:
            if x < w:
                break
            x -= w
        v = g(rng)
        if isinstance(v, bytes):
            raw, text = v, v.decode("utf-8", "replace")
            key = ("raw", raw)
        else:
            raw, text = None, v
            key = text
        if key in seen:
            continue
        seen.add(key)
        cases.append((text, raw))

    lines = []
    n_raw = n_ns = n_dec = 0
    for text, raw in cases:
        ids = tok.encode(text, add_special_tokens=False).ids
        rec = {"text": text, "ids": ids}
        ids_ns = tok_ns.encode(text, add_special_tokens=False).ids
        if ids_ns != ids:
            rec["ids_ns"] = ids_ns
            n_ns += 1
        if raw is not None:
            rec["raw"] = raw.hex()
            n_raw += 1
        dec = tok.decode(ids, skip_special_tokens=False)
        if dec != text:
            rec["dec"] = dec
            n_dec += 1
        lines.append(json.dumps(rec, ensure_ascii=False))
    header = {"header": {"generator": "tools/reference/make_tokenizer_corpus.py", "seed": SEED,
                         "tokenizers": tokenizers.__version__, "python": sys.version.split()[0],
                         "unicodedata": unicodedata.unidata_version, "cases": len(cases), "raw_cases": n_raw,
                         "ids_ns_cases": n_ns, "dec_cases": n_dec}}
    data = (json.dumps(header) + "\n" + "\n".join(lines) + "\n").encode("utf-8")
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    with open(args.out, "wb") as f:
        f.write(lzma.compress(data, preset=9 | lzma.PRESET_EXTREME))
    print(f"{args.out}: {len(cases)} cases ({n_raw} from invalid UTF-8 bytes, {n_ns} differ without special "
          f"tokens, {n_dec} decode differently), {len(data)} bytes, {os.path.getsize(args.out)} compressed",
          file=sys.stderr)


# ---------------------------------------------------------------------------------------------
# --class-table


def onig_class(pat):
    """Code points that Oniguruma (in `tokenizers`) matches with the single-character class pat."""
    from tokenizers import Regex, pre_tokenizers

    sp = pre_tokenizers.Split(Regex(pat), behavior="removed")
    res = set()
    cps = [c for c in range(0x110000) if not 0xD800 <= c < 0xE000]
    for i in range(0, len(cps), 4096):
        part = cps[i:i + 4096]
        kept = set("".join(p for p, _ in sp.pre_tokenize_str("".join(chr(c) for c in part))))
        res.update(c for c in part if chr(c) not in kept)
    return res


def pcre2_class(pat):
    lib = ctypes.CDLL(ctypes.util.find_library("pcre2-8") or "libpcre2-8.so.0")
    lib.pcre2_compile_8.restype = ctypes.c_void_p
    lib.pcre2_compile_8.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_uint32, ctypes.POINTER(ctypes.c_int),
                                    ctypes.POINTER(ctypes.c_size_t), ctypes.c_void_p]
    lib.pcre2_match_data_create_8.restype = ctypes.c_void_p
    lib.pcre2_match_data_create_8.argtypes = [ctypes.c_uint32, ctypes.c_void_p]
    lib.pcre2_match_8.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_size_t, ctypes.c_uint32,
                                  ctypes.c_void_p, ctypes.c_void_p]
    PCRE2_UTF, PCRE2_UCP = 0x00080000, 0x00020000
    e, eo = ctypes.c_int(), ctypes.c_size_t()
    code = lib.pcre2_compile_8(("^" + pat + "$").encode(), ctypes.c_size_t(-1), PCRE2_UTF | PCRE2_UCP, ctypes.byref(e),
                               ctypes.byref(eo), None)
    md = lib.pcre2_match_data_create_8(4, None)
    res = set()
    for c in range(0x110000):
        if 0xD800 <= c < 0xE000:
            continue
        b = chr(c).encode()
        if lib.pcre2_match_8(code, b, len(b), 0, 0, md, None) > 0:
            res.add(c)
    return res


def ranges(cps):
    r = []
    for c in sorted(cps):
        if r and r[-1][1] == c - 1:
            r[-1][1] = c
        else:
            r.append([c, c])
    return r


def utf8proc_nfc_fn(decompose=False):
    lib = ctypes.CDLL(ctypes.util.find_library("utf8proc") or "libutf8proc.so.2")
    lib.utf8proc_map.restype = ctypes.c_ssize_t
    lib.utf8proc_map.argtypes = [ctypes.c_char_p, ctypes.c_ssize_t, ctypes.POINTER(ctypes.c_void_p), ctypes.c_int]
    libc = ctypes.CDLL(None)
    UTF8PROC_STABLE, UTF8PROC_COMPOSE, UTF8PROC_DECOMPOSE = 1 << 1, 1 << 3, 1 << 4

    def nfc(s):
        b = s.encode()
        out = ctypes.c_void_p()
        n = lib.utf8proc_map(b, len(b), ctypes.byref(out), UTF8PROC_STABLE | (UTF8PROC_DECOMPOSE if decompose
                                                                               else UTF8PROC_COMPOSE))
        r = ctypes.string_at(out.value, n).decode()
        libc.free(out)
        return r

    return nfc


def nfc_opaque():
    """Code points whose normalisation behaviour differs between HF's NFC (older Unicode tables)
    and utf8proc: a character that reorders (canonical combining class) or composes differently.
    Both treat them alike when the text is normalised in pieces split at these characters."""
    from tokenizers import normalizers

    hf, up = normalizers.NFC(), utf8proc_nfc_fn()
    cps = [c for c in range(0x110000) if not 0xD800 <= c < 0xE000 and c != 10]

    def probes(c):
        return ["\u20ac" + c + "\u0301", "\u20ac\u0301" + c, "\u20ac" + c + "\u0345", "\u20ac\u0345" + c,
                "\u20ac" + c + "\u0334", "\u20ac\u0334" + c, c + "\u0301", c + c, "a" + c, "\u0915" + c,
                "\u11a8" + c, c + "\u11a8"]

    np_ = len(probes("x"))
    bad = set()
    for i in range(0, len(cps), 65536):
        part = cps[i:i + 65536]
        big = "\n".join(p for c in part for p in probes(chr(c)))
        a, b = hf.normalize_str(big).split("\n"), up(big).split("\n")
        bad.update(part[k // np_] for k in range(len(a)) if a[k] != b[k])
    # compositions: the canonical decomposition of every character, recomposed by both
    nfd = normalizers.NFD()
    dec = nfd.normalize_str("\n".join(chr(c) for c in cps)).split("\n")
    a, b = hf.normalize_str("\n".join(dec)).split("\n"), up("\n".join(dec)).split("\n")
    for k in range(len(a)):
        if a[k] != b[k]:
            bad.update(ord(x) for x in dec[k][1:])  # the later members of the pair
    # utf8proc's own decompositions, recomposed by both (compositions HF does not know)
    dec = utf8proc_nfc_fn(decompose=True)("\n".join(chr(c) for c in cps)).split("\n")
    a, b = hf.normalize_str("\n".join(dec)).split("\n"), up("\n".join(dec)).split("\n")
    for k in range(len(a)):
        if a[k] != b[k]:
            bad.update(ord(x) for x in dec[k][1:])
    return bad


def class_table():
    for name in "LNM":
        onig, pcre = onig_class(r"\p{%s}" % name), pcre2_class(r"\p{%s}" % name)
        if pcre - onig:
            print(f"/* warning: PCRE2 has {len(pcre - onig)} code points in \\p{{{name}}} that Oniguruma has not */")
        parts = [("\\\\x{%x}" % a if a == b else "\\\\x{%x}-\\\\x{%x}" % (a, b)) for a, b in ranges(onig - pcre)]
        lines, cur = [], ""
        for p in parts:
            if len(cur) + len(p) > 90:
                lines.append(cur)
                cur = ""
            cur += p
        lines.append(cur)
        print(f"static const char extra_{name}[] =")
        print("\n".join('\t"%s"' % x for x in lines) + ";")
    parts = ["{ 0x%x, 0x%x }" % (a, b) for a, b in ranges(nfc_opaque())]
    print("static const uint32_t nfc_opaque[][2] = {")
    line = "\t"
    for p in parts:
        if len(line) + len(p) > 100:
            print(line.rstrip())
            line = "\t"
        line += p + ", "
    print(line.rstrip() + "\n};")
    onig, pcre = onig_class(r"\s"), pcre2_class(r"\s")
    print("/* Oniguruma \\s: %s */" % " ".join("%x-%x" % (a, b) for a, b in ranges(onig)))
    print("/* PCRE2 \\s only: %s; Oniguruma \\s only: %s */" % (
        " ".join("%x" % c for c in sorted(pcre - onig)), " ".join("%x" % c for c in sorted(onig - pcre))))


def main():
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokenizer", default=os.path.join(root, "..", "shared", "data", "qwen-tokenizer",
                                                        "tokenizer.json.xz"))
    ap.add_argument("--out", default=os.path.join(root, "tests", "data", "tokenizer", "corpus.jsonl.xz"))
    ap.add_argument("--class-table", action="store_true")
    args = ap.parse_args()
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    if args.class_table:
        class_table()
    else:
        make_corpus(args)


if __name__ == "__main__":
    main()
