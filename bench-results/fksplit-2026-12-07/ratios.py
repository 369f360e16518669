#!/usr/bin/env python3
"""Per-phase figures of the runs in scale/: for every flashkey row the WA
(the process's), SA, GC copies per user byte (gc_bytes_rewritten over the
phase's user bytes) and split share; for RocksDB its WA and SA; and the
WA ratio of each flashkey row to the RocksDB row of the same reserve and
phase (the RocksDB run of the same round, or of the other round when that
round has none).

Usage: python3 ratios.py [scale/*.json]
"""
import glob
import json
import os
import re
import sys

files = sys.argv[1:] or sorted(glob.glob(os.path.join(os.path.dirname(__file__), "scale", "*.json")))
rows = []  # (reserve, round, build, engine, phase, wa, sa, copies, hot share)
for f in files:
    m = re.search(r"r([0-9.]+)-(round\d)-(new|base)", os.path.basename(f))
    reserve, rnd, build = m.group(1), m.group(2), m.group(3)
    prev = {}
    eng = None
    for r in json.load(open(f)):
        if r["engine"] != eng:
            prev, eng = {}, r["engine"]
        c = r["engine_counters"]
        g = lambda k: c.get("vstore_" + k, 0) - prev.get("vstore_" + k, 0)
        ub = r["user_bytes_written"]
        copies = g("gc_bytes_rewritten") / ub if r["engine"].startswith("sepkv") else None
        hot, cold = g("split_hot_entries"), g("split_cold_entries")
        share = hot / (hot + cold) if hot + cold else None
        rows.append((reserve, rnd, build, r["engine"], r["phase"], r.get("process_write_amp") or r["write_amp"], r["space_amp"], copies, share))
        prev = c

def rocks(reserve, rnd, phase):
    cands = [x for x in rows if x[3] == "rocksdb" and x[0] == reserve and x[4] == phase]
    same = [x for x in cands if x[1] == rnd]
    return (same or cands or [None])[0]

print("reserve round build engine phase | WA SA | GC copies/user byte | hot share | RocksDB WA SA | WA ratio")
for x in rows:
    if x[3] == "rocksdb":
        continue
    rk = rocks(x[0], x[1], x[4])
    ratio = f"{x[5] / rk[5]:.3f}" if rk else "-"
    rtxt = f"{rk[5]:.2f} {rk[6]:.2f} ({rk[1]})" if rk else "-"
    cp = f"{x[7]:.2f}" if x[7] is not None else "-"
    sh = f"{x[8]:.2f}" if x[8] is not None else "-"
    print(f"{x[0]} {x[1]} {x[2]} {x[3]} {x[4]} | {x[5]:.2f} {x[6]:.2f} | {cp} | {sh} | {rtxt} | {ratio}")
