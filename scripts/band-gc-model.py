#!/usr/bin/env python3
"""A record-level model of FlashKey's band GC under the update experiment.

Counts the records GC copies per update for logical bands collected by a
victim rule, with nothing else in the way: no engine, no device, no record
headers, no relocation records. It answers: what does GC copy for this
workload and this over-provisioning, and how much of the engine's figure
is the workload's rather than the engine's?

The shape: N keys of one record each (the load), then phases of N updates
in a store that may hold (1 + OP) x N records in bands of BAND records.
User writes fill one open band; GC copies fill an open band of their own
(sepkv's two streams), or one per generation (`--gc-streams G`: a record
copied out of a band of generation g < G goes to generation g + 1, the
user's band being generation 0; `--gc-streams 2` is sepkv's two
generations). With `--split L` user writes go to two open bands: a write
whose key's previous version lived fewer than L x N updates to the one, the
rest to the other (a hot/cold split of user writes by the lifetime of the
version they supersede, which sepkv does not do). With `--reloc F` each
GC copy also appends F of a record to the band of user writes that is dead
from the start: sepkv's relocation record (66 bytes beside a 1,058-byte
entry: F = 0.062), which takes room and adds garbage; `--reloc-band` puts
them in an open band of their own instead. While the store holds
more bands than it may, GC takes one victim among the closed bands except
the newest `--held` (the bands after sepkv's replay checkpoints, which GC
may not take) and copies its live records.

Victim rules: `greedy` (the most dead records, FlashKey §V-B5),
`cost-benefit` (dead x age / live, age = updates since the band opened)
and `cost-benefit-data` (the same with the age of the data: updates since
the mean last user write of the band's records, so that a band of GC
copies is as old as the records it holds).

Key draws:
  uniform   every key alike (the FlashKey §VI model's assumption);
  zipf      Zipf(0.99) over the N keys, ranks shuffled;
  ycsb      YCSB's scrambled Zipfian, as `sepkv bench --workload update`
            draws: Zipf(0.99) over 10^10 items, FNV-64 of the item mod N
            (so much of the mass lands on keys spread uniformly).

The FlashKey §VI model for uniform updates and greedy choice gives
copies per update = (1 + OP) / (1 + OP + W(z)) - 1, z = -(1 + OP) e^-(1+OP);
`--uniform-model` prints it for the given OP.

Usage: scripts/band-gc-model.py [--keys N] [--op OP] [--dist D] [--victim V]
                                [--held W] [--gc-streams G] [--split L]
                                [--reloc F] [--reloc-band] [--phases P]
Example: scripts/band-gc-model.py --keys 100000 --op 0.47 --dist ycsb --held 35
Prints the records copied per update in each phase.
"""

import argparse
import bisect
import itertools
import math
import random

BAND = 1000


def lambert_w0(z):
    w = -0.5
    for _ in range(200):
        w -= (w * math.exp(w) - z) / (math.exp(w) * (w + 1))
    return w


def uniform_model(op):
    a = 1 + op
    return a / (a + lambert_w0(-a * math.exp(-a))) - 1


