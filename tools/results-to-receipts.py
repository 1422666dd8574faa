#!/usr/bin/env python3
"""Receipts from the committed result tables that have no JSON lines of their own.

    tools/results-to-receipts.py h200   > docs/results/receipts-h200-2026-12.jsonl   (its head)
    tools/results-to-receipts.py cpu    > docs/results/receipts-cpu-tables-2026-12.jsonl
    tools/results-to-receipts.py h200-s3 > docs/results/receipts-h200-2026-12-02-s3.jsonl
    tools/results-to-receipts.py h200-s4 > docs/results/receipts-h200-2026-12-02-s4.jsonl
    tools/results-to-receipts.py h200-s5 > docs/results/receipts-h200-2026-12-02-s5.jsonl
    tools/results-to-receipts.py --check h200 docs/results/receipts-h200-2026-12.jsonl
    tools/results-to-receipts.py --check h200-s3 docs/results/receipts-h200-2026-12-02-s3.jsonl

Each receipt (schema proven.receipt/1, docs/receipts.md) is one row of a committed file under
docs/results: `imported` is true and `source` names the file, its sha256 and the line, so every
figure can be found where it was printed. Values are copied as printed (no rounding, no derived
number); what the table does not say is left out or written "not stated", never guessed.
`proven receipts import` stores them (it computes each receipt's sha256).

The 12-02 second H200 session (h200-2026-12-02-shared-{e,f,g}) has JSON lines, but the variant of
each curve point is named only by its .txt line (the environment, e.g. PV_CUDA_GEMV_SHARED=2) and
the replays' knob only by g's header: those receipts cite the JSON line as source, carry the
record's own knobs plus env.* from the .txt line, and copy the .txt line's ms per step as printed
(extra.printed names that line); the script asserts that both lines are the same run.

The 12-02 third H200 session (h200-s3, h200-2026-12-02-s3.md): the 8B curve of call 1 the same
way (h200-2026-12-02-s3-e.{txt,jsonl}); the 9B curve of call 2 has JSON lines only
(h200-2026-12-02-s3-9b-curve.jsonl): its knobs are the record's, env.PV_CUDA_GEMV_SHARED=2 from the
record's cuda.gemv_shared=2 (the knob's only setting) and section 2, and its ms per step is copied
from section 2's table (extra.printed), asserted to be the record's 1000 r / pp_tok_s.

The h200 output is only the head of receipts-h200-2026-12.jsonl: H200 receipts measured later are
appended below it (`proven receipts export` lines); --check compares the head with this output.

Python 3 standard library only.
"""
import hashlib
import json
import re
import sys

RESULTS = "docs/results/"
SCHEMA = "proven.receipt/1"


