#!/usr/bin/env python3
"""sepkv from Python against plyvel (LevelDB) and rocksdict (RocksDB).

Every engine runs in this one process with the same settings: no sync on
writes, the write-ahead log on (FlashKey's bands are its own log), no
compression, a 32 MiB block cache, 8 MiB write buffers, 4 KiB blocks and
10-bit Bloom filters. For each value size, each round runs every engine in
turn, the order rotating by one engine per round; each engine starts from
an empty directory and runs three phases:

- ``put``: N random-order puts of 16-byte keys;
- ``get``: N random-order gets of keys that exist;
- ``iterate``: one full forward iteration (N entries).

Each call is timed on its own (``time.perf_counter_ns``); a phase reports
throughput (calls per second over the phase's wall time, timing included)
and the 99th-percentile latency of one call. The table reports, per engine,
the median over the rounds.

Usage::

    python bench.py                      # 1 M entries, 1000- and 100-byte values, 3 rounds
    python bench.py --n 100000 --rounds 1 --engines wisckey,plyvel,rocksdict

plyvel and rocksdict come from PyPI (``pip install plyvel rocksdict``); an
engine whose package is missing is left out with a note.
"""

from __future__ import annotations

import argparse
import array
import json
import os
import platform
import random
import shutil
import statistics
import sys
import tempfile
import time

import sepkv

BLOCK_CACHE = 32 << 20
WRITE_BUFFER = 8 << 20
BLOCK_SIZE = 4096
BLOOM_BITS = 10


class Engine:
    """One engine's open database: put, get, iterate, close."""

    name = "?"

    def put(self, key: bytes, value: bytes) -> None: ...

    def get(self, key: bytes): ...

    def items(self): ...

    def close(self) -> None: ...


class SepkvEngine(Engine):
    def __init__(self, preset: str, path: str):
        self.name = preset
        self.db = sepkv.Db(
            path,
            preset=preset,
            block_cache_size=BLOCK_CACHE,
            write_buffer_size=WRITE_BUFFER,
            block_size=BLOCK_SIZE,
            bloom_bits_per_key=BLOOM_BITS,
            # The bands layout is its own log: it takes no separate WAL.
            wal=preset != "flashkey",
        )
        self.put = self.db.put
        self.get = self.db.get

    def items(self):
        return self.db.iterator()

    def close(self):
        self.db.close()


class PlyvelEngine(Engine):
    name = "plyvel"

    def __init__(self, path: str):
        import plyvel

        self.db = plyvel.DB(
            path,
            create_if_missing=True,
            compression=None,
            lru_cache_size=BLOCK_CACHE,
            write_buffer_size=WRITE_BUFFER,
            block_size=BLOCK_SIZE,
            bloom_filter_bits=BLOOM_BITS,
        )
        self.put = self.db.put
        self.get = self.db.get

    def items(self):
        return self.db.iterator()

    def close(self):
        self.db.close()


class RocksdictEngine(Engine):
    name = "rocksdict"

    def __init__(self, path: str):
        import rocksdict as r

        o = r.Options(raw_mode=True)
        o.create_if_missing(True)
        o.set_compression_type(r.DBCompressionType.none())
        o.set_write_buffer_size(WRITE_BUFFER)
        o.increase_parallelism(2)
        t = r.BlockBasedOptions()
        t.set_block_cache(r.Cache(BLOCK_CACHE))
        t.set_block_size(BLOCK_SIZE)
        t.set_bloom_filter(BLOOM_BITS, False)
        o.set_block_based_table_factory(t)
        self.db = r.Rdict(path, options=o)
        self.put = self.db.put
        self.get = self.db.get

    def items(self):
        return self.db.items()

    def close(self):
        self.db.close()


PEERS = {"plyvel": PlyvelEngine, "rocksdict": RocksdictEngine}


def make_engine(name: str, path: str) -> Engine:
    if name in PEERS:
        return PEERS[name](path)
    return SepkvEngine(name, path)


