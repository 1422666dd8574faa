#!/usr/bin/env python3
"""ptx_check.py: compare the kernels of two PTX trees, kernel by kernel (tools/cuda/ptx-check.sh).

    ptx_check.py BASE_DIR CUR_DIR [--allow FILE] [--diff N] [--list]

BASE_DIR and CUR_DIR hold one .ptx per .cu file (nvcc -ptx). Every .entry (kernel) body is taken
out of its file and normalised for what legitimately changes when code moves between files or
when a file is compiled with -lineinfo:
  - the anonymous namespace's per-file name (_GLOBAL__N__<hash>_<len>_<file>_cu_<hash>, with its
    length prefix) becomes the standard _GLOBAL__N_1, in the kernel's name, its parameter names
    and the names of the shared arrays it declares or uses; likewise _INTERNAL_<hash>_..., the
    scope of function-local shared variables;
  - basic-block labels $L__BB<f>_<n> lose the function's ordinal f in its file;
  - .file and .loc lines and '// demoted' comments are dropped.
Kernels are keyed by their demangled, normalised names (c++filt), so a kernel that moved from
prefill.cu to attention_prefill.cu is the same kernel. Each is reported as identical, changed,
new or removed. The allow-list holds lines `new|changed|removed <glob> # why`, globs over the
demangled names; the exit status is 1 when a kernel differs without a matching line (or a
PTX header differs), 0 otherwise.
"""
import argparse
import difflib
import fnmatch
import os
import re
import subprocess
import sys

ANON = re.compile(r"(\d+)(_GLOBAL__N__|_INTERNAL_)")
FORMS = {"_GLOBAL__N__": "12_GLOBAL__N_1", "_INTERNAL_": "9_INTERNAL"}


def normalise_names(text):
    """Replaces every <len>_GLOBAL__N__<hash>_<n>_<file>_cu_<hash> (an anonymous namespace) by
    12_GLOBAL__N_1, and every <len>_INTERNAL_<hash>_<n>_<file>_cu_<hash> (the scope nvcc gives
    the static variables of internal functions) by 9_INTERNAL: both hashes depend on the file's
    name and contents, not on the kernel's code."""
    out, pos = [], 0
    for m in ANON.finditer(text):
        if m.start() < pos:
            continue
        digits, start = m.group(1), m.end(1)
        # the length prefix is a suffix of the digit run (a preceding digit may belong to
        # another token); it spans the whole identifier, which ends in _<8 hex>
        for k in range(len(digits)):
            n = int(digits[k:])
            ident = text[start:start + n]
            if n > 12 and len(ident) == n and re.fullmatch(m.group(2) + r"[0-9a-f]+_\d+_\w+_[0-9a-f]{8}", ident):
                out.append(text[pos:m.start() + k])
                out.append(FORMS[m.group(2)])
                pos = start + n
                break
    out.append(text[pos:])
    return "".join(out)


ENTRY = re.compile(r"^(?:\.visible\s+|\.weak\s+)?\.entry\s+([A-Za-z0-9_$.]+)\s*\(", re.M)


def entries(path):
    """{mangled normalised name: normalised body} of one PTX file, and its header."""
    with open(path) as f:
        text = f.read()
    text = normalise_names(text)
    # basic-block labels carry the function's ordinal in its file ($L__BB<f>_<n>)
    text = re.sub(r"\$L__BB\d+_(\d+)", r"$L__BB_\1", text)
    lines = [l for l in text.split("\n") if not re.match(r"\s*\.(loc|file)\s", l) and "has been demoted" not in l]
    text = "\n".join(lines)
    head = "\n".join(l for l in lines[:40] if l.startswith((".version", ".target", ".address_size")))
    out = {}
    for m in ENTRY.finditer(text):
        # the body: from .entry to the first line that is a lone "}" after the opening "{"
        i = text.find("\n{", m.end())
        j = text.find("\n}\n", i)
        if i < 0 or j < 0:
            sys.exit("ptx_check: cannot parse %s at %s" % (path, m.group(1)))
        out[m.group(1)] = text[m.start():j + 2]
    return out, head


def demangle(names):
    if not names:
        return {}
    try:
        r = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True, check=True)
        dm = r.stdout.split("\n")
    except (OSError, subprocess.CalledProcessError):
        dm = names
    return {n: (dm[i] if i < len(dm) and dm[i] else n) for i, n in enumerate(names)}