def sha_file(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def lines(path):
    with open(path, encoding="utf-8") as f:
        return f.read().split("\n")


def host():
    # imported: the host was not read by this ledger (as `receipts import` writes it)
    return {"cpus": 0, "before": {"load1": None}, "after": {"load1": None}, "wall_s": 0.0, "self_cpu_s": 0.0,
            "foreign_cpu_s": 0.0, "foreign_share": 0.0}


def fig(name, scope, unit, value, sd=0.0, n=1):
    return {"name": name, "scope": scope, "unit": unit, "value": float(value), "sd": float(sd), "n": int(n)}


def receipt(kind, path, line, created, runtime, model, workload, figures, counts=None, args=None, extra=None, what=""):
    return {
        "schema": SCHEMA, "created": created, "kind": kind, "status": "ok", "imported": True,
        "command": "converted by tools/results-to-receipts.py from %s line %d%s" % (path, line, " (%s)" % what if what else ""),
        "source": {"file": path, "sha256": sha_file(path), "line": line},
        "runtime": runtime, "model": model, "host": host(), "workload": workload, "samples": [],
        "figures": figures, "counts": counts or {}, "args": args or {}, "extra": extra or {},
    }


def runtime(commit, backend, knobs=None, dirty=False, threads=None, gpu=None, compiler="not stated", cpu="not stated",
            isa="not stated"):
    rt = {"commit": commit, "dirty": dirty, "compiler": compiler, "cflags": "not stated", "backend": backend,
          "knobs": knobs or {}, "cpu_model": cpu, "isa": isa}
    if threads:
        rt["threads"] = threads
    if gpu is not None:
        rt["gpu"] = gpu
    return rt


def cells(row):
    return [c.strip() for c in row.strip().strip("|").split("|")]


def num(s):
    """a table cell as printed: '1.06x', '**1.45x**', '33,366', '76.8 %' -> float; '' -> None"""
    s = s.replace("*", "").replace(",", "").replace("x", "").replace("%", "").strip()
    return float(s) if s else None


# ---- H200 ---------------------------------------------------------------------------------------

def v5_peer():
    """llama.cpp's H200 figures in the v5 table (the issue's: build 10587 on this project's H200,
    the same shapes): one peer receipt per row that has one."""
    path = RESULTS + "h200-2026-11-30-cuda-v5.md"
    out = []
    for i, row in enumerate(lines(path), 1):
        if not row.startswith("| qwen"):
            continue
        c = cells(row)
        run, ctx, ltg, prompt, lpp = c[0], c[2], num(c[4]), c[6], num(c[8])
        if ltg is None and lpp is None:
            continue
        figs = []
        if lpp is not None:
            figs.append(fig("pp", "observed", "tok/s", lpp))
        if ltg is not None:
            figs.append(fig("tg", "decode-only", "tok/s", ltg))
        out.append(receipt(
            "peer.bench", path, i, "2026-11-30T00:00:00Z",
            runtime("not stated", "cuda", gpu={"name": "NVIDIA H200"}),
            {"path": run},
            {"class": "synthetic", "prompt_digest": "not stated", "n_prompt": 512 if lpp is not None else int(prompt), "n_gen": 0},
            figs,
            extra={"engine": "llama.cpp", "build": "10587", "run": run, "proven_context": int(ctx),
                   "note": "llama.cpp's figures as quoted in the v5 table (the issue's, build 10587 on this project's H200, "
                           "same shapes); pp is pp512; the tg test's length is not stated there"},
            what="llama.cpp, " + run))
    return out


def v5b_splits():
    """the last call of session 2: default attention splits against 16-key splits (PV_CUDA_ATT_SPLIT=16)"""
    path = RESULTS + "h200-2026-11-30-cuda-v5b-final.txt"
    out = []
    model = None
    arm = "default"
    pat = re.compile(r"pp512 (\d+) \+- (\d+)\s+tg128 ([\d.]+) \(([\d.]+) %\) kernels (\d+)")
    for i, row in enumerate(lines(path), 1):
        m = re.match(r"== (\S+) (\S+)$", row)
        if m:
            model, arm = m.group(1) + "-" + m.group(2), "default"
            continue
        if row.strip() == "s16:":
            arm = "s16"
            continue
        m = pat.search(row)
        if not m or not model:
            continue
        knobs = {"env.PV_CUDA_ATT_SPLIT": 16} if arm == "s16" else {}
        out.append(receipt(
            "bench", path, i, "2026-11-30T00:00:00Z",
            runtime("a38ca63", "cuda", knobs=knobs, gpu={"name": "NVIDIA H200"}),
            {"path": model},
            {"class": "synthetic", "prompt_digest": "not stated", "n_prompt": 512, "n_gen": 128, "reps": 3},
            [fig("pp", "observed", "tok/s", m.group(1), m.group(2), 3), fig("tg", "decode-only", "tok/s", m.group(3), 0, 3),
             fig("tg_bw_share", "decode-only", "% of d2d", m.group(4))],
            counts={"kernels_per_token": int(m.group(5))},
            extra={"run": model + ("-s16" if arm == "s16" else ""), "att_split": "16-key splits" if arm == "s16" else "default splits",
                   "note": "proven bench --backend cuda --json-only, one untimed prompt then 3 timed reps (the file's header)"},
            what=model + " " + arm))
    return out


def spec_d():
    """part d of the speculation check: the verify-window curve and trace replay with and without
    cuda.gemv_rows_multi (PV_CUDA_GEMV_RM)"""
    path = RESULTS + "h200-2026-12-02-spec-d.txt"
    out = []
    rows = lines(path)
    m = re.search(r"\| proven (\w+?)(-dirty)?$", rows[0])
    commit, dirty = m.group(1)[:12], bool(m.group(2))
    # the header names the GPU and the driver; its clock columns are kept as printed (extra.gpu_line)
    g = re.match(r"== (NVIDIA [^,]+), ([\d.]+),", rows[0])
    gpu = {"name": g.group(1), "driver": g.group(2)}
    curve = re.compile(r"curve (\S+) rows_multi=(\d) rows (\d+): ([\d.]+) ms per step, ([\d.]+) ms per row "
                       r"\(decode at depth (\d+): ([\d.]+) tok/s\)")
    replay = re.compile(r"replay (\S+) rows_multi=(\d) (\S+): rc 0")
    cur = None
    for i, row in enumerate(rows, 1):
        c = curve.match(row)
        if c:
            shape, rm, r = c.group(1), int(c.group(2)), int(c.group(3))
            out.append(receipt(
                "bench", path, i, "2026-12-02T00:00:00Z",
                runtime(commit, "cuda", knobs={"cuda.gemv_rows_multi": rm}, dirty=dirty, gpu=gpu),
                {"path": shape},
                {"class": "synthetic", "prompt_digest": "not stated", "n_prompt": r, "n_gen": 16, "depth": 512},
                [fig("step_ms", "observed", "ms per verify step", c.group(4)), fig("row_ms", "observed", "ms per row", c.group(5)),
                 fig("tg", "decode-only", "tok/s", c.group(7))],
                extra={"run": "%s-rows%d-rm%d" % (shape, r, rm), "rows": r, "decode_depth": int(c.group(6)), "gpu_line": rows[0],
                       "note": "one exact step of r rows (the verify call of r - 1 drafts): proven bench --backend cuda --pp r "
                               "--tg 16 --depth 512 (docs/results/spec-2026-12-02.md section 2)"},
                what="verify curve %s rows %d rows_multi=%d" % (shape, r, rm)))
            continue
        p = replay.match(row)
        if p:
            cur = (p.group(1), int(p.group(2)), p.group(3))
            continue
        if cur and row.startswith("| ") and not row.startswith("| class") and not row.startswith("| ---"):
            cl = cells(row)
            shape, rm, trace = cur
            cls = cl[0]
            out.append(receipt(
                "bench.spec", path, i, "2026-12-02T00:00:00Z",
                runtime(commit, "cuda", knobs={"cuda.gemv_rows_multi": rm}, dirty=dirty, gpu=gpu),
                {"path": shape},
                {"class": cls, "prompt_digest": "cases file", "n_prompt": int(cl[1]), "n_gen": 128},
                [fig(cls + ".speedup_decode", "decode-only", "ratio spec/plain", num(cl[4])),
                 fig(cls + ".speedup_e2e", "end-to-end", "ratio spec/plain", num(cl[5])),
                 fig(cls + ".spec_decode", "decode-only", "tok/s", num(cl[3])),
                 fig(cls + ".plain_decode", "decode-only", "tok/s", num(cl[2]))],
                args={"draft": "replay:docs/results/spec-traces/%s.jsonl" % trace},
                extra={"tokens_per_step": num(cl[6]), "acceptance": num(cl[7]), "gpu_line": rows[0],
                       "note": "acceptance-trace replay on a random-weight file of the shape (spec-2026-12-02.md section 3)"},
                what="replay %s %s %s" % (shape, trace, cls)))
    return out


# ---- H200, 2026-12-02, second session: the shared walk, window graphs, f16 KV (shared-walk.md) ----

def jsonl_at(path):
    """(line number, record) for every JSON line of path; other lines are skipped"""
    return [(i, json.loads(r)) for i, r in enumerate(lines(path), 1) if r.startswith("{")]


def bench_json(rec, path, line, what, knobs_env, printed=None, args=None, extra=None):
    """one `proven bench` JSON line as a receipt: the fields `proven receipts import` takes from such
    a line (pp, tg, tg_bw_share with their sd and reps; its knobs, GPU and build), plus the variant
    its .txt line names (env) and, where the .txt line prints more (ms per step), those figures as
    printed, with that line cited in extra.printed"""
    reps = int(rec["reps"])
    knobs = dict(rec.get("knobs") or {})
    knobs.update(knobs_env)
    gpu = {"name": rec["gpu"], "driver": rec["driver_cuda"], "sm_clock_mhz": rec["sm_clock_mhz"],
           "mem_clock_mhz": rec["mem_clock_mhz"]}
    rt = runtime(rec["build_commit"], rec["backend"], knobs=knobs, threads=rec["threads"], gpu=gpu,
                 compiler=rec["compiler"], cpu=rec["cpu"], isa=rec["isa"])
    rt["cflags"] = rec["flags"]
    rt["nvcc_flags"] = rec["nvcc_flags"]
    figs = [fig("pp", "observed", "tok/s", rec["pp_tok_s"], rec["pp_tok_s_sd"], reps),
            fig("tg", "decode-only", "tok/s", rec["tg_tok_s"], rec["tg_tok_s_sd"], reps),
            fig("tg_bw_share", "decode-only", "fraction of d2d", rec["tg_bw_share"], 0, reps)]
    ex = {"record": rec}
    if printed:
        ptxt, pline, ptext, pfigs = printed
        figs += pfigs
        ex["printed"] = {"file": ptxt, "sha256": sha_file(ptxt), "line": pline, "text": ptext}
    ex.update(extra or {})
    r = receipt("bench", path, line, "2026-12-02T00:00:00Z", rt,
                {"path": rec["model"], "arch": rec["arch"], "dtype": rec["weight_dtype"], "n_params": rec["n_params"]},
                {"class": "synthetic", "prompt_digest": "not stated", "n_prompt": int(rec["pp"]), "n_gen": int(rec["tg"]),
                 "depth": int(rec["depth"]), "reps": reps},
                figs, counts={"launches_per_token": rec["graph_launches_per_token"], "syncs_per_token": rec["syncs_per_token"],
                              "kernels_per_token": rec["kernels_per_token"]},
                args=args, extra=ex, what=what)
    return r


def shared_curves(part):
    """the verify-window curve of spec-check e (378108f) and f (45f6753): one exact step of r rows
    (`proven bench --backend cuda --pp r --tg 16 --depth 512 --reps 5`), the variant given by the
    environment its .txt line names ("default": none)"""
    return txt_curves(RESULTS + "h200-2026-12-02-shared-%s.txt" % part, RESULTS + "h200-2026-12-02-shared-%s.jsonl" % part,
                      "h200-2026-12-02-shared-walk.md section 3")


def txt_curves(txt, jl, cite):
    """a curve whose .txt lines name each point's variant and whose JSON lines hold the records
    (spec-check's `curve` lines): one receipt per point, cite: the results file's section"""
    rows = lines(txt)
    commit = re.search(r"\| proven (\w+)$", rows[0]).group(1)
    curve = re.compile(r"curve (\S+) (.+) rows (\d+): ([\d.]+) ms per step, ([\d.]+) ms per row "
                       r"\(decode at depth (\d+): ([\d.]+) tok/s\)$")
    printed = [(i, row, curve.match(row)) for i, row in enumerate(rows, 1) if curve.match(row)]
    benches = [(i, r) for i, r in jsonl_at(jl) if "tg_tok_s" in r]
    assert len(printed) == len(benches), (txt, len(printed), len(benches))
    out = []
    for (pi, ptext, c), (bi, rec) in zip(printed, benches):
        shape, variant, r = c.group(1), c.group(2), int(c.group(3))
        # the .txt line and the JSON line are the same run: rows, decode figure and commit agree
        assert rec["pp"] == r and "%.3f" % rec["tg_tok_s"] == "%.3f" % float(c.group(7)) and rec["build_commit"] == commit, (txt, pi)
        env = {}
        for kv in variant.split():
            m = re.match(r"(PV_[A-Z_]+)=(\d+)$", kv)
            if m:
                env["env." + m.group(1)] = int(m.group(2))
        if "env.PV_CUDA_GEMV_SHARED" in env:
            assert rec["knobs"]["cuda.gemv_shared"] == env["env.PV_CUDA_GEMV_SHARED"], (txt, pi)
        out.append(bench_json(
            rec, jl, bi, "verify curve %s %s rows %d" % (shape, variant, r), env,
            printed=(txt, pi, ptext, [fig("step_ms", "observed", "ms per verify step", c.group(4)),
                                      fig("row_ms", "observed", "ms per row", c.group(5))]),
            extra={"run": "%s-rows%d-%s" % (shape, r, variant.replace(" ", "-")), "rows": r, "variant": variant,
                   "decode_depth": int(c.group(6)), "gpu_line": rows[0],
                   "note": "one exact step of r rows (the verify call of r - 1 drafts) at depth 512, the variant named by the "
                           "environment on the .txt line (default: cuda.gemv_shared=1); step_ms and row_ms as the .txt line "
                           "prints them (1000 r / pp_tok_s); " + cite}))
    return out


def shared_courts():
    """the five exactness courts of spec-check e at 378108f (`proven court spec --backend cuda`,
    default knobs: the court lines do not record them)"""
    txt, jl = RESULTS + "h200-2026-12-02-shared-e.txt", RESULTS + "h200-2026-12-02-shared-e.jsonl"
    rows = lines(txt)
    commit = re.search(r"\| proven (\w+)$", rows[0]).group(1)
    labels = [(i, row) for i, row in enumerate(rows, 1) if row.startswith("court ")]
    courts = [(i, r) for i, r in jsonl_at(jl) if r.get("court") == "spec"]
    assert len(labels) == len(courts)
    out = []
    for (ti, trow), (ci, rec) in zip(labels, courts):
        assert '"cases":%d,"exact":%d' % (rec["cases"], rec["exact"]) in trow, (txt, ti)
        counts = {k: rec[k] for k in ("tokens", "steps", "verify_calls", "drafted", "accepted", "rollbacks", "snapshot_restores",
                                      "replayed_rows", "fallbacks", "mismatches") if isinstance(rec.get(k), int)}
        r = receipt("court.spec", jl, ci, "2026-12-02T00:00:00Z",
                    runtime(commit, "cuda", gpu={"name": "NVIDIA H200"}),
                    {"path": rec["model"]},
                    {"class": "all", "prompt_digest": "cases file", "n_prompt": int(rec["cases"]), "n_gen": 0},
                    [fig("exact_cases", "court", "cases", rec["exact"], 0, rec["cases"])],
                    counts=counts, args={"draft": rec["draft"]},
                    extra={"verdict": rec["verdict"], "record": rec, "label": trow.split(":")[0], "gpu_line": rows[0],
                           "note": "speculative == plain, bitwise, per case; knobs: the build's defaults (cuda.gemv_shared=1, "
                                   "h200-2026-12-02-shared-walk.md section 2), not recorded in the court line; "
                                   "n_gen not stated in the line"},
                    what=trow.split(":")[0])
        r["status"] = "ok" if rec["verdict"] == "exact" else rec["verdict"]
        out.append(r)
    return out


def shared_g():
    """the last short call at 45f6753 (header "SHARED=2"): the n-gram trace of the real
    Qwen2.5-Coder-1.5B replayed on the 8B BF16 file, and the KV cache bench f32 / f16 at depth 4096"""
    path = RESULTS + "h200-2026-12-02-shared-g.txt"
    rows = lines(path)
    head = rows[0]
    m = re.match(r"== proven (\w+) (SHARED=2)$", head)
    commit, variant = m.group(1), m.group(2)
    table = {cells(r)[0]: (i, r) for i, r in enumerate(rows, 1) if r.startswith("| ") and not r.startswith("| class")
             and not r.startswith("| ---")}
    kvline = {mm.group(1): (i, r) for i, r in enumerate(rows, 1) for mm in [re.match(r"kv (\w+) 1: ", r)] if mm}
    start = rows.index("## JSON lines") + 1
    out = []
    for i, rec in jsonl_at(path):
        if i <= start:
            continue
        if rec.get("bench") == "spec":
            cls = rec["class"]
            ti, trow = table[cls]
            c = cells(trow)
            assert rec["commit"] == commit and rec["backend"] == "cuda" and abs(num(c[2]) - rec["plain_decode_tok_s"]) <= 0.0051
            counts = {k: rec[k] for k in ("steps", "verify_calls", "drafted", "accepted", "mismatches") if isinstance(rec.get(k), int)}
            out.append(receipt(
                "bench.spec", path, i, "2026-12-02T00:00:00Z",
                runtime(commit, "cuda", knobs={"cuda.gemv_shared": 2}, gpu={"name": "NVIDIA H200"}, compiler=rec["compiler"],
                        isa=rec["isa"]),
                {"path": rec["model"]},
                {"class": cls, "prompt_digest": "cases file", "n_prompt": int(rec["cases"]), "n_gen": int(rec["max_tokens"])},
                [fig(cls + ".speedup_decode", "decode-only", "ratio spec/plain", rec["speedup_decode_only"], 0, rec["cases"]),
                 fig(cls + ".speedup_e2e", "end-to-end", "ratio spec/plain", rec["speedup_end_to_end"], 0, rec["cases"]),
                 fig(cls + ".spec_decode", "decode-only", "tok/s", rec["spec_decode_tok_s"], 0, rec["cases"]),
                 fig(cls + ".plain_decode", "decode-only", "tok/s", rec["plain_decode_tok_s"], 0, rec["cases"])],
                counts=counts, args={"draft": rec["draft"]},
                extra={"record": rec, "variant": variant, "tokens_per_step": num(c[6]), "acceptance": num(c[7]),
                       "table_line": ti, "shape": "Qwen3-8B BF16 (random weights)",
                       "note": "acceptance-trace replay (bench spec --per-class 3 --max-tokens 128 --greedy) with "
                               "PV_CUDA_GEMV_SHARED=2 (h200-2026-12-02-shared-walk.md section 4; the file's header says "
                               "SHARED=2); tokens/step and acceptance as the table on table_line prints them"},
                what="replay Qwen3-8B_BF16 %s qwen2.5-coder-1.5b-ngram %s" % (variant, cls)))
        elif "tg_tok_s" in rec:
            ct = rec["type_k"]
            assert rec["type_v"] == ct and rec["build_commit"] == commit
            ki, krow = kvline[ct]
            assert '"tg_tok_s":%.3f' % rec["tg_tok_s"] in krow
            out.append(bench_json(
                rec, path, i, "kv %s 1: proven bench --backend cuda --cache-type %s --depth 4096 --pp 512 --tg 128 --reps 1, "
                "the command of h200-2026-12-02-shared-walk.md section 5" % (ct, ct), {},
                args={"cache_type": ct},
                extra={"run": "Qwen3-8B_BF16-kv-%s-depth4096" % ct, "variant": variant, "kv_line": ki,
                       "shape": "Qwen3-8B BF16 (random weights)",
                       "note": "one rep, one pair (f16 then f32); the run's own record (knobs, type_k/type_v); "
                               "shared-walk.md section 5 calls it a direction, not a ratio to quote"}))
    return out


def shared_walk():
    return shared_courts() + shared_curves("e") + shared_curves("f") + shared_g()


# ---- H200, 2026-12-02, third session: the curves with the in-place walk (h200-2026-12-02-s3.md) ----

def s3_curve_8b():
    """call 1 (2d21270, spec-check e): the 8B BF16 curve under PV_CUDA_GEMV_SHARED=2, its variant
    named by the .txt lines as in the second session"""
    return txt_curves(RESULTS + "h200-2026-12-02-s3-e.txt", RESULTS + "h200-2026-12-02-s3-e.jsonl",
                      "h200-2026-12-02-s3.md section 1")


def s3_curve_9b():
    """call 2 (2d21270): the Qwen3.5-9B BF16 curve with gemv_shared=2 and window graphs on. Its JSON
    lines have no .txt lines; the results file's section 2 prints ms per step per row count, copied
    as printed (extra.printed names that line); the script asserts it is 1000 r / pp_tok_s of the
    record, i.e. the same run"""
    md, jl = RESULTS + "h200-2026-12-02-s3.md", RESULTS + "h200-2026-12-02-s3-9b-curve.jsonl"
    rows = lines(md)
    sec = next(i for i, r in enumerate(rows) if r.startswith("## 2. "))
    hi = next(i for i in range(sec, len(rows)) if rows[i].startswith("| rows |"))
    pi = next(i for i in range(hi, len(rows)) if rows[i].startswith("| ms per step, this call |"))
    head, cellrow = cells(rows[hi]), cells(rows[pi])
    step = {int(h): v for h, v in zip(head[1:], cellrow[1:]) if re.match(r"[\d.]+$", v)}
    out = []
    for bi, rec in jsonl_at(jl):
        r = int(rec["pp"])
        kn = rec["knobs"]
        assert rec["build_commit"].startswith("2d21270") and kn["cuda.gemv_shared"] == 2 and kn["cuda.window_graphs"] == 1
        assert "%.3f" % (1000.0 * r / rec["pp_tok_s"]) == step[r], (jl, bi)
        variant = "PV_CUDA_GEMV_SHARED=2"
        out.append(bench_json(
            rec, jl, bi, "verify curve Qwen3.5-9B_BF16 %s rows %d" % (variant, r), {"env.PV_CUDA_GEMV_SHARED": 2},
            printed=(md, pi + 1, rows[pi], [fig("step_ms", "observed", "ms per verify step", step[r])]),
            extra={"run": "Qwen3.5-9B_BF16-rows%d-%s" % (r, variant), "rows": r, "variant": variant,
                   "note": "one exact step of r rows (the verify call of r - 1 drafts) at depth 512 on the Qwen3.5-9B BF16 "
                           "shape (random weights), call 2 of h200-2026-12-02-s3.md: cuda.gemv_shared=2 (its only setting "
                           "is PV_CUDA_GEMV_SHARED, src/cuda/tuning.cu) with window graphs on (cuda.window_graphs=1, the "
                           "default), section 2; step_ms as section 2's table prints it (1000 r / pp_tok_s); no .txt line; "
                           "the 16-row step did not finish (section 4)"}))
    assert sorted(step) == sorted(int(rec["pp"]) for _, rec in jsonl_at(jl))
    return out


def s3_curves():
    return s3_curve_8b() + s3_curve_9b()


# ---- H200, 2026-12-02, fourth session (h200-2026-12-02-s4.md) -----------------------------------

def parallel_json(rec, path, line, what, cite):
    """one `proven bench --parallel N` JSON line: N sequences decoded together (one exact step of N
    rows per token, cuda.batch_graphs) and then one after another in the same run"""
    gpu = {"name": rec["gpu"]}
    rt = runtime(rec["build_commit"], rec["backend"], knobs=dict(rec.get("knobs") or {}), threads=rec["threads"], gpu=gpu)
    n = int(rec["reps"])
    figs = [fig("agg", "decode-only", "tok/s", rec["agg_tok_s"], rec["agg_tok_s_sd"], n),
            fig("seq", "decode-only", "tok/s per sequence", rec["seq_tok_s"], 0, n),
            fig("alone_agg", "decode-only", "tok/s", rec["alone_agg_tok_s"], rec["alone_agg_tok_s_sd"], n),
            fig("speedup", "decode-only", "together / alone", rec["speedup"], 0, n)]
    return receipt("bench", path, line, "2026-12-02T00:00:00Z", rt,
                   {"path": rec["model"], "arch": rec["arch"], "dtype": rec["weight_dtype"]},
                   {"class": "synthetic", "prompt_digest": "not stated", "n_prompt": int(rec["pp"]), "n_gen": int(rec["tg"]),
                    "reps": n},
                   figs, counts={"parallel": int(rec["parallel"]), "ids_equal": 1 if rec["ids_equal"] else 0,
                                 "batched_share": rec["batched_share"]},
                   extra={"record": rec, "note": "each sequence's tokens equal together and alone (ids_equal); " + cite},
                   what=what)


def s4_hang():
    """call 1 (0e14275, tools/cuda/hang-check.sh): bench --parallel 1/4/16 on Qwen3-1.7B BF16, then
    the Qwen3.5-9B shape cut to 4 layers at 16 rows per switch (the knobs are each record's own)"""
    jl = RESULTS + "h200-2026-12-02-s4-hang.jsonl"
    out = []
    for bi, rec in jsonl_at(jl):
        assert rec["build_commit"].startswith("0e14275"), (jl, bi)
        if rec.get("test") == "parallel":
            out.append(parallel_json(rec, jl, bi, "parallel %d Qwen3-1.7B_BF16" % rec["parallel"],
                                     "h200-2026-12-02-s4.md section 3"))
            continue
        kn = rec["knobs"]
        variant = "gemv_shared=%d rows_multi=%d pdl=%d window_graphs=%d graphs=%d" % (
            kn["cuda.gemv_shared"], kn["cuda.gemv_rows_multi"], kn["cuda.pdl"], kn["cuda.window_graphs"], kn["cuda.graphs"])
        out.append(bench_json(
            rec, jl, bi, "Qwen3.5-9B_BF16 4 layers rows 16 %s" % variant, {},
            extra={"run": "Qwen3.5-9B_BF16-4L-rows16-" + variant.replace(" ", "-"), "rows": 16, "variant": variant,
                   "note": "one exact step of 16 rows at depth 512 on the Qwen3.5-9B BF16 shape cut to 4 layers (random "
                           "weights), the variant the record's knobs name (the eager-loading run differs by "
                           "CUDA_MODULE_LOADING=EAGER only, h200-2026-12-02-s4-hang.txt); h200-2026-12-02-s4.md section 1"}))
    return out


def s4_later():
    """call 3 (6b03070, spec-check j): the full Qwen3.5-9B BF16 shape at 16 rows with the defaults;
    call 4 (6b03070, spec-check k): bench --parallel 1/4/16 on the 9B and 8B BF16 shapes"""
    out = []
    jl = RESULTS + "h200-2026-12-02-s4-j.jsonl"
    for bi, rec in jsonl_at(jl):
        assert rec["build_commit"].startswith("6b03070") and rec["pp"] == 16, (jl, bi)
        out.append(bench_json(
            rec, jl, bi, "Qwen3.5-9B_BF16 rows 16 defaults", {},
            extra={"run": "Qwen3.5-9B_BF16-rows16-defaults", "rows": 16, "variant": "defaults (cuda.gemv_shared=2)",
                   "note": "one exact step of 16 rows at depth 512 on the full Qwen3.5-9B BF16 shape (random weights), "
                           "finished in 30 s with the receipt's digest; h200-2026-12-02-s4.md sections 1 and 5"}))
    jl = RESULTS + "h200-2026-12-02-s4-k1.jsonl"
    for bi, rec in jsonl_at(jl):
        assert rec["build_commit"].startswith("6b03070") and rec["test"] == "parallel", (jl, bi)
        out.append(parallel_json(rec, jl, bi, "parallel %d %s BF16" % (rec["parallel"], rec["name"]),
                                 "h200-2026-12-02-s4.md section 3"))
    return out


def prompt_figs(row, pp):
    """a `test_cuda prefill-bench` summary line's figures: pp512 (best of 3) as printed, then the precise
    mode, the exact 16-row path, pp4096 and the last row's errors where the line has them"""
    figs = [fig("pp", "observed", "tok/s", pp, 0, 3)]
    for label, rx in (("pp_precise", r"pp512 precise ([\d.]+) tok/s wall"), ("pp_exact16", r"pp512 16-row ([\d.]+) tok/s"),
                      ("pp4096", r"pp4096 prefill ([\d.]+) tok/s wall"),
                      ("err_fast", r"fast rel ([\d.e+-]+)"), ("err_precise", r"precise rel ([\d.e+-]+)")):
        f = re.search(rx, row)
        if f:
            unit = "of the largest logit" if label.startswith("err") else "tok/s"
            figs.append(fig(label, "observed", unit, f.group(1), 0, 1))
    return figs


def s4_prompts():
    """the Qwen3.5-35B-A3B Q8_0 prompt lines of calls 2, 3, 5 and 6 (`test_cuda prefill-bench` on a synth
    file of the shape, 8 or all 40 layers): one receipt per line, the figures as the line prints them"""
    out = []
    pat = re.compile(r"prefill 35B-A3B (\d+) layers (\w+): +pp512 prefill (\d+) kernels.*?pp512 prefill ([\d.]+) tok/s wall")
    for name in ("h", "j", "k", "k2"):
        txt = RESULTS + "h200-2026-12-02-s4-%s.txt" % name
        rows = lines(txt)
        commit = re.search(r"\| proven (\w+)$", rows[0]).group(1)
        for i, row in enumerate(rows, 1):
            m = pat.match(row)
            if not m:
                continue
            layers, ty = int(m.group(1)), m.group(2)
            figs = prompt_figs(row, m.group(4))
            out.append(receipt(
                "bench", txt, i, "2026-12-02T00:00:00Z",
                runtime(commit, "cuda", gpu={"name": "NVIDIA H200"}),
                {"path": "synth qwen3.5-35b-a3b %s, %d layers" % (ty, layers), "arch": "qwen3_5_moe", "dtype": ty},
                {"class": "synthetic", "prompt_digest": "not stated", "n_prompt": 512, "n_gen": 0, "reps": 3},
                figs, counts={"kernels_per_prompt": int(m.group(3))},
                extra={"printed": row, "note": "test_cuda prefill-bench: the prompt path (fast mode) best of 3, precise and the "
                                              "exact 16-row path best of 1, the last row's error against the exact path; "
                                              "h200-2026-12-02-s4.md sections 2 and 6"},
                what="prompt 35B-A3B %s %d layers" % (ty, layers)))
    return out


def s8_prompts():
    """session 8's prompt lines (`spec-check.sh p`: `test_cuda prefill-bench` on synth files of the
    35B-A3B Q8_0 shape at 8 and 40 layers, the 30B-A3B Q8_0 and 9B BF16 shapes) of calls 1-4 and 6: one
    receipt per line, the arm's switches as the runtime's knobs, the figures as the line prints them"""
    out = []
    pat = re.compile(r"prefill (.+?) \[(.+?)\]: rc (\d+) +pp512 prefill (\d+) kernels.*?pp512 prefill ([\d.]+) tok/s wall")
    shapes = {"35B-A3B 8 layers q8_0": ("synth qwen3.5-35b-a3b q8_0, 8 layers", "qwen3_5_moe", "q8_0"),
              "35B-A3B 40 layers q8_0": ("synth qwen3.5-35b-a3b q8_0, 40 layers", "qwen3_5_moe", "q8_0"),
              "30B-A3B q8_0": ("synth qwen3-30b-a3b q8_0", "qwen3_moe", "q8_0"),
              "9B bf16": ("synth qwen3.5-9b bf16", "qwen3_5", "bf16")}
    words = {"PV_CUDA_PREFILL_MOE": ("cuda.prefill_moe", {"gemm": 0, "gemv": 1, "sync": 2}),
             "PV_CUDA_PREFILL_DELTA": ("cuda.prefill_delta", {"quad": 0, "decode": 1, "cols": 2, "chunk": 3})}
    olds = {4: "2c8ce91", 6: "f0edc91"}  # the baseline build of the calls with an "old" arm
    for call in (1, 2, 3, 4, 6):
        txt = RESULTS + "h200-2026-12-03-s8-%d.txt" % call
        rows = lines(txt)
        commit = re.search(r"\| proven (\w+)$", rows[0]).group(1)
        for i, row in enumerate(rows, 1):
            m = pat.match(row)
            if not m:
                continue
            label, arm = m.group(1), m.group(2)
            knobs = {"cuda.prefill_moe": 0, "cuda.prefill_delta": 0 if call == 1 else 3}
            c = commit
            if arm == "old":
                c = olds[call]
            elif arm != "base":
                for kv in arm.split():
                    k, v = kv.split("=")
                    name, vals = words[k]
                    knobs[name] = vals[v]
            figs = prompt_figs(row, m.group(5))
            path, arch, ty = shapes[label]
            out.append(receipt(
                "bench", txt, i, "2026-12-03T00:00:00Z",
                runtime(c, "cuda", knobs=knobs, gpu={"name": "NVIDIA H200"}),
                {"path": path, "arch": arch, "dtype": ty},
                {"class": "synthetic", "prompt_digest": "not stated", "n_prompt": 512, "n_gen": 0, "reps": 3},
                figs, counts={"kernels_per_prompt": int(m.group(4))},
                extra={"printed": row, "arm": arm, "call": call,
                       "note": "test_cuda prefill-bench: the prompt path (fast mode) best of 3, precise and the exact 16-row "
                               "path best of 1, the last row's error against the exact path (rc 1: only its gross error check "
                               "failed, as on every random-weight 40-layer file since v5); h200-2026-12-03-s8.md section 4"},
                what="prompt %s [%s]" % (label, arm)))
    return out


# ---- CPU (this project's 2-vCPU machine) -------------------------------------------------------

def cpu_peer():
    """issue 10's alternating CPU benchmark: proven's and llama.cpp's medians per row"""
    path = RESULTS + "cpu-peer-2026-12-02.md"
    out = []
    rows = lines(path)
    start = rows.index("## Speed")
    for i, row in enumerate(rows, 1):
        if i <= start or not row.startswith("| ") or row.startswith("| same GGUF") or row.startswith("| ---"):
            continue
        if row.startswith("## ") or i > start + 25:
            break
        c = cells(row)
        if len(c) != 9:
            continue
        name, depth, test = c[0], int(c[1]), c[2]
        is_tg = test.startswith("tg")
        n = int(test[2:])
        fname, scope = ("tg", "decode-only") if is_tg else ("pp", "observed")
        wl = {"class": "synthetic", "prompt_digest": "not stated", "n_prompt": 0 if is_tg else n, "n_gen": n if is_tg else 0,
              "depth": depth, "reps": 3}
        common = {"row": name, "test": test, "rounds": c[8]}
        out.append(receipt(
            "bench", path, i, "2026-12-02T00:00:00Z",
            runtime("443651e", "cpu", knobs={"cpu.exact_activations": 0}, threads=2, compiler="gcc 12.2.0",
                    cpu="AMD EPYC (Zen 5), 2 vCPU", isa="avx512"),
            {"path": name},
            wl, [fig(fname, scope, "tok/s", num(c[3]))],
            extra=dict(common, engine="proven", min_max=c[4],
                       note="median over clean rounds; builds 443651e (every row) and 419c5cc (second pass, same arithmetic)"),
            what="proven, %s %s depth %d" % (name, test, depth)))
        out.append(receipt(
            "peer.bench", path, i, "2026-12-02T00:00:00Z",
            runtime("0c1e570", "cpu", threads=2, cpu="AMD EPYC (Zen 5), 2 vCPU"),
            {"path": name},
            wl, [fig(fname, scope, "tok/s", num(c[5]))],
            extra=dict(common, engine="llama.cpp", min_max=c[6], ratio_printed=num(c[7]),
                       note="llama-bench -t 2, CPU backend, default f16 KV cache"),
            what="llama.cpp, %s %s depth %d" % (name, test, depth)))
    return out


def cpu_kv_quality():
    """the KV cache types' quality cost against the f32 cache (bench_kld)"""
    path = RESULTS + "cpu-kv-cache-2026-12-02.md"
    out = []
    model = None
    for i, row in enumerate(lines(path), 1):
        m = re.match(r"## (Qwen\S+ \S+) \((\d+) chunks, (\d+) tokens scored\)", row)
        if m:
            model, tokens = m.group(1), int(m.group(3))
            continue
        if not model or not re.match(r"\| (f16|bf16|q8_0) ", row):
            continue
        c = cells(row)
        out.append(receipt(
            "perplexity", path, i, "2026-12-02T00:00:00Z",
            runtime("443651e", "cpu", threads=2, compiler="gcc 12.2.0", cpu="AMD EPYC (Zen 5), 2 vCPU"),
            {"path": model},
            {"class": "perplexity", "prompt_digest": "tests/data/text/ppl.txt", "n_prompt": 512, "n_gen": 0},
            [fig("ppl", "quality", "perplexity", num(c[1]), 0, tokens), fig("ppl_ratio", "quality", "ratio to the f32 cache", num(c[2]), 0, tokens),
             fig("kld_mean", "quality", "nats", num(c[3]), 0, tokens), fig("same_top1", "quality", "%", num(c[7]), 0, tokens)],
            args={"cache_type": c[0]},
            extra={"note": "build/tools/bench_kld MODEL tests/data/text/ppl.txt 512 2 CHUNKS cache: KL(f32 cache || typed cache)"},
            what="%s cache %s" % (model, c[0])))
    return out


def cpu_spec():
    """speculation on the CPU: the quieter run with a fixed draft length, and MoE grouping by expert"""
    path = RESULTS + "spec-2026-12-02.md"
    out = []
    rows = lines(path)
    quiet = next(i for i, r in enumerate(rows) if r.startswith("A second run in a quieter window"))
    moe = rows.index("## 5. MoE verify windows by expert overlap")
    for i, row in enumerate(rows, 1):
        if quiet < i < quiet + 10 and re.match(r"\| (0\.5B draft|n-gram)", row):
            c = cells(row)
            cls = c[1]
            draft = "qwen2.5-coder-0.5b" if c[0].startswith("0.5B") else "ngram"
            k = int(re.search(r"k = (\d+)", c[0]).group(1))
            out.append(receipt(
                "bench.spec", path, i, "2026-12-02T00:00:00Z",
                runtime("aba61d1", "cpu", threads=2, compiler="gcc 12.2.0", cpu="AMD EPYC (Zen 5), 2 vCPU"),
                {"path": "qwen2.5-coder-1.5b.gguf"},
                {"class": cls, "prompt_digest": "tests/data/spec/cases.jsonl", "n_prompt": 2, "n_gen": 96},
                [fig(cls + ".speedup_decode", "decode-only", "ratio spec/plain", num(c[4])),
                 fig(cls + ".speedup_e2e", "end-to-end", "ratio spec/plain", num(c[5])),
                 fig(cls + ".spec_decode", "decode-only", "tok/s", num(c[3])),
                 fig(cls + ".plain_decode", "decode-only", "tok/s", num(c[2]))],
                args={"draft": draft, "draft_fixed": k},
                extra={"tokens_per_step": num(c[6]), "acceptance": num(c[7]),
                       "note": "02:39-02:41 UTC, load average 2-4, --greedy, 2 cases per class, 96 tokens, --draft-fixed"},
                what="%s %s" % (c[0], cls)))
        if moe < i < moe + 25 and re.match(r"\| \d+ \| ", row):
            c = cells(row)
            r = int(c[0])
            for arm, col in ((1, 1), (0, 2)):
                out.append(receipt(
                    "bench", path, i, "2026-12-02T00:00:00Z",
                    runtime("not stated", "cpu", knobs={"cpu.moe_group": arm}, threads=2, cpu="AMD EPYC (Zen 5), 2 vCPU"),
                    {"path": "qwen3-30b-a3b-4layers-q8_0.gguf"},
                    {"class": "synthetic", "prompt_digest": "not stated", "n_prompt": r, "n_gen": 1, "reps": 5},
                    [fig("pp", "observed", "tok/s", num(c[col]), 0, 3)],
                    extra={"run": "moe-rows%d-group%d" % (r, arm),
                           "note": "tok/s of the r-row exact call, median of 3 rounds on a loaded machine (rounds varied up to 3x)"},
                    what="MoE %d rows, cpu.moe_group=%d" % (r, arm)))
    return out


# ---- H200, 2026-12-02, fifth session (h200-2026-12-02-s5.md) ------------------------------------

def s5_benches():
    """spec-check l, calls 1-4: decode A/Bs of cuda.q8_act (tg128 after pp512; named by the .jsonl's
    "name"), the exact-step curve (rows 1/4/16 at depth 512, unnamed: its knobs say the arm), and the
    KV cache at depth 4096 (call 1). Call 1's q8_act A/B is left out: its build (c116f0b) had the
    integer GEMVs but not the call into them (h200-2026-12-02-s5.md section 1), so both arms ran the
    same kernels."""
    out = []
    for part, build, sec in (("l1", "c116f0b", 4), ("l2", "6724e73", 2), ("l3", "03458bc", 2), ("l4", "993a090", 2)):
        jl = RESULTS + "h200-2026-12-02-s5-%s.jsonl" % part
        for bi, rec in jsonl_at(jl):
            if "tg_tok_s" not in rec:
                continue
            name = rec.get("name")
            if part == "l1" and not (name or "").startswith("8B BF16 kv"):
                continue
            assert rec["build_commit"].startswith(build), (jl, bi)
            if not name:
                name = "8B Q4_K_M rows %d q8_act=%d" % (rec["pp"], rec["knobs"]["cuda.q8_act"])
            out.append(bench_json(rec, jl, bi, name, {},
                                  extra={"run": name.replace(" ", "-"),
                                         "note": "random weights of the published shape; h200-2026-12-02-s5.md section %d" % sec}))
    return out


PARTS = {"h200": [v5_peer, v5b_splits, spec_d, shared_walk], "cpu": [cpu_peer, cpu_kv_quality, cpu_spec],
         "h200-s3": [s3_curves], "h200-s4": [s4_hang, s4_later, s4_prompts], "h200-s5": [s5_benches],
         "h200-s8": [s8_prompts]}


def render(part):
    out = []
    for f in PARTS[part]:
        out += f()
    return [json.dumps(r, sort_keys=True, separators=(",", ":")) for r in out]


def main(argv):
    if len(argv) == 4 and argv[1] == "--check":
        want = render(argv[2])
        have = lines(argv[3])
        if have[:len(want)] != want:
            bad = next(i for i, (a, b) in enumerate(zip(have, want)) if a != b) if len(have) >= len(want) else len(have)
            print("%s: line %d differs from the conversion of the committed tables" % (argv[3], bad + 1), file=sys.stderr)
            return 1
        return 0
    if len(argv) != 2 or argv[1] not in PARTS:
        print(__doc__, file=sys.stderr)
        return 2
    for s in render(argv[1]):
        print(s)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
