#!/usr/bin/env python3
"""Space after short-lived, killed writers (space that stays bounded).

Overwrites the same keys in ROUNDS separate `sepkv import` processes; rounds
2, 4, ..., 12 are killed with SIGKILL once KILL_AT records were acknowledged.
No manual `gc` runs. Prints the directory's allocated size (as `du` counts
it) over the live key and value bytes: the last round runs to its end, so
its records are the live ones.

Usage: scripts/killed-rounds.py SEPKV_BINARY PRESET [--sync] [--dir DIR]
Defaults: 20,000 keys, values of 150-1050 bytes, 13 rounds, batches of 64,
kill at 15,000 acknowledged records.
"""

import argparse
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading

KEYS = 20_000
ROUNDS = 13
KILL_AT = 15_000
BATCH = 64


def allocated(path):
    total = 0
    for root, _, files in os.walk(path):
        for f in files:
            st = os.stat(os.path.join(root, f))
            total += st.st_blocks * 512
    return total


def round_lines(rng, r):
    lines, live = [], 0
    for i in range(KEYS):
        key = f"key{i:08d}"
        value = f"r{r:02d}-" + "v" * rng.randint(146, 1046)
        lines.append(f"{key}\t{value}\n")
        live += len(key) + len(value)
    return "".join(lines).encode(), live


def run_round(binary, preset, db, data, sync, kill):
    cmd = [binary, "--db", db, "import", "--batch", str(BATCH), "--preset", preset]
    if sync:
        cmd.append("--sync")
    p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL)
    if not kill:
        p.communicate(data)
        if p.returncode != 0:
            sys.exit(f"import failed with status {p.returncode}")
        return KEYS
    # Feed from a thread, and keep stdin open after the records: the
    # process cannot finish on its own, so the kill is what ends it.
    def feed():
        try:
            for off in range(0, len(data), 16 << 10):
                p.stdin.write(data[off:off + (16 << 10)])
                p.stdin.flush()
        except (BrokenPipeError, ValueError):
            pass

    feeder = threading.Thread(target=feed, daemon=True)
    feeder.start()
    acked = 0
    for line in p.stdout:
        parts = line.split()
        if len(parts) == 2 and parts[0] == b"acked":
            acked = int(parts[1])
            if acked >= KILL_AT:
                p.send_signal(signal.SIGKILL)
                break
    p.wait()
    feeder.join()
    try:
        p.stdin.close()
    except BrokenPipeError:
        pass
    if p.returncode != -signal.SIGKILL:
        sys.exit(f"import ended with status {p.returncode} after {acked} acked records, "
                 "not by the kill")
    return acked


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("binary")
    ap.add_argument("preset")
    ap.add_argument("--sync", action="store_true")
    ap.add_argument("--dir")
    a = ap.parse_args()
    base = a.dir or tempfile.mkdtemp(prefix="sepkv-rounds-")
    db = os.path.join(base, "db")
    shutil.rmtree(db, ignore_errors=True)
    rng = random.Random(7)
    live = 0
    for r in range(ROUNDS):
        data, live = round_lines(rng, r)
        kill = r % 2 == 1
        acked = run_round(a.binary, a.preset, db, data, a.sync, kill)
        print(f"round {r + 1:2}: {'killed at' if kill else 'finished,'} {acked} acked, "
              f"{allocated(db) / 1e6:.1f} MB allocated", flush=True)
    size = allocated(db)
    print(f"{a.preset}: {size / 1e6:.1f} MB allocated for {live / 1e6:.2f} MB live: "
          f"{size / live:.2f}x")
    if not a.dir:
        shutil.rmtree(base)


if __name__ == "__main__":
    main()
