#!/usr/bin/env python3
"""A record-level model of the update experiment's GC (HashKV's update bytes).

Counts the records GC copies per update phase, for a value log collected
from its tail and for HashKV's segment groups under several hot/cold rules,
with nothing else in the way: no engine, no device, no timing. It answers
one question: how many bytes could the best classification save, at the
update experiment's shape?

The shape: N keys of one record each (the load), then three phases of N
updates drawn from a Zipf(0.99) distribution over the keys (ranks shuffled,
as YCSB's scrambled Zipfian spreads them), in a store that may hold
CAP = 1.3 x N records (the harness's 30 % reserve).

- `vlog`: one log; while it holds more than CAP records, its oldest record
  is dropped if dead and appended again if live (one copy).
- HashKV (`--groups G`, keys spread over the groups): an update appends to
  its key's group; while the store holds more than CAP records, GC collects
  either the group with the most dead records or, when its dead share is
  higher, the cold log's oldest 1 % (live records appended again). A
  collected group's live records are hot (copied back to the group) or
  cold (moved to the cold log):
    - `forever`: hot once updated, for good (sepkv's rule: the group's
      `hot_seq`);
    - `afresh`: hot when updated since the group's last GC;
    - `window2`: hot when updated since the group's GC before last;
    - `topP`: hot when among the P % most frequently drawn keys (an
      oracle of static hotness).
  Tags (a cold pair's key left in its group) are not counted.

Usage: scripts/gc-model.py vlog | forever | afresh | window2 | top10 [--groups G] [--seed S]
Prints, per phase, the records copied (hot copies, cold moves, cold-log
copies): at 1000-byte values, thousands of records are megabytes.
"""

import argparse
import bisect
import itertools
import random
from collections import deque

N = 300_000
CAP = int(1.3 * N)
THETA = 0.99
PHASES = 3


def zipf_draw(rng):
    weights = [1.0 / (r**THETA) for r in range(1, N + 1)]
    cum = list(itertools.accumulate(weights))
    total = cum[-1]
    perm = list(range(N))
    rng.shuffle(perm)
    rank = [0] * N
    for r, k in enumerate(perm):
        rank[k] = r

    def draw():
        return perm[bisect.bisect_left(cum, rng.random() * total)]

    return draw, rank


def run_vlog(draw):
    ver = [0] * N
    log = deque((k, 0) for k in range(N))
    for phase in range(1, PHASES + 1):
        copies = 0
        for _ in range(N):
            k = draw()
            ver[k] += 1
            log.append((k, ver[k]))
            while len(log) > CAP:
                k2, v = log.popleft()
                if ver[k2] == v:
                    log.append((k2, v))
                    copies += 1
        print(f"vlog phase {phase}: {copies} records copied")


def run_hashkv(rule, groups, draw, rank):
    G = groups
    group_of = [k % G for k in range(N)]
    ver = [0] * N
    in_cold = [False] * N
    written_at = [0] * N  # the group's GC count when the key was last updated
    updated = [False] * N
    hot = [False] * N
    gc_count = [0] * G
    recs = [[(k, 0) for k in range(g, N, G)] for g in range(G)]
    dead = [0] * G
    cold = deque()
    cold_dead = 0
    held = N
    hot_share = int(rule[3:]) * N // 100 if rule.startswith("top") else 0
    counts = {"hot": 0, "moved": 0, "cold_gc": 0}

    def is_hot(k, g):
        if rule == "forever":
            return hot[k]
        if rule == "afresh":
            return updated[k] and written_at[k] >= gc_count[g] - 1
        if rule == "window2":
            return updated[k] and written_at[k] >= gc_count[g] - 2
        return rank[k] < hot_share

    def collect_group(g):
        nonlocal held
        gc_count[g] += 1
        keep = []
        moved = 0
        for k, v in recs[g]:
            if in_cold[k] or ver[k] != v:
                continue
            if is_hot(k, g):
                keep.append((k, v))
                counts["hot"] += 1
            else:
                in_cold[k] = True
                cold.append((k, v))
                moved += 1
        counts["moved"] += moved
        held += len(keep) + moved - len(recs[g])
        recs[g] = keep
        dead[g] = 0

    def collect_cold(chunk):
        nonlocal held, cold_dead
        for _ in range(min(chunk, len(cold))):
            k, v = cold.popleft()
            if in_cold[k] and ver[k] == v:
                cold.append((k, v))
                counts["cold_gc"] += 1
            else:
                cold_dead -= 1
                held -= 1

    for phase in range(1, PHASES + 1):
        for key in counts:
            counts[key] = 0
        for _ in range(N):
            k = draw()
            g = group_of[k]
            if in_cold[k]:
                in_cold[k] = False
                cold_dead += 1
            else:
                dead[g] += 1
            ver[k] += 1
            recs[g].append((k, ver[k]))
            held += 1
            written_at[k] = gc_count[g]
            updated[k] = True
            if rule == "forever":
                hot[k] = True
            while held > CAP:
                g = max(range(G), key=lambda x: dead[x])
                group_share = dead[g] / max(1, len(recs[g]))
                cold_share = cold_dead / max(1, len(cold))
                before = held
                if cold and cold_share > group_share:
                    collect_cold(N // 100)
                else:
                    collect_group(g)
                if held >= before:
                    collect_cold(N // 100)
        total = sum(counts.values())
        print(
            f"{rule} ({G} groups) phase {phase}: {total} records copied "
            f"(hot {counts['hot']}, moved cold {counts['moved']}, cold-log GC {counts['cold_gc']}); "
            f"cold log {len(cold)} records, {cold_dead} dead"
        )


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("rule", help="vlog, forever, afresh, window2 or topP (P a percentage)")
    ap.add_argument("--groups", type=int, default=20)
    ap.add_argument("--seed", type=int, default=7)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    draw, rank = zipf_draw(rng)
    if a.rule == "vlog":
        run_vlog(draw)
    elif a.rule in ("forever", "afresh", "window2") or a.rule.startswith("top"):
        run_hashkv(a.rule, a.groups, draw, rank)
    else:
        ap.error(f"unknown rule {a.rule}")


if __name__ == "__main__":
    main()