def drawer(dist, n, rng):
    if dist == "uniform":
        return lambda: rng.randrange(n)
    if dist == "zipf":
        cum = list(itertools.accumulate(1.0 / (r**0.99) for r in range(1, n + 1)))
        total = cum[-1]
        perm = list(range(n))
        rng.shuffle(perm)
        return lambda: perm[bisect.bisect_left(cum, rng.random() * total)]
    # YCSB 0.17 ScrambledZipfianGenerator: ZipfianGenerator over ITEM_COUNT
    # items with its precomputed zeta, then FNV-64 of the item mod n.
    items, theta, zetan = 10_000_000_000, 0.99, 26.46902820178302
    zeta2 = 1 + 0.5**theta
    alpha = 1 / (1 - theta)
    eta = (1 - (2 / items) ** (1 - theta)) / (1 - zeta2 / zetan)

    def fnv64(v):
        h = 0xCBF29CE484222325
        for _ in range(8):
            h ^= v & 0xFF
            v >>= 8
            h = (h * 1099511628211) & 0xFFFFFFFFFFFFFFFF
        return h

    def draw():
        u = rng.random()
        uz = u * zetan
        if uz < 1:
            item = 0
        elif uz < zeta2:
            item = 1
        else:
            item = int(items * (eta * u - eta + 1) ** alpha)
        return fnv64(item) % n

    return draw


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--keys", type=int, default=100_000)
    ap.add_argument("--op", type=float, default=0.5)
    ap.add_argument("--dist", choices=["uniform", "zipf", "ycsb"], default="ycsb")
    ap.add_argument("--victim", choices=["greedy", "cost-benefit", "cost-benefit-data"], default="greedy")
    ap.add_argument("--held", type=int, default=0)
    ap.add_argument("--gc-streams", type=int, default=1)
    ap.add_argument("--split", type=float, default=0.0)
    ap.add_argument("--reloc", type=float, default=0.0)
    ap.add_argument("--reloc-band", action="store_true")
    ap.add_argument("--phases", type=int, default=4)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--uniform-model", action="store_true")
    a = ap.parse_args()
    if a.uniform_model:
        print(f"FlashKey §VI model, OP {a.op}: {uniform_model(a.op):.2f} copies per update")
        return
    n = a.keys
    cap = int(n * (1 + a.op) / BAND)
    rng = random.Random(a.seed)
    draw = drawer(a.dist, n, rng)
    where = [0] * n  # band of each key's live record (0: none)
    written = [0] * n  # update count at each key's last user write
    bands = {}  # id -> [live, keys, stream, opened at, sum of write times]
    opened = {}  # stream -> open band
    clock = [0, 0]  # [updates so far, last band id]
    reloc = [0.0]  # relocation records owed, in records

    def append(key, stream):
        b = opened.get(stream)
        if b is None or len(bands[b][1]) >= BAND:
            clock[1] += 1
            b = opened[stream] = clock[1]
            bands[b] = [0, [], stream, clock[0], 0]
        if key < 0:
            # A relocation record: dead from the start.
            bands[b][1].append(key)
            bands[b][4] += clock[0]
            return
        if where[key]:
            bands[where[key]][0] -= 1
        bands[b][1].append(key)
        bands[b][0] += 1
        bands[b][4] += written[key]
        where[key] = b

    def dead(b):
        return len(bands[b][1]) - bands[b][0]

    def score(b):
        if a.victim == "greedy":
            return dead(b)
        if a.victim == "cost-benefit":
            return dead(b) * (clock[0] - bands[b][3] + 1) / (bands[b][0] + 1)
        age = clock[0] - bands[b][4] / len(bands[b][1]) + 1
        return dead(b) * age / (bands[b][0] + 1)

    def gc():
        busy = set(opened.values())
        newest = clock[1] - a.held
        cand = [b for b in bands if b not in busy and b <= newest]
        if not cand:
            return None
        v = max(cand, key=score)
        live = [k for k in bands[v][1] if k >= 0 and where[k] == v]
        gen = bands[v][2][1]
        to = ("gc", min(gen + 1, max(a.gc_streams, 1)))
        del bands[v]
        for k in live:
            where[k] = 0
            append(k, to)
            reloc[0] += a.reloc
            while reloc[0] >= 1:
                reloc[0] -= 1
                append(-1, ("reloc", 0) if a.reloc_band else ("user", 0))
        return len(live)

    for k in range(n):
        append(k, ("user", 0))
    for phase in range(1, a.phases + 1):
        copies = 0
        for _ in range(n):
            while len(bands) > cap:
                moved = gc()
                if moved is None:
                    break
                copies += moved
            clock[0] += 1
            key = draw()
            hot = a.split > 0 and clock[0] - written[key] < a.split * n
            written[key] = clock[0]
            append(key, ("user-hot" if hot else "user", 0))
        print(
            f"{a.dist} op {a.op} {a.victim} held {a.held} gc-streams {a.gc_streams} split {a.split} reloc {a.reloc}{' own band' if a.reloc_band else ''} "
            f"phase {phase}: {copies / n:.2f} copies per update"
        )


if __name__ == "__main__":
    main()
