#!/usr/bin/env python3
"""check-layers.py: the library's folders only include downward (README "Layout").

Every #include "dir/file.h" in src/ must name a folder at or below the including file's folder
in the order below (include/ headers are public and allowed everywhere); programs (cli/) include
only include/*.h, except cli/convert.c and cli/synth.c, which may use src/convert/; server/ and
client/ include include/*.h and their own headers; nothing in src/ or include/ includes a socket
or HTTP header; evidence/ (receipts, ledger, courts, report: it links SQLite)
includes include/*.h and its own headers, cli/ may include evidence/*.h, and src/ never
includes evidence/ or SQLite. Prints each
violation and exits 1 if there is one.
"""
import os, re, sys

ORDER = ["base", "quant", "format", "text", "model", "engine", "cpu", "cuda", "spec", "convert", ""]  # "" = src/*.c
RANK = {d: i for i, d in enumerate(ORDER)}
# backends never see each other
SIBLINGS = {("cpu", "cuda"), ("cuda", "cpu")}

root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
inc = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
bad = []

def folder_of(path):
    rel = os.path.relpath(path, os.path.join(root, "src"))
    return rel.split(os.sep)[0] if os.sep in rel else ""

for dirpath, _, files in os.walk(os.path.join(root, "src")):
    for f in files:
        if not f.endswith((".c", ".h", ".cu", ".cuh")):
            continue
        p = os.path.join(dirpath, f)
        me = folder_of(p)
        for m in inc.finditer(open(p, encoding="utf-8", errors="replace").read()):
            name = m.group(1)
            if "/" not in name:
                if os.path.exists(os.path.join(root, "include", name)) or os.path.exists(os.path.join(dirpath, name)):
                    continue
                bad.append(f"{os.path.relpath(p, root)}: includes \"{name}\" without its folder")
                continue
            d = name.split("/")[0]
            if d not in RANK:
                bad.append(f"{os.path.relpath(p, root)}: includes \"{name}\" from an unknown folder")
            elif RANK[d] > RANK[me] or (me, d) in SIBLINGS:
                bad.append(f"{os.path.relpath(p, root)}: {me or 'src'}/ includes {name} (a layer above it)")

for f in sorted(os.listdir(os.path.join(root, "cli"))):
    p = os.path.join(root, "cli", f)
    for m in inc.finditer(open(p, encoding="utf-8").read()):
        name = m.group(1)
        if name == "cli.h" or os.path.exists(os.path.join(root, "include", name)):
            continue
        if name.startswith("evidence/") and os.path.exists(os.path.join(root, name)):
            continue
        if f in ("convert.c", "synth.c") and name.startswith("convert/"):
            continue
        bad.append(f"cli/{f}: includes the library's internal header \"{name}\" (programs use include/)")

# the server and the client library are programs too: include/ and their own folder's headers
for prog in ("server", "client"):
    d = os.path.join(root, prog)
    if not os.path.isdir(d):
        continue
    for f in sorted(os.listdir(d)):
        if not f.endswith((".c", ".h")):
            continue
        for m in inc.finditer(open(os.path.join(d, f), encoding="utf-8").read()):
            name = m.group(1)
            if os.path.exists(os.path.join(root, "include", name)) or ("/" not in name and os.path.exists(os.path.join(d, name))):
                continue
            bad.append(f"{prog}/{f}: includes \"{name}\" (programs use include/ and their own folder)")

# the library serves no one: no sockets, no HTTP (the server and the client library live outside
# src/, so that linking libproven.a never brings a network surface into a program)
net = re.compile(r'^\s*#\s*include\s+<(sys/socket\.h|sys/un\.h|netinet/[^>]+|arpa/inet\.h|netdb\.h|microhttpd\.h)>', re.M)
for top in ("src", "include"):
    for dirpath, _, files in os.walk(os.path.join(root, top)):
        for f in files:
            if not f.endswith((".c", ".h", ".cu", ".cuh")):
                continue
            p = os.path.join(dirpath, f)
            for m in net.finditer(open(p, encoding="utf-8", errors="replace").read()):
                bad.append(f"{os.path.relpath(p, root)}: includes <{m.group(1)}> (the library links no sockets)")
# the evidence system: public headers and its own only; the library never reaches it
ev = os.path.join(root, "evidence")
if os.path.isdir(ev):
    for f in sorted(os.listdir(ev)):
        if not f.endswith((".c", ".h")):
            continue
        for m in inc.finditer(open(os.path.join(ev, f), encoding="utf-8").read()):
            name = m.group(1)
            if os.path.exists(os.path.join(root, "include", name)) or ("/" not in name and os.path.exists(os.path.join(ev, name))):
                continue
            bad.append(f"evidence/{f}: includes \"{name}\" (evidence uses include/ and its own headers)")
for dirpath, _, files in os.walk(os.path.join(root, "src")):
    for f in files:
        p = os.path.join(dirpath, f)
        if f.endswith((".c", ".h", ".cu", ".cuh")) and re.search(r'#\s*include\s+"(\.\./)*evidence/|sqlite3\.h', open(p, encoding="utf-8", errors="replace").read()):
            bad.append(f"{os.path.relpath(p, root)}: the library includes the evidence system or SQLite")

for b in bad:
    print(b)
print(f"check-layers: {len(bad)} violation(s)")
sys.exit(1 if bad else 0)
