#!/usr/bin/env python3
"""Per-round ratios of a `sepkv bench --repeat` run: lwc / leveldb preset
and lwc / C++ LevelDB, for throughput and write amplification.

Usage: ratios.py [--table] RESULTS.json [...]  (files written by
`sepkv bench --json`); --table prints markdown rows instead: per workload
the three engines' median kops/s, then each ratio per round and its
median, and for loads a second row with the WA. Files named
`rN-<engine>.json` (one process per engine and round) are merged, round N
taken from the name.

For each workload it prints each engine's kops/s per round (round 1, 2, 3),
the ratio within each round and the median of those ratios; for loads, the
engine WA (bytes the engine wrote / user bytes) and the process WA
(/proc/self/io writes less cancelled writes / user bytes), the only WA the
C++ LevelDB peer has; for sepkv engines also the engine WA without the
WAL's bytes.
"""
import json
import os
import re
import statistics
import sys

LWC, PRESET, CPP = "sepkv:lwc", "sepkv:leveldb", "leveldb"


def fmt(x, nd=2):
    return "-" if x is None else f"{x:.{nd}f}"


def load(paths):
    """(label, phases) pairs: one per file, except that files named
    `rN-<engine>.json` (one engine and round per process) merge into one
    set whose reports take round N from the name."""
    single = [re.match(r"r(\d+)-", os.path.basename(p)) for p in paths]
    if paths and all(single):
        phases = []
        for path, m in zip(paths, single):
            with open(path) as f:
                data = json.load(f)
            for ph in data["phases"] if isinstance(data, dict) else data:
                ph["round"] = int(m.group(1))
                phases.append(ph)
        return [(os.path.dirname(paths[0]) or ".", phases)]
    out = []
    for path in paths:
        with open(path) as f:
            data = json.load(f)
        out.append((path, data["phases"] if isinstance(data, dict) else data))
    return out


def no_wal_wa(p):
    """Engine bytes written less the WAL's, per user byte written."""
    cat = p.get("bytes_written_by_category") or {}
    user = p.get("user_bytes_written")
    if not user or "wal" not in cat:
        return None
    return (p["bytes_written"] - cat["wal"]) / user


def main(paths):
    for path, phases in load(paths):
        by = {}
        order = []
        for p in phases:
            key = p["workload"] + ("" if p["phase"] == "run" else "/" + p["phase"])
            if key not in by:
                order.append(key)
            by.setdefault(key, {}).setdefault(p["engine"], {})[p["round"]] = p
        print(f"== {path}")
        for key in order:
            e = by[key]
            rounds = sorted(e.get(LWC, {}))
            print(f"-- {key}")
            for eng in (LWC, PRESET, CPP):
                r = e.get(eng, {})
                kops = ", ".join(fmt(r[i]["ops_per_sec"] / 1000, 1) for i in rounds if i in r)
                wa = ", ".join(fmt(r[i].get("write_amp")) for i in rounds if i in r)
                pwa = ", ".join(fmt(r[i].get("process_write_amp")) for i in rounds if i in r)
                line = f"   {eng:14} kops/s {kops:28}"
                if any(r[i].get("user_bytes_written") for i in rounds if i in r):
                    line += f" WA {wa:20} process WA {pwa:20}"
                    if eng != CPP:
                        nowal = ", ".join(fmt(no_wal_wa(r[i])) for i in rounds if i in r)
                        line += f" WA without the WAL {nowal}"
                print(line.rstrip())
            for other, name in ((PRESET, "lwc/preset"), (CPP, "lwc/c++")):
                rs = [
                    e[LWC][i]["ops_per_sec"] / e[other][i]["ops_per_sec"]
                    for i in rounds
                    if i in e.get(other, {})
                ]
                if rs:
                    print(f"   {name:11} rate  {', '.join(fmt(x) for x in rs)}: median {fmt(statistics.median(rs))}")
                # C++ LevelDB reports no engine bytes: its WA is the process's.
                fields = [("process_write_amp", "process WA")]
                if other != CPP:
                    fields.insert(0, ("write_amp", "WA"))
                for field, label in fields:
                    ws = [
                        e[LWC][i][field] / e[other][i][field]
                        for i in rounds
                        if i in e.get(other, {}) and e[LWC][i].get(field) and e[other][i].get(field)
                        and e[LWC][i].get("user_bytes_written")
                    ]
                    if ws:
                        print(f"   {name:11} {label:<10} {', '.join(fmt(x) for x in ws)}: median {fmt(statistics.median(ws))}")


def ratio_cell(e, other, field, inverse=False):
    rounds = sorted(e.get(LWC, {}))
    rs = []
    for i in rounds:
        if i not in e.get(other, {}):
            continue
        a, b = e[LWC][i].get(field), e[other][i].get(field)
        if a and b:
            rs.append(a / b)
    if not rs:
        return "–"
    return ", ".join(fmt(x) for x in rs) + f": **{fmt(statistics.median(rs))}**"


def med(e, eng, field, scale=1.0, nd=1):
    vals = [p.get(field) for p in e.get(eng, {}).values() if p.get(field) is not None]
    return fmt(statistics.median(vals) * scale, nd) if vals else "–"


def table(paths):
    print("| workload | `lwc` | `leveldb` | C++ LevelDB | lwc ÷ `leveldb` | lwc ÷ C++ |")
    print("|---|---:|---:|---:|---|---|")
    for path, phases in load(paths):
        by, order = {}, []
        for p in phases:
            key = p["workload"]
            if key not in by:
                order.append(key)
            by.setdefault(key, {}).setdefault(p["engine"], {})[p["round"]] = p
        for key in order:
            e = by[key]
            cells = [med(e, x, "ops_per_sec", 1e-3) for x in (LWC, PRESET, CPP)]
            print(f"| {key} (kops/s) | {' | '.join(cells)} | "
                  f"{ratio_cell(e, PRESET, 'ops_per_sec')} | {ratio_cell(e, CPP, 'ops_per_sec')} |")
            if key.startswith("fill") or key == "ycsb-load":
                cells = [med(e, LWC, "write_amp", nd=2), med(e, PRESET, "write_amp", nd=2),
                         med(e, CPP, "process_write_amp", nd=2) + " (process)"]
                print(f"| {key} WA | {' | '.join(cells)} | "
                      f"{ratio_cell(e, PRESET, 'write_amp')} | "
                      f"{ratio_cell(e, CPP, 'process_write_amp')} (process WA) |")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--table"]:
        table(sys.argv[2:])
    else:
        main(sys.argv[1:])
