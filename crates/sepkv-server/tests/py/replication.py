"""Replication of `sepkv serve`: one shard of three nodes as a Raft group,
driven by redis-py's RedisCluster.

1. Failover: four RedisCluster clients write 10,000 keys; after half of
   them the leader is killed with kill -9. A new leader must serve writes
   through the cluster client within 5 s. The old leader restarts and
   catches up; every acknowledged key is then readable with its last value
   on all three nodes (READONLY reads on each).
2. Snapshot: MULTI/EXEC of writes on the leader reaches all three nodes;
   then a follower is stopped, its data directory and Raft log wiped, and
   restarted; it must rejoin by snapshot (its log says so) and serve the
   same keys.
3. Shared reads: on the leader, one connection increments a counter while
   eight others read it; every read must see at least the value the last
   increment acknowledged before that read was sent (reads waiting at
   once share one read-index round; none may see an older state). It runs
   after the wiped follower rejoined, so it also checks that the leader
   survived that (openraft's leader panics on a follower's log going
   backwards unless built with `loosen-follower-log-revert`).

Every server listens on 127.0.0.1 (client and bus ports) and is stopped by
its pid at the end. Environment: SEPKV_BIN, SEPKV_REPLICATION_KEYS
(default 10000).
"""

import os
import shutil
import signal
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(__file__))
import common  # noqa: E402
from common import wait_until  # noqa: E402

import redis  # noqa: E402
from redis.cluster import RedisCluster  # noqa: E402

KEYS = int(os.environ.get("SEPKV_REPLICATION_KEYS", "10000"))
WRITERS = 4


class Shard:
    """Three nodes on loopback, one shard of all slots."""

    def __init__(self, n=3):
        self.dir = tempfile.mkdtemp(prefix="sepkv-replication-")
        self.ports = [common.free_port() for _ in range(n)]
        self.bus = [common.free_port() for _ in range(n)]
        self.ids = [f"node{i + 1}" for i in range(n)]
        self.conf = os.path.join(self.dir, "topology.conf")
        nodes = " ".join(f"{nid}=127.0.0.1:{p}@{b}"
                         for nid, p, b in zip(self.ids, self.ports, self.bus))
        with open(self.conf, "w") as f:
            f.write(f"version 1\nshard1 0-16383 {nodes}\n")
        self.procs = [None] * n
        try:
            for i in range(n):
                self.start(i)
        except Exception:
            self.stop()
            raise

    def db(self, i):
        return os.path.join(self.dir, self.ids[i])

    def log(self, i):
        return os.path.join(self.dir, f"{self.ids[i]}.out")

    def start(self, i):
        self.procs[i] = common.start_cluster_node(self.db(i), self.ports[i], self.conf, self.ids[i],
                                                  self.log(i))

    def kill9(self, i):
        self.procs[i].kill()
        self.procs[i].wait()

    def term(self, i):
        self.procs[i].send_signal(signal.SIGTERM)
        self.procs[i].wait(timeout=30)

    def node(self, i):
        return redis.Redis(port=self.ports[i], socket_timeout=10)

    def leader(self):
        """The index of the node every live node names as master, if any."""
        seen = set()
        for i, p in enumerate(self.procs):
            if p is None or p.poll() is not None:
                continue
            try:
                text = self.node(i).execute_command("CLUSTER NODES")
            except redis.RedisError:
                return None
            if isinstance(text, dict):  # redis-py parses the reply
                for info in text.values():
                    if "master" in info["flags"]:
                        seen.add(info["node_id"])
                continue
            if isinstance(text, bytes):
                text = text.decode()
            for line in text.splitlines():
                w = line.split()
                if "master" in w[2]:
                    seen.add(w[0])
        if len(seen) != 1:
            return None
        nid = seen.pop()
        return self.ids.index(nid)

    def stop(self):
        common.stop_processes(self.procs)
        shutil.rmtree(self.dir, ignore_errors=True)



def replica_values(shard, i, keys):
    """Values of `keys` as node i serves them to a READONLY client."""
    r = shard.node(i)
    r.execute_command("READONLY")
    out = {}
    for n in range(0, len(keys), 500):
        chunk = keys[n:n + 500]
        p = r.pipeline(transaction=False)
        for k in chunk:
            p.get(k)
        for k, v in zip(chunk, p.execute()):
            out[k] = v
    return out


