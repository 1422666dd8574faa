#!/usr/bin/env python3
"""make_quant_vectors.py: reference vectors for src/quant/quant.c and GGUF files for tests/test_gguf.c.

Writes, for each ggml block type the engine reads (q8_0 q4_0 q4_1 q5_0 q5_1 q4_k q5_k q6_k),
tests/data/quant/<type>.bin:

    char magic[4] "PVQ2" | char type[8] (NUL-padded) | u32 block_elems | u32 block_bytes
    u32 n_deq | u32 n_q | u32 q_source (0: none, 1: gguf-py, 2: ggml C, 3: both, identical)
    u32 n_gen | u32 gen_chunk | u64 gen_seed
    u8  deq_blocks[n_deq * block_bytes]      raw blocks (random bytes with random finite f16
                                             scales, then blocks of quantized random data)
    f32 deq_expect[n_deq * block_elems]      their dequantization (gguf-py, and ggml's C
                                             dequantize_row_* when --ggml is given: must agree)
    f32 q_input[n_q * block_elems]           data to quantize (many distributions, edge cases)
    u8  q_expect[n_q * block_bytes]          the reference quantization of q_input
    u64 gen_hash[n_gen / gen_chunk]          FNV-1a 64 of the reference quantization of each
                                             chunk of gen_chunk generated blocks (see gen_blocks:
                                             integer xorshift64* and exact float scaling, so C
                                             regenerates the same inputs; a cheap way to check
                                             thousands of blocks for a few hundred bytes)

little-endian. Reference implementations:
  * the PyPI `gguf` package (numpy): dequantization of every type, quantization of the
    32-element types (gguf 0.19 has no K-quant quantizer);
  * with --ggml DIR (a ggml or llama.cpp checkout): ggml's own C reference, ggml-quants.c,
    compiled here as a small oracle program with plain -O2 and no -march flags (as ggml-base is
    built), giving quantize_row_<type>_ref (what llama-quantize uses without an importance
    matrix) and dequantize_row_<type>. Where both exist they must agree byte for byte.

With --gguf-corpus it also writes tests/corpus/gguf/valid/pygguf_*.gguf with the gguf package's
GGUFWriter (an independent writer): every metadata value type, arrays of strings, nested arrays,
and tensors of every supported type whose values tests/test_gguf.c checks.

    python3 -m venv /tmp/ggufvenv && /tmp/ggufvenv/bin/pip install gguf
    /tmp/ggufvenv/bin/python tools/reference/make_quant_vectors.py --ggml /path/to/ggml --gguf-corpus

Deterministic (fixed seed): two runs write identical files.
"""
import argparse
import os
import shutil
import struct
import subprocess
import sys
import tempfile

import numpy as np
import gguf
from gguf import GGMLQuantizationType as QT
from gguf import quants

TYPES = [  # name, ggml type, block elems, block bytes, offsets of f16 fields in a block
    ("q8_0", QT.Q8_0, 32, 34, [0]),
    ("q4_0", QT.Q4_0, 32, 18, [0]),
    ("q4_1", QT.Q4_1, 32, 20, [0, 2]),
    ("q5_0", QT.Q5_0, 32, 22, [0]),
    ("q5_1", QT.Q5_1, 32, 24, [0, 2]),
    ("q4_k", QT.Q4_K, 256, 144, [0, 2]),
    ("q5_k", QT.Q5_K, 256, 176, [0, 2]),
    ("q6_k", QT.Q6_K, 256, 210, [208]),
]

