#!/usr/bin/env python3
"""Compares a freshly generated fixture tree with the committed one: model files byte for byte,
reference ids exactly, reference logits by max abs difference. Used to check that the GPU
machine's transformers reproduces the committed fixtures.

    python3 tools/reference/compare_fixtures.py NEW_DIR [tests/fixtures]
"""
import hashlib, json, os, sys

from safetensors.numpy import load_file


def sha(p):
    return hashlib.sha256(open(p, "rb").read()).hexdigest()


def main():
    new, old = sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "tests/fixtures"
    bad = 0
    for name in sorted(os.listdir(old)):
        od, nd = os.path.join(old, name), os.path.join(new, name)
        if not os.path.isdir(od):
            continue
        if not os.path.isdir(nd):
            print(f"{name}: missing in {new}"); bad += 1; continue
        diff_files = [f for f in sorted(os.listdir(od))
                      if f not in ("reference.json", "reference.safetensors")
                      and (not os.path.exists(os.path.join(nd, f)) or sha(os.path.join(od, f)) != sha(os.path.join(nd, f)))]
        ro, rn = json.load(open(os.path.join(od, "reference.json"))), json.load(open(os.path.join(nd, "reference.json")))
        ids_same = ro["cases"] == rn["cases"]
        lo, ln = load_file(os.path.join(od, "reference.safetensors")), load_file(os.path.join(nd, "reference.safetensors"))
        mx = max(float(abs(lo[k].astype("float64") - ln[k]).max()) for k in lo)
        scale = max(float(abs(lo[k]).max()) for k in lo)
        same = sha(os.path.join(od, "reference.safetensors")) == sha(os.path.join(nd, "reference.safetensors"))
        # transformers runs the delta rule in float32 whatever the model dtype, and its result
        # depends on the CPU's SIMD paths: accept 2e-5 of the largest |logit| (ids must match)
        ok = not diff_files and ids_same and mx <= 2e-5 * max(scale, 1.0)
        bad += not ok
        print(f"{name:16s} model files {'identical' if not diff_files else 'DIFFER: ' + ','.join(diff_files)}; "
              f"ids {'identical' if ids_same else 'DIFFER'}; logits {'bitwise identical' if same else f'max |diff| {mx:.3g} ({mx / max(scale, 1.0):.1e} of max |logit|)'}")
    print("all fixtures reproduced" if not bad else f"{bad} fixture(s) differ")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