def failover(shard):
    wait_until("a leader", lambda: shard.leader() is not None)
    acked = {}
    lock = threading.Lock()
    killed = threading.Event()
    first_after_kill = []
    errors = [0]

    def worker(w):
        cl = RedisCluster(host="127.0.0.1", port=shard.ports[(w % 3)], socket_timeout=5,
                          cluster_error_retry_attempts=1)
        for n in range(w, KEYS, WRITERS):
            key, val = f"key:{n}", f"value:{n}"
            end = time.time() + 30
            while True:
                try:
                    cl.set(key, val)
                    break
                except Exception:  # a node down, an election: retry
                    with lock:
                        errors[0] += 1
                    if time.time() > end:
                        raise
                    time.sleep(0.05)
                    try:
                        cl = RedisCluster(host="127.0.0.1", port=shard.ports[(w + errors[0]) % 3],
                                          socket_timeout=5, cluster_error_retry_attempts=1)
                    except Exception:
                        pass
            with lock:
                acked[key] = val
                if killed.is_set() and not first_after_kill:
                    first_after_kill.append(time.time())

    threads = [threading.Thread(target=worker, args=(w,)) for w in range(WRITERS)]
    for t in threads:
        t.start()
    wait_until("half of the keys", lambda: len(acked) >= KEYS // 2, timeout=120)
    victim = shard.leader()
    assert victim is not None, "no leader while writing"
    t_kill = time.time()
    shard.kill9(victim)
    killed.set()
    for t in threads:
        t.join(timeout=180)
    assert len(acked) == KEYS, f"{len(acked)} of {KEYS} keys acknowledged"
    assert first_after_kill, "no write acknowledged after the kill"
    gap = first_after_kill[0] - t_kill
    assert gap < 5.0, f"the first write after the kill took {gap:.2f} s"
    new_leader = shard.leader()
    assert new_leader is not None and new_leader != victim, "no new leader"
    # The old leader restarts and catches up.
    shard.start(victim)
    keys = sorted(acked)
    for i in range(3):
        wait_until(f"{shard.ids[i]} to hold every acknowledged key",
                   lambda i=i: all(v is not None and v.decode() == acked[k]
                                   for k, v in replica_values(shard, i, keys).items()),
                   timeout=60)
    print(f"failover: {shard.ids[victim]} (leader) killed with kill -9 after "
          f"{KEYS // 2}+ writes; first write acknowledged {gap:.2f} s later by "
          f"{shard.ids[new_leader]}; {len(acked)} keys acknowledged, {errors[0]} retried "
          f"errors; all present with their last values on the three nodes "
          f"(acknowledged writes lost: 0)")
    return acked


def snapshot(shard, acked):
    wait_until("a leader", lambda: shard.leader() is not None)
    leader = shard.leader()
    # A transaction of writes goes through the log as one entry.
    p = shard.node(leader).pipeline(transaction=True)
    p.set("{tx}a", 1)
    p.incr("{tx}a")
    p.set("{tx}b", "x")
    assert p.execute() == [True, 2, True]
    acked["{tx}a"], acked["{tx}b"] = "2", "x"
    for i in range(3):
        wait_until(f"{shard.ids[i]} to apply the transaction",
                   lambda i=i: replica_values(shard, i, ["{tx}a", "{tx}b"])
                   == {"{tx}a": b"2", "{tx}b": b"x"})
    victim = next(i for i in range(3) if i != leader)
    shard.term(victim)
    shutil.rmtree(shard.db(victim))
    shutil.rmtree(shard.db(victim) + ".raft", ignore_errors=True)
    with open(shard.log(victim), "w"):
        pass
    # Writes while it is away.
    cl = RedisCluster(host="127.0.0.1", port=shard.ports[leader], socket_timeout=5)
    for n in range(100):
        cl.set(f"late:{n}", n)
        acked[f"late:{n}"] = str(n)
    shard.start(victim)
    keys = sorted(acked)
    wait_until(f"the wiped {shard.ids[victim]} to serve every key",
               lambda: all(v is not None and v.decode() == acked[k]
                           for k, v in replica_values(shard, victim, keys).items()),
               timeout=60)
    with open(shard.log(victim)) as f:
        log = f.read()
    assert "installed a snapshot" in log, f"no snapshot was installed:\n{log}"
    line = next(ln for ln in log.splitlines() if "installed a snapshot" in ln)
    print(f"snapshot: {shard.ids[victim]} wiped and restarted; {line.split(': ', 1)[1]}; "
          f"serves all {len(keys)} keys")


def shared_reads(shard, increments=500, readers=8, limit=60.0):
    wait_until("a leader", lambda: shard.leader() is not None)
    leader = shard.leader()
    shard.node(leader).delete("rc")
    acked = [0]
    done = threading.Event()
    stale, reads, failures = [], [0] * readers, []

    def reader(w):
        r = shard.node(leader)
        end = time.time() + limit
        try:
            while not done.is_set() and time.time() < end:
                floor = acked[0]
                v = int(r.get("rc") or 0)
                reads[w] += 1
                if v < floor:
                    stale.append((floor, v))
        except Exception as e:  # noqa: BLE001 (reported below)
            failures.append(repr(e))

    threads = [threading.Thread(target=reader, args=(w,)) for w in range(readers)]
    for t in threads:
        t.start()
    w = shard.node(leader)
    end = time.time() + limit
    try:
        for _ in range(increments):
            if time.time() > end:
                break
            acked[0] = w.incr("rc")
    finally:
        done.set()
        for t in threads:
            t.join(timeout=limit)
    assert not failures, f"reads failed: {failures[:3]}"
    assert not stale, f"{len(stale)} stale reads, e.g. (acknowledged, read) {stale[:3]}"
    assert acked[0] == increments, f"only {acked[0]} of {increments} increments in {limit} s"
    assert all(n > 0 for n in reads), f"a reader read nothing: {reads}"
    print(f"shared reads: {increments} increments on {shard.ids[leader]} against {readers} "
          f"readers, {sum(reads)} reads, none older than the last acknowledged increment")


def main():
    start = time.time()
    shard = Shard()
    try:
        acked = failover(shard)
        snapshot(shard, acked)
        shared_reads(shard)
    finally:
        shard.stop()
    print(f"replication: 3 passed, 0 failed in {time.time() - start:.1f} s")


if __name__ == "__main__":
    main()