ORACLE_C = r"""
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "ggml-common.h"
#include "ggml-quants.h"
/* oracle q|d TYPE N: quantize N f32 (stdin) to blocks, or dequantize blocks of N elements */
int main(int argc, char** argv) {
    if (argc != 4) return 2;
    int q = argv[1][0] == 'q';
    const char* t = argv[2];
    long n = atol(argv[3]);
    size_t bb = 0;
    long qk = 32;
    if (!strcmp(t, "q8_0")) bb = sizeof(block_q8_0);
    else if (!strcmp(t, "q4_0")) bb = sizeof(block_q4_0);
    else if (!strcmp(t, "q4_1")) bb = sizeof(block_q4_1);
    else if (!strcmp(t, "q5_0")) bb = sizeof(block_q5_0);
    else if (!strcmp(t, "q5_1")) bb = sizeof(block_q5_1);
    else if (!strcmp(t, "q4_k")) { bb = sizeof(block_q4_K); qk = 256; }
    else if (!strcmp(t, "q5_k")) { bb = sizeof(block_q5_K); qk = 256; }
    else if (!strcmp(t, "q6_k")) { bb = sizeof(block_q6_K); qk = 256; }
    else return 3;
    size_t nb = (size_t)(n / qk);
    float* f = malloc((size_t)n * 4);
    unsigned char* b = malloc(nb * bb);
    if (q) {
        if (fread(f, 4, (size_t)n, stdin) != (size_t)n) return 4;
#define Q(name, fn) if (!strcmp(t, name)) fn(f, (void*)b, n);
        Q("q8_0", quantize_row_q8_0_ref) Q("q4_0", quantize_row_q4_0_ref) Q("q4_1", quantize_row_q4_1_ref)
        Q("q5_0", quantize_row_q5_0_ref) Q("q5_1", quantize_row_q5_1_ref) Q("q4_k", quantize_row_q4_K_ref)
        Q("q5_k", quantize_row_q5_K_ref) Q("q6_k", quantize_row_q6_K_ref)
        fwrite(b, bb, nb, stdout);
    } else {
        if (fread(b, bb, nb, stdin) != nb) return 4;
#define D(name, fn) if (!strcmp(t, name)) fn((const void*)b, f, n);
        D("q8_0", dequantize_row_q8_0) D("q4_0", dequantize_row_q4_0) D("q4_1", dequantize_row_q4_1)
        D("q5_0", dequantize_row_q5_0) D("q5_1", dequantize_row_q5_1) D("q4_k", dequantize_row_q4_K)
        D("q5_k", dequantize_row_q5_K) D("q6_k", dequantize_row_q6_K)
        fwrite(f, 4, (size_t)n, stdout);
    }
    return 0;
}
"""


def build_oracle(ggml_dir, cc, tmp):
    """Compiles ggml-quants.c with a driver; returns the program's path."""
    for root in (ggml_dir, os.path.join(ggml_dir, "ggml")):
        src = os.path.join(root, "src", "ggml-quants.c")
        if os.path.exists(src):
            break
    else:
        sys.exit(f"{ggml_dir}: no src/ggml-quants.c or ggml/src/ggml-quants.c")
    drv = os.path.join(tmp, "oracle.c")
    with open(drv, "w") as f:
        f.write(ORACLE_C)
    exe = os.path.join(tmp, "oracle")
    inc = ["-I" + os.path.join(root, d) for d in ("include", "src", "src/ggml-cpu")]
    # -ffunction-sections + --gc-sections drop the code that needs the rest of ggml.
    cmd = [cc, "-std=gnu11", "-O2", "-DNDEBUG", "-ffunction-sections", "-Wl,--gc-sections", *inc,
           "-o", exe, drv, src, "-lm"]
    subprocess.run(cmd, check=True)
    return exe


def oracle_run(exe, mode, name, n, data):
    r = subprocess.run([exe, mode, name, str(n)], input=data, stdout=subprocess.PIPE, check=True)
    return r.stdout


def rand_half(rng, n):
    """Random finite f16 bit patterns: all exponents (subnormals, zero), both signs."""
    h = rng.integers(0, 1 << 16, size=n, dtype=np.uint32)
    exp = (h >> 10) & 31
    h = np.where(exp == 31, h & ~np.uint32(31 << 10) | np.uint32(30 << 10), h)  # no inf/NaN
    # more of the scale range that real files use (|d| ~ 1e-4 .. 1e-1)
    real = rng.integers(0, 2, size=n).astype(bool)
    sign = rng.integers(0, 2, size=n, dtype=np.uint32) << 15
    small = sign | (rng.integers(1, 16, size=n, dtype=np.uint32) << 10) | rng.integers(0, 1024, size=n, dtype=np.uint32)
    h = np.where(real, small, h)
    h[:4] = [0x0000, 0x8000, 0x0001, 0x7bff][: min(4, n)]
    return h.astype(np.uint16)


def random_blocks(rng, nb, bb, half_offsets):
    raw = rng.integers(0, 256, size=(nb, bb), dtype=np.uint8)
    for off in half_offsets:
        raw[:, off:off + 2] = rand_half(rng, nb).view(np.uint8).reshape(nb, 2)
    return raw


