#!/usr/bin/env python3
"""Summarises update-experiment runs of `sepkv bench` by build label.

Usage: scripts/update-summary.py FILE...

Each FILE is the text output of one `sepkv bench --workload update` run;
its label is the file name without the extension and the trailing run
number (`before-3.txt` -> `before`). For each engine and label, over all
update phases: mean throughput (kops/s), mean p99.9 (µs), p99.99 mean,
median and maximum (µs), the phases whose p99.99 passed 2 ms, the longest
write (µs) and the range of space amplification.
"""
import collections
import os
import statistics
import sys


def main(files):
    rows = collections.defaultdict(list)
    for f in files:
        label = os.path.basename(f).rsplit(".", 1)[0].rsplit("-", 1)[0]
        with open(f) as fh:
            for line in fh:
                p = line.split()
                # engine workload phase ops secs kops p50 p99 p99.9 p99.99 max_us wa ra sa ...
                if len(p) > 13 and p[0].startswith("sepkv:") and p[2].startswith("update-"):
                    rows[(p[0], label)].append(
                        (float(p[5]), float(p[8]), float(p[9]), float(p[10]), float(p[13]))
                    )
    print("engine          build            phases  kops/s  p99.9  p99.99 mean/median/max  >2ms  max_us  SA")
    for (engine, label), v in sorted(rows.items()):
        p4 = [x[2] for x in v]
        print(
            f"{engine:15} {label:16} {len(v):6} {statistics.mean(x[0] for x in v):7.1f}"
            f" {statistics.mean(x[1] for x in v):6.0f}"
            f"  {statistics.mean(p4):6.0f} {statistics.median(p4):6.0f} {max(p4):6.0f}"
            f"  {sum(1 for x in p4 if x > 2000):4} {max(x[3] for x in v):7.0f}"
            f"  {min(x[4] for x in v):.2f}-{max(x[4] for x in v):.2f}"
        )


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])
