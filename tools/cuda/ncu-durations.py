#!/usr/bin/env python3
"""Sums an `ncu --metrics gpu__time_duration.sum --csv` log per kernel name over a range of launches.

    tools/cuda/ncu-durations.py LOG.csv [FIRST LAST]

FIRST..LAST (0-based, inclusive) select launches in profile order (e.g. one prompt's kernels);
default: all. Prints a markdown table: kernel, launches, microseconds, share. Python 3 stdlib only.
"""
import collections
import csv
import re
import sys


def main(argv):
    if len(argv) not in (2, 4):
        print(__doc__, file=sys.stderr)
        return 2
    with open(argv[1], encoding="utf-8") as f:
        rows = list(csv.DictReader(l for l in f if l.startswith('"')))
    rows = [r for r in rows if r.get("Metric Name") == "gpu__time_duration.sum"]
    if len(argv) == 4:
        rows = rows[int(argv[2]):int(argv[3]) + 1]
    agg = collections.defaultdict(lambda: [0, 0.0])
    for r in rows:
        name = re.sub(r"\(.*", "", r["Kernel Name"]).replace("(anonymous namespace)::", "").replace("<unnamed>::", "")
        name = name.replace("void ", "").strip()
        agg[name][0] += 1
        agg[name][1] += float(r["Metric Value"].replace(",", "")) / 1000.0  # ns -> us
    total = sum(v[1] for v in agg.values())
    print("| kernel | launches | us | share |")
    print("| --- | ---: | ---: | ---: |")
    for name, (n, us) in sorted(agg.items(), key=lambda kv: -kv[1][1]):
        print("| `%s` | %d | %.1f | %.1f %% |" % (name, n, us, 100.0 * us / total if total else 0.0))
    print("| all | %d | %.1f | |" % (sum(v[0] for v in agg.values()), total))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