def quant_inputs(rng, qk, nb):
    """nb blocks of qk floats covering typical weights and the quantizers' edge cases."""
    blocks = []
    def add(v):
        blocks.append(np.asarray(v, dtype=np.float32).reshape(qk))
    add(np.zeros(qk))                                   # all zero
    add(np.full(qk, 0.37))                              # constant positive
    add(np.full(qk, -2.5))                              # constant negative
    add(rng.standard_normal(qk) * 1e-17)                # below GROUP_MAX_EPS
    add(rng.standard_normal(qk) * 1e-6)                 # f16 scales go subnormal
    add(rng.standard_normal(qk) * 3e4)                  # f16 scales near overflow
    add(np.abs(rng.standard_normal(qk)))                # positive only (min > 0)
    add(-np.abs(rng.standard_normal(qk)))               # negative only
    v = rng.standard_normal(qk) * 0.02
    v[rng.integers(0, qk)] = 1.5                        # one outlier
    add(v)
    add(np.arange(qk) - qk / 2)                         # integers: exact ties
    add((np.arange(qk) % 17) * 0.125 - 1)               # few distinct values
    v = np.zeros(qk)
    v[::7] = rng.standard_normal(len(v[::7]))          # sparse
    add(v)
    while len(blocks) < nb:
        k = len(blocks) % 4
        if k == 0:
            v = rng.standard_normal(qk) * 0.02          # typical weights
        elif k == 1:
            v = rng.standard_t(3, qk) * 0.05            # heavy tails
        elif k == 2:
            v = rng.uniform(-1, 1, qk)
        else:
            # bf16-rounded weights, as real checkpoints are
            v = (rng.standard_normal(qk) * 0.03).astype(np.float32)
            v = (v.view(np.uint32) & np.uint32(0xffff0000)).view(np.float32)
        if qk == 256 and len(blocks) % 3 == 0:
            v = v * np.repeat(rng.uniform(0.05, 3.0, 8), 32)  # sub-block scales vary
        add(v)
    return np.stack(blocks[:nb])


MASK64 = (1 << 64) - 1


class XorShift:
    """xorshift64*, the generator tests/test_quant.c uses for the gen_hash blocks."""

    def __init__(self, seed):
        self.s = seed & MASK64

    def next(self):
        s = self.s
        s ^= s >> 12
        s ^= (s << 25) & MASK64
        s ^= s >> 27
        self.s = s
        return ((s * 0x2545F4914F6CDD1D) & MASK64) >> 32