def available(name: str) -> bool:
    mod = {"plyvel": "plyvel", "rocksdict": "rocksdict"}.get(name)
    if mod is None:
        return True
    try:
        __import__(mod)
        return True
    except ImportError:
        return False


def p99_us(lat: array.array) -> float:
    s = sorted(lat)
    return s[min(len(s) - 1, int(len(s) * 0.99))] / 1000.0


def run_phases(engine: Engine, keys, put_order, get_order, values) -> dict:
    """The three phases on one open engine; {phase: {ops_per_s, p99_us}}."""
    n = len(keys)
    clock = time.perf_counter_ns
    out = {}
    nv = len(values)

    lat = array.array("q", bytes(8 * n))
    put = engine.put
    start = time.perf_counter()
    for j, i in enumerate(put_order):
        k, v = keys[i], values[i % nv]
        t0 = clock()
        put(k, v)
        lat[j] = clock() - t0
    out["put"] = {"ops_per_s": n / (time.perf_counter() - start), "p99_us": p99_us(lat)}

    get = engine.get
    vlen = len(values[0])
    missing = 0
    start = time.perf_counter()
    for j, i in enumerate(get_order):
        k = keys[i]
        t0 = clock()
        v = get(k)
        lat[j] = clock() - t0
        if v is None or len(v) != vlen:
            missing += 1
    out["get"] = {"ops_per_s": n / (time.perf_counter() - start), "p99_us": p99_us(lat)}
    if missing:
        raise RuntimeError(f"{engine.name}: {missing} gets missed")

    it = iter(engine.items())
    nxt = it.__next__
    count = 0
    start = time.perf_counter()
    while True:
        t0 = clock()
        try:
            nxt()
        except StopIteration:
            break
        if count < n:
            lat[count] = clock() - t0
        count += 1
    elapsed = time.perf_counter() - start
    if count != n:
        raise RuntimeError(f"{engine.name}: iterated {count} entries of {n}")
    out["iterate"] = {"ops_per_s": n / elapsed, "p99_us": p99_us(lat)}
    del it
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=1_000_000, help="entries per run (default 1 M)")
    ap.add_argument(
        "--value-sizes", default="1000,100", help="comma-separated value sizes in bytes"
    )
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument(
        "--engines",
        default=",".join(sepkv.PRESETS + list(PEERS)),
        help="comma-separated: sepkv preset names, plyvel, rocksdict",
    )
    ap.add_argument("--dir", default=None, help="where the databases go (default: a temp dir)")
    ap.add_argument("--out", default=None, help="write the results as JSON to this file")
    ap.add_argument("--seed", type=int, default=42)
    args = ap.parse_args()

    engines = []
    for e in args.engines.split(","):
        if available(e):
            engines.append(e)
        else:
            print(f"note: {e} is not installed (pip install {e}); left out", file=sys.stderr)
    sizes = [int(s) for s in args.value_sizes.split(",")]
    rng = random.Random(args.seed)
    keys = [b"%016d" % i for i in range(args.n)]
    base = args.dir or tempfile.mkdtemp(prefix="sepkv-pybench-")
    os.makedirs(base, exist_ok=True)

    results = {}  # size -> engine -> phase -> [per-round dicts]
    began = time.time()
    for size in sizes:
        values = [rng.randbytes(size) for _ in range(4096)]
        for rnd in range(args.rounds):
            order = engines[rnd % len(engines) :] + engines[: rnd % len(engines)]
            put_order = list(range(args.n))
            rng.shuffle(put_order)
            get_order = list(range(args.n))
            rng.shuffle(get_order)
            for name in order:
                path = os.path.join(base, f"{name}-{size}-{rnd}")
                shutil.rmtree(path, ignore_errors=True)
                eng = make_engine(name, path)
                try:
                    res = run_phases(eng, keys, put_order, get_order, values)
                finally:
                    eng.close()
                    shutil.rmtree(path, ignore_errors=True)
                for phase, r in res.items():
                    results.setdefault(str(size), {}).setdefault(name, {}).setdefault(
                        phase, []
                    ).append(r)
                print(
                    f"value {size} B, round {rnd + 1}, {name}: "
                    + ", ".join(
                        f"{p} {r['ops_per_s'] / 1000:.0f} k/s p99 {r['p99_us']:.1f} us"
                        for p, r in res.items()
                    ),
                    flush=True,
                )
    if not args.dir:
        shutil.rmtree(base, ignore_errors=True)

    summary = summarize(results, engines)
    report = {
        "command": "python bench.py " + " ".join(sys.argv[1:]),
        "n": args.n,
        "value_sizes": sizes,
        "rounds": args.rounds,
        "seconds": round(time.time() - began),
        "python": platform.python_version(),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.system()} {platform.release()}",
        "versions": versions(),
        "results": results,
        "summary": summary,
    }
    print(markdown(report, engines))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(report, f, indent=1)
    return 0