def load_tree(d):
    """{demangled key: (body, file)} over every .ptx of a directory; headers by file."""
    kern, heads = {}, {}
    files = sorted(f for f in os.listdir(d) if f.endswith(".ptx"))
    if not files:
        sys.exit("ptx_check: no .ptx files in %s" % d)
    raw = []
    for f in files:
        e, h = entries(os.path.join(d, f))
        heads[f] = h
        for name, body in e.items():
            raw.append((name, body, f))
    dm = demangle([r[0] for r in raw])
    for name, body, f in raw:
        key = dm[name]
        if key in kern:  # the same name in two files: keep them apart by file
            key = "%s [%s]" % (key, f)
        kern[key] = (body, f)
    return kern, heads


def read_allow(path):
    rules = []
    if not path:
        return rules
    with open(path) as f:
        for ln, line in enumerate(f, 1):
            s = line.split("#", 1)[0].strip()
            if not s:
                continue
            kind, _, pat = s.partition(" ")
            if kind not in ("new", "changed", "removed") or not pat.strip():
                sys.exit("ptx_check: %s:%d: want `new|changed|removed <glob> # why`" % (path, ln))
            rules.append([kind, pat.strip(), line.split("#", 1)[1].strip() if "#" in line else "", 0])
    return rules


def allowed(rules, kind, key):
    for r in rules:
        if r[0] == kind and fnmatch.fnmatchcase(key, r[1]):
            r[3] += 1
            return r
    return None


def main():
    ap = argparse.ArgumentParser(description="per-kernel PTX comparison")
    ap.add_argument("base")
    ap.add_argument("cur")
    ap.add_argument("--allow", help="allow-list of intentionally new / changed / removed kernels")
    ap.add_argument("--diff", type=int, default=0, help="print up to N lines of diff per changed kernel")
    ap.add_argument("--list", action="store_true", help="list identical kernels too")
    a = ap.parse_args()
    base, bh = load_tree(a.base)
    cur, ch = load_tree(a.cur)
    rules = read_allow(a.allow)
    bad = 0
    counts = {"identical": 0, "changed": 0, "new": 0, "removed": 0}
    rows = []
    for key in sorted(set(base) | set(cur)):
        if key in base and key in cur:
            kind = "identical" if base[key][0] == cur[key][0] else "changed"
        else:
            kind = "new" if key in cur else "removed"
        counts[kind] += 1
        where = cur[key][1] if key in cur else base[key][1]
        if key in base and key in cur and base[key][1] != cur[key][1]:
            where = "%s -> %s" % (base[key][1], cur[key][1])
        rule = None if kind == "identical" else allowed(rules, kind, key)
        if kind != "identical" and not rule:
            bad += 1
        rows.append((kind, key, where, rule))
    for kind, key, where, rule in rows:
        if kind == "identical" and not a.list:
            continue
        mark = "" if kind == "identical" else ("  (allowed: %s)" % rule[2] if rule else "  NOT ALLOWED")
        print("%-9s %s  [%s]%s" % (kind, key, where, mark))
        if kind == "changed" and a.diff:
            d = list(difflib.unified_diff(base[key][0].split("\n"), cur[key][0].split("\n"), "base", "cur", n=1, lineterm=""))
            for l in d[: a.diff]:
                print("          " + l)
            if len(d) > a.diff:
                print("          ... %d more diff lines" % (len(d) - a.diff))
    # per file (base -> current, where kernels moved): how many kernels of each kind
    per = {}
    for kind, key, where, rule in rows:
        per.setdefault(where, {}).setdefault(kind, 0)
        per[where][kind] += 1
    for where in sorted(per):
        print("file      %-44s %s" % (where, ", ".join("%d %s" % (n, k) for k, n in sorted(per[where].items()))))
    hb = set(bh.values()) | set(ch.values())
    if len(hb - {""}) > 1:
        print("header    the PTX headers differ (.version / .target / .address_size): %s" % sorted(hb))
        bad += 1
    for r in rules:
        if not r[3]:
            print("note      allow-list line matched nothing: %s %s" % (r[0], r[1]))
    print("ptx-check: %d kernels: %d identical, %d changed, %d new, %d removed; %d not allowed" %
          (len(rows), counts["identical"], counts["changed"], counts["new"], counts["removed"], bad))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