def gen_blocks(seed, qk, nb):
    """nb blocks of qk floats, each (int) * 2^e exactly: the same recipe as gen_block() in
    tests/test_quant.c."""
    g = XorShift(seed)
    out = np.zeros((nb, qk), dtype=np.float32)
    for b in range(nb):
        kind = g.next() % 8
        e = int(g.next() % 25) - 20
        f = [1 + g.next() % 7 for _ in range(qk // 32)]
        vals = []
        for i in range(qk):
            r = g.next()
            v = (r & 0xFFFF) + (r >> 16) - 65535
            if kind == 4:
                v = v if g.next() % 4 == 0 else v >> 8
            elif kind == 5:
                v *= f[i // 32]
            elif kind == 6:
                v = v if g.next() % 3 == 0 else 0
            elif kind == 7:
                v = abs(v)
            if b == 0:
                v = 0
            elif b == 1:
                v = 12345
            vals.append(v)
        out[b] = np.array(vals, dtype=np.float32) * np.float32(2.0 ** e)
    return out


def fnv1a64(data):
    h = 0xCBF29CE484222325
    for byte in data:
        h = ((h ^ byte) * 0x100000001B3) & MASK64
    return h


def make_type(name, qt, qk, bb, halves, rng, oracle, out_dir, index):
    n_rand = 48 if qk == 32 else 16
    n_qd = 48 if qk == 32 else 16
    n_q = 96 if qk == 32 else 32

    q_input = quant_inputs(rng, qk, n_q)
    sources = 0
    q_gguf = q_oracle = None
    try:
        q_gguf = quants.quantize(q_input.reshape(-1), qt).reshape(n_q, bb)
        sources |= 1
    except NotImplementedError:
        pass
    if oracle:
        q_oracle = np.frombuffer(oracle_run(oracle, "q", name, q_input.size, q_input.tobytes()),
                                 dtype=np.uint8).reshape(n_q, bb)
        sources |= 2
    if q_gguf is not None and q_oracle is not None and not np.array_equal(q_gguf, q_oracle):
        bad = np.nonzero((q_gguf != q_oracle).any(axis=1))[0]
        sys.exit(f"{name}: gguf-py and ggml C quantizers disagree on blocks {bad[:10]}")
    q_expect = q_oracle if q_oracle is not None else q_gguf
    if q_expect is None:
        q_input = q_input[:0]
        q_expect = np.zeros((0, bb), dtype=np.uint8)
        print(f"{name}: no quantizer reference (gguf {gguf.__name__} lacks it; pass --ggml)")

    # Blocks to dequantize: random bytes, then real quantized data from another draw.
    deq = random_blocks(rng, n_rand, bb, halves)
    more = quant_inputs(rng, qk, n_qd + 12)[12:]
    if q_expect.shape[0]:
        src_q = q_oracle if q_oracle is not None else None
        if src_q is not None:
            more_q = np.frombuffer(oracle_run(oracle, "q", name, more.size, more.astype(np.float32).tobytes()),
                                   dtype=np.uint8).reshape(n_qd, bb)
        else:
            more_q = quants.quantize(more.reshape(-1).astype(np.float32), qt).reshape(n_qd, bb)
        deq = np.concatenate([deq, more_q])
    n_deq = deq.shape[0]
    d_gguf = quants.dequantize(deq.reshape(-1), qt).astype(np.float32).reshape(-1)
    if oracle:
        d_c = np.frombuffer(oracle_run(oracle, "d", name, n_deq * qk, deq.tobytes()), dtype=np.float32)
        if not np.array_equal(d_gguf.view(np.uint32), d_c.view(np.uint32)):
            bad = np.nonzero(d_gguf.view(np.uint32) != d_c.view(np.uint32))[0]
            sys.exit(f"{name}: gguf-py and ggml C dequantizers disagree at {bad[:10]}")

    # Many generated blocks, checked through chunk hashes.
    n_gen, chunk = (16384, 256) if qk == 32 else (4096, 64)
    seed = 0x9E3779B97F4A7C15 ^ (index + 1)
    hashes = []
    if q_expect.shape[0]:
        gen = gen_blocks(seed, qk, n_gen)
        gq = None
        if oracle:
            gq = np.frombuffer(oracle_run(oracle, "q", name, gen.size, gen.tobytes()), dtype=np.uint8).reshape(n_gen, bb)
        if sources & 1:
            gp = quants.quantize(gen.reshape(-1), qt).reshape(n_gen, bb)
            if gq is not None and not np.array_equal(gp, gq):
                sys.exit(f"{name}: gguf-py and ggml C disagree on generated blocks")
            gq = gp if gq is None else gq
        hashes = [fnv1a64(gq[c:c + chunk].tobytes()) for c in range(0, n_gen, chunk)]
    else:
        n_gen = 0

    path = os.path.join(out_dir, f"{name}.bin")
    with open(path, "wb") as f:
        f.write(b"PVQ2" + name.encode().ljust(8, b"\0"))
        f.write(struct.pack("<7IQ", qk, bb, n_deq, q_input.shape[0], sources, n_gen, chunk, seed))
        f.write(deq.astype(np.uint8).tobytes())
        f.write(d_gguf.astype("<f4").tobytes())
        f.write(q_input.astype("<f4").tobytes())
        f.write(q_expect.astype(np.uint8).tobytes())
        f.write(struct.pack(f"<{len(hashes)}Q", *hashes))
    print(f"{path}: {n_deq} blocks to dequantize, {q_input.shape[0]} + {n_gen} to quantize "
          f"(reference: {['none', 'gguf-py', 'ggml C', 'gguf-py = ggml C'][sources]}), "
          f"{os.path.getsize(path)} bytes")


def make_gguf_corpus(out_dir, rng):
    """Valid files written by gguf-py's GGUFWriter; test_gguf.c knows the expected content."""
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, "pygguf_all_types.gguf")
    w = gguf.GGUFWriter(path, "qwen3")  # writes general.architecture first
    w.add_uint8("t.u8", 200)
    w.add_int8("t.i8", -100)
    w.add_uint16("t.u16", 65000)
    w.add_int16("t.i16", -32000)
    w.add_uint32("t.u32", 4000000000)
    w.add_int32("t.i32", -2000000000)
    w.add_float32("t.f32", 0.15625)
    w.add_bool("t.bool", True)
    w.add_string("t.str", "héllo, wörld")
    w.add_uint64("t.u64", 18000000000000000000)
    w.add_int64("t.i64", -9000000000000000000)
    w.add_float64("t.f64", -2.718281828459045)
    w.add_array("t.arr_i32", [1, -2, 3])
    w.add_array("t.arr_str", ["a", "", "ccc", "<|im_end|>"])
    w.add_array("t.arr_f32", [0.5, -1.25])
    w.add_array("t.arr_bool", [True, False, True])
    w.add_array("t.arr_nested", [[1, 2], [3, 4, 5]])
    w.add_array("t.arr_nested_str", [["x", "yy"], ["zzz"]])
    w.add_uint32("qwen3.context_length", 40960)
    w.add_float32("qwen3.rope.freq_base", 1000000.0)
    # Tensors: ne = {64 or 256, 2}; values i * 0.01 - 1 quantized by the reference where it can.
    for tname, qt, ncols in (("f32", QT.F32, 64), ("f16", QT.F16, 64), ("bf16", QT.BF16, 64),
                             ("q8_0", QT.Q8_0, 64), ("q4_0", QT.Q4_0, 64), ("q4_1", QT.Q4_1, 64),
                             ("q5_0", QT.Q5_0, 64), ("q5_1", QT.Q5_1, 64)):
        vals = (np.arange(2 * ncols, dtype=np.float32) * np.float32(0.01) - np.float32(1)).reshape(2, ncols)
        data = quants.quantize(vals, qt)
        w.add_tensor(f"t.{tname}", data, raw_dtype=qt)
    # K types: raw bytes (gguf-py cannot quantize them); the test dequantizes and compares with
    # the values gguf-py's dequantizer gives, stored next to them as F32.
    for tname, qt, bb, halves in (("q4_k", QT.Q4_K, 144, [0, 2]), ("q5_k", QT.Q5_K, 176, [0, 2]),
                                  ("q6_k", QT.Q6_K, 210, [208])):
        raw = random_blocks(rng, 2, bb, halves)
        raw[:, halves[0]:halves[0] + 2] = np.array([0x2e66], dtype=np.uint16).view(np.uint8)  # d = 0.1
        w.add_tensor(f"t.{tname}", raw, raw_dtype=qt)
        w.add_tensor(f"t.{tname}.f32", quants.dequantize(raw, qt).astype(np.float32).reshape(2, 256))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"{path}: {os.path.getsize(path)} bytes")

    # A second file: no tensors, custom alignment, version as written.
    path = os.path.join(out_dir, "pygguf_no_tensors.gguf")
    w = gguf.GGUFWriter(path, "qwen35")
    w.add_custom_alignment(64)
    w.add_string("general.name", "empty")
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"{path}: {os.path.getsize(path)} bytes")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="tests/data/quant")
    ap.add_argument("--ggml", help="ggml or llama.cpp checkout: quantizer/dequantizer oracle from ggml-quants.c")
    ap.add_argument("--cc", default=os.environ.get("CC", "cc"))
    ap.add_argument("--gguf-corpus", action="store_true", help="also write tests/corpus/gguf/valid/")
    ap.add_argument("--only", help="comma-separated type names")
    a = ap.parse_args()

    os.makedirs(a.out, exist_ok=True)
    tmp = tempfile.mkdtemp()
    try:
        oracle = build_oracle(a.ggml, a.cc, tmp) if a.ggml else None
        for i, (name, qt, qk, bb, halves) in enumerate(TYPES):
            if a.only and name not in a.only.split(","):
                continue
            rng = np.random.default_rng(20260 + i)
            make_type(name, qt, qk, bb, halves, rng, oracle, a.out, i)
        if a.gguf_corpus:
            make_gguf_corpus("tests/corpus/gguf/valid", np.random.default_rng(7))
    finally:
        shutil.rmtree(tmp)


if __name__ == "__main__":
    main()
