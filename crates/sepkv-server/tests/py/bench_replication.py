"""Figures of a replicated shard (scripts/bench-replication.sh).

1. Failover time over KILLS kills (default 20): one shard of three nodes
   on loopback; each round the leader is killed with kill -9, and SET is
   tried every 10 ms on each surviving node directly (no client backoff in
   the figure) until one answers OK; the killed node is then restarted and
   the next round waits until it has caught up. p50 and max are printed.
2. Write throughput and latency: redis-benchmark SET (and GET) against a
   plain single node and against the leader of a three-replica shard, in
   the same run, one after the other.

Environment: SEPKV_BIN, KILLS, N (requests per redis-benchmark test),
OUT (directory for the raw outputs).
"""

import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
import common  # noqa: E402
import redis  # noqa: E402
from replication import Shard, wait_until  # noqa: E402

KILLS = int(os.environ.get("KILLS", "20"))
N = int(os.environ.get("N", "100000"))
OUT = os.environ.get("OUT", ".")


def failover():
    shard = Shard()
    times = []
    try:
        for k in range(KILLS):
            wait_until("a leader", lambda: shard.leader() is not None)
            victim = shard.leader()
            others = [i for i in range(3) if i != victim]
            clients = [redis.Redis(port=shard.ports[i], socket_timeout=1) for i in others]
            t0 = time.monotonic()
            shard.kill9(victim)
            done = None
            while done is None and time.monotonic() - t0 < 30:
                for c in clients:
                    try:
                        if c.set("round", f"after-{k}"):
                            done = time.monotonic() - t0
                            break
                    except redis.RedisError:
                        pass
                time.sleep(0.01)
            assert done is not None, f"round {k}: no write acknowledged within 30 s"
            times.append(done)
            shard.start(victim)

            def caught_up(victim=victim, k=k):
                try:
                    r = shard.node(victim)
                    r.execute_command("READONLY")
                    got = r.get("round")
                except redis.RedisError:
                    return False
                return got == f"after-{k}".encode() and shard.leader() is not None
            wait_until("the restarted node to catch up", caught_up, timeout=60)
            print(f"kill {k + 1:2}: {shard.ids[victim]} killed; a write acknowledged after "
                  f"{done * 1000:.0f} ms", flush=True)
    finally:
        shard.stop()
    times.sort()
    print(f"failover over {len(times)} kills: p50 {statistics.median(times) * 1000:.0f} ms, "
          f"max {times[-1] * 1000:.0f} ms, min {times[0] * 1000:.0f} ms")


def bench(name, tag, port):
    lines = []
    for p in (1, 16):
        r = subprocess.run(["redis-benchmark", "-p", str(port), "-t", "set,get", "-n", str(N),
                            "-d", "100", "-c", "50", "-r", "1000000", "-P", str(p), "--csv"],
                           capture_output=True, text=True, timeout=900)
        out = r.stdout
        if r.returncode != 0:
            # An error reply ends redis-benchmark (an election under load
            # answers -MOVED or -CLUSTERDOWN): say so, keep the rest.
            lines.append(f"{name:<22} P{p:<3} redis-benchmark failed: "
                         f"{(r.stderr or r.stdout).strip()[-300:]}")
        with open(os.path.join(OUT, f"{tag}-P{p}.csv"), "w") as f:
            f.write(out)
        for row in out.splitlines()[1:]:
            if not row.startswith('"'):
                continue
            c = [x.strip('"') for x in row.split(",")]
            lines.append(f"{name:<22} P{p:<3} {c[0]:<4} {float(c[1]):9.0f} req/s  "
                         f"p50 {float(c[4]):7.3f} ms  p99 {float(c[6]):7.3f} ms")
    for ln in lines:
        print(ln, flush=True)


def throughput():
    single = common.Server([common.sepkv_binary(), "--db", os.path.join(OUT, "tmp-single"),
                            "serve", "--port", str(port := common.free_port())], port)
    try:
        bench("single node", "single", port)
    finally:
        single.stop()
        subprocess.run(["rm", "-rf", os.path.join(OUT, "tmp-single")])
    shard = Shard()
    try:
        wait_until("a leader", lambda: shard.leader() is not None)
        bench("three replicas, leader", "replicas3", shard.ports[shard.leader()])
    finally:
        shard.stop()


if __name__ == "__main__":
    throughput()
    failover()