def versions() -> dict:
    v = {"sepkv": sepkv.__version__}
    for mod in ("plyvel", "rocksdict"):
        try:
            from importlib.metadata import version

            v[mod] = version(mod)
        except Exception:
            pass
    return v


def summarize(results: dict, engines) -> list:
    """Per (value size, phase): median figures per engine, the best sepkv
    preset and its ratio to each peer and to the better one."""
    rows = []
    goal = {"put": ("rocksdict", 1.2), "get": ("rocksdict", 1.2), "iterate": ("plyvel", 1.0)}
    for size, per_engine in results.items():
        for phase in ("put", "get", "iterate"):
            med = {
                e: {
                    "ops_per_s": statistics.median(r["ops_per_s"] for r in per_engine[e][phase]),
                    "p99_us": statistics.median(r["p99_us"] for r in per_engine[e][phase]),
                }
                for e in engines
                if e in per_engine
            }
            ours = {e: m for e, m in med.items() if e not in PEERS}
            peers = {e: m for e, m in med.items() if e in PEERS}
            row = {"value_size": int(size), "phase": phase, "median": med}
            if ours and peers:
                best = max(ours, key=lambda e: ours[e]["ops_per_s"])
                better_peer = max(peers, key=lambda e: peers[e]["ops_per_s"])
                row["best_preset"] = best
                row["better_peer"] = better_peer
                row["ratio_to_better_peer"] = (
                    ours[best]["ops_per_s"] / peers[better_peer]["ops_per_s"]
                )
                named, target = goal[phase]
                if named in peers:
                    ratio = ours[best]["ops_per_s"] / peers[named]["ops_per_s"]
                    row["goal"] = f"{target:g}x {named}"
                    row["ratio_to_goal_peer"] = ratio
                    row["goal_met"] = ratio >= target
            rows.append(row)
    return rows


def markdown(report: dict, engines) -> str:
    lines = [
        f"{report['n']:,} entries, {report['rounds']} rounds, {report['seconds']} s, "
        f"Python {report['python']}, {report['machine']}, {report['versions']}",
        "",
        "| value | phase | " + " | ".join(engines) + " | best preset | goal | ratio |",
        "|---|---|" + "---|" * len(engines) + "---|---|---|",
    ]
    for row in report["summary"]:
        cells = []
        for e in engines:
            m = row["median"].get(e)
            cells.append(
                f"{m['ops_per_s'] / 1000:.0f} k/s, p99 {m['p99_us']:.1f} µs" if m else "-"
            )
        ratio = row.get("ratio_to_goal_peer")
        lines.append(
            f"| {row['value_size']} B | {row['phase']} | "
            + " | ".join(cells)
            + f" | {row.get('best_preset', '-')} | {row.get('goal', '-')} | "
            + (f"{ratio:.2f}× {'met' if row['goal_met'] else 'missed'}" if ratio else "-")
            + " |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
