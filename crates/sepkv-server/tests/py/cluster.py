"""Cluster mode of `sepkv serve`, driven by real cluster clients.

1. Three nodes: redis-py RedisCluster writes and reads 30,000 keys (half
   with hash tags); every node holds only keys of its slots, each a share;
   `redis-cli -c` follows MOVED; `redis-benchmark --cluster -t set,get`
   runs.
2. Migration under load: while four RedisCluster clients write and read,
   a third of the slots moves from one node to another and back
   (`sepkv cluster migrate`); afterwards every acknowledged key has its
   last value and no key is on two nodes.
3. twemproxy (nutcracker, ketama, redis: true) in front of three plain
   nodes: 10,000 SET/GET through the proxy, keys spread over the nodes.
4. kill -9: a node started with --fsync always is killed while clients
   write and restarted; the cluster serves its slots again, with every
   acknowledged write present.

Every server listens on 127.0.0.1 and is stopped by its pid at the end.
Environment: SEPKV_BIN, SEPKV_CLUSTER_KEYS (default 30000).
"""

import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(__file__))
import common  # noqa: E402
from common import wait_until  # noqa: E402

import redis  # noqa: E402
from redis.cluster import RedisCluster  # noqa: E402

KEYS = int(os.environ.get("SEPKV_CLUSTER_KEYS", "30000"))
SLOTS = 16384


def keyslot(key):
    """Redis Cluster's hash slot (CRC16-XMODEM of the key or its tag)."""
    b = key.encode() if isinstance(key, str) else key
    s = b.find(b"{")
    if s >= 0:
        e = b.find(b"}", s + 1)
        if e > s + 1:
            b = b[s + 1:e]
    crc = 0
    for byte in b:
        crc ^= byte << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) if crc & 0x8000 else (crc << 1)
            crc &= 0xFFFF
    return crc % SLOTS


class Cluster:
    """N nodes on loopback with one topology file."""

    def __init__(self, n=3, fsync="everysec", bounds=None):
        self.dir = tempfile.mkdtemp(prefix="sepkv-cluster-")
        self.ports = [common.free_port() for _ in range(n)]
        self.ids = [f"node{i + 1}" for i in range(n)]
        self.fsync = fsync
        self.conf = os.path.join(self.dir, "topology.conf")
        lines = ["version 1"]
        bounds = bounds or [i * SLOTS // n for i in range(n)] + [SLOTS]
        for i, (nid, port) in enumerate(zip(self.ids, self.ports)):
            a, b = bounds[i], bounds[i + 1] - 1
            lines.append(f"shard{i + 1} {a}-{b} {nid}=127.0.0.1:{port}")
        with open(self.conf, "w") as f:
            f.write("\n".join(lines) + "\n")
        self.servers = [None] * n
        try:
            for i in range(n):
                self.start(i)
        except Exception:
            self.stop()
            raise

    def argv(self, i):
        return [common.sepkv_binary(), "--db", os.path.join(self.dir, self.ids[i]), "serve",
                "--port", str(self.ports[i]), "--fsync", self.fsync,
                "--cluster-config", self.conf, "--cluster-node-id", self.ids[i]]

    def start(self, i):
        self.servers[i] = common.Server(self.argv(i), self.ports[i])

    def client(self):
        return RedisCluster(host="127.0.0.1", port=self.ports[0], socket_timeout=10)

    def node(self, i):
        return redis.Redis(port=self.ports[i], socket_timeout=10)

    def owned(self, i):
        """Slots node i serves, as the node says (CLUSTER SLOTS)."""
        out = set()
        for a, b, *nodes in self.node(i).execute_command("CLUSTER SLOTS"):
            if nodes[0][1] == self.ports[i]:
                out.update(range(a, b + 1))
        return out

    def migrate(self, slots, to):
        r = subprocess.run([common.sepkv_binary(), "cluster", "migrate", "--config", self.conf,
                            "--slots", slots, "--to", to],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, f"migrate failed: {r.stdout}{r.stderr}"
        return r.stdout

    def stop(self):
        for s in self.servers:
            if s is not None:
                s.stop()
        shutil.rmtree(self.dir, ignore_errors=True)



def all_keys(node):
    return {k for k in node.scan_iter(count=1000)}


def check_placement(cl, expect_total):
    """Every node holds only keys of its own slots; none is on two."""
    seen = {}
    for i in range(len(cl.ids)):
        owned = cl.owned(i)
        keys = all_keys(cl.node(i))
        stray = [k for k in keys if keyslot(k) not in owned]
        assert not stray, f"{cl.ids[i]} holds keys of other nodes' slots: {stray[:5]}"
        for k in keys:
            assert k not in seen, f"{k!r} is on {seen[k]} and {cl.ids[i]}"
            seen[k] = cl.ids[i]
    assert len(seen) == expect_total, f"{len(seen)} keys in the cluster, expected {expect_total}"
    return seen


def three_nodes():
    cl = Cluster()
    try:
        rc = cl.client()
        t0 = time.time()
        half = KEYS // 2
        pipe = rc.pipeline()
        for i in range(half):
            pipe.set(f"key:{i}", f"v{i}")
            pipe.set(f"{{user{i % 100}}}:item:{i}", f"t{i}")
            if i % 500 == 499:
                pipe.execute()
        pipe.execute()
        for i in range(0, half, 7):
            assert rc.get(f"key:{i}") == f"v{i}".encode()
            assert rc.get(f"{{user{i % 100}}}:item:{i}") == f"t{i}".encode()
        # A multi-key command within one hash tag is served; across slots
        # the node answers CROSSSLOT.
        assert rc.mget([f"{{user7}}:item:{i}" for i in (7, 107, 207)]) == [b"t7", b"t107", b"t207"]
        try:
            cl.node(0).execute_command("MGET", "key:1", "key:2", "key:3")
            raise AssertionError("CROSSSLOT expected")
        except redis.ResponseError as e:
            assert "CROSSSLOT" in str(e), e
        wrote = time.time() - t0
        seen = check_placement(cl, 2 * half)
        shares = [sum(1 for v in seen.values() if v == nid) for nid in cl.ids]
        assert all(s > 0.25 * 2 * half for s in shares), shares
        sizes = [cl.node(i).dbsize() for i in range(3)]
        assert sizes == shares, (sizes, shares)
        print(f"three nodes: {2 * half} keys written and read in {wrote:.1f} s; shares {shares}")

        # A transaction's keys must share a slot: a queued command of
        # another slot is refused with CROSSSLOT and EXEC aborts; within
        # one hash tag MULTI/EXEC runs.
        mine = [f"key:{i}" for i in range(half) if keyslot(f"key:{i}") in cl.owned(0)]
        a, b = mine[0], next(k for k in mine if keyslot(k) != keyslot(mine[0]))
        n0 = cl.node(0)
        conn = redis.Connection(port=cl.ports[0], socket_timeout=10)

        def raw(*args):
            conn.send_command(*args)
            return conn.read_response()

        try:
            assert raw("MULTI") == b"OK"
            assert raw("SET", a, "x") == b"QUEUED"
            try:
                raw("SET", b, "y")
                raise AssertionError("CROSSSLOT expected inside MULTI")
            except redis.ResponseError as e:
                assert "CROSSSLOT" in str(e), e
            try:
                raw("EXEC")
                raise AssertionError("EXECABORT expected")
            except redis.exceptions.ExecAbortError:
                pass  # -EXECABORT, as redis-py names it
        finally:
            conn.disconnect()
        assert n0.get(a) == f"v{a.split(':')[1]}".encode()
        tx = n0.pipeline(transaction=True)
        tx.incr(f"{{{a}}}:x", 5)
        tx.incr(f"{{{a}}}:y", -5)
        assert tx.execute() == [5, -5]
        print("MULTI/EXEC: CROSSSLOT inside a transaction, EXEC within one hash tag")

        cli = common.need("redis-cli")
        far = next(f"key:{i}" for i in range(half) if keyslot(f"key:{i}") not in cl.owned(0))
        r = subprocess.run([cli, "-c", "-p", str(cl.ports[0]), "GET", far],
                           capture_output=True, text=True, timeout=30)
        assert r.stdout.strip() == f"v{far.split(':')[1]}", r.stdout + r.stderr
        r = subprocess.run([cli, "-p", str(cl.ports[0]), "GET", far],
                           capture_output=True, text=True, timeout=30)
        assert r.stdout.startswith("MOVED "), r.stdout
        info = cl.node(0).info("cluster")
        assert info["cluster_enabled"] == 1, info
        print("redis-cli -c follows MOVED")

        # SIGHUP rereads the file: a higher version is installed (and
        # persisted), a lower one is kept.
        with open(cl.conf) as f:
            text = f.read()
        with open(cl.conf, "w") as f:
            f.write(text.replace("version 1", "version 5"))
        cl.servers[0].proc.send_signal(signal.SIGHUP)
        wait_until("SIGHUP to install version 5",
                   lambda: cl.node(0).info("cluster")["cluster_topology_version"] == 5, 10)
        with open(cl.conf, "w") as f:
            f.write(text.replace("version 1", "version 4"))
        cl.servers[0].proc.send_signal(signal.SIGHUP)
        time.sleep(0.3)
        assert cl.node(0).info("cluster")["cluster_topology_version"] == 5
        # A node whose entry is not the address it binds refuses to start.
        other = common.free_port()
        r = subprocess.run([common.sepkv_binary(), "--db", os.path.join(cl.dir, "x"), "serve",
                            "--port", str(other), "--cluster-config", cl.conf,
                            "--cluster-node-id", cl.ids[0]], capture_output=True, text=True, timeout=30)
        assert r.returncode == 2 and f"127.0.0.1:{cl.ports[0]}" in r.stderr \
            and f"127.0.0.1:{other}" in r.stderr, r.stderr
        print("SIGHUP installs a higher version only; a wrong address is refused, naming both")

        bench = common.need("redis-benchmark")
        r = subprocess.run([bench, "--cluster", "-p", str(cl.ports[0]), "-t", "set,get",
                            "-n", "20000", "-c", "20", "-q"],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0 and "GET:" in r.stdout and "SET:" in r.stdout, r.stdout + r.stderr
        for line in r.stdout.splitlines():
            if "requests per second" in line:
                print("redis-benchmark --cluster:", line.strip().split("\r")[-1])
    finally:
        cl.stop()


def migration_under_load():
    # node1 serves half the slots, so that it keeps some while a third of
    # all slots is away: redis-py learns nodes from CLUSTER SLOTS only and
    # cannot follow an ASK to a node that serves none.
    cl = Cluster(bounds=[0, SLOTS // 2, 3 * SLOTS // 4, SLOTS])
    try:
        stop = threading.Event()
        acked = {}
        lock = threading.Lock()
        errors = []
        counts = [0, 0]

        def worker(w):
            rc = cl.client()
            rnd = random.Random(w)
            n = 0
            while not stop.is_set():
                # Each worker writes its own keys, so the last acknowledged
                # value of each is known; half of them share hash tags.
                if w % 2:
                    k = f"load:{w}:{rnd.randrange(2000)}"
                else:
                    k = f"{{t{w}-{rnd.randrange(20)}}}:load:{rnd.randrange(100)}"
                v = f"{w}:{n}"
                try:
                    if n % 3 == 2:
                        got = rc.get(k)
                        with lock:
                            want = acked.get(k)
                        if want is not None and got != want.encode():
                            errors.append(f"read {k}: {got!r}, expected {want!r}")
                    else:
                        rc.set(k, v)
                        with lock:
                            acked[k] = v
                        with lock:
                            counts[0] += 1
                except Exception as e:  # noqa: BLE001 (any failure fails the test)
                    errors.append(f"{k}: {e!r}")
                    return
                n += 1

        def start(w):
            t = threading.Thread(target=worker, args=(w,), daemon=True)
            t.start()
            return t

        # Hashes in the slots that move: their fields move with them, and a
        # hash written again after a DEL on the node they moved to has only
        # its new fields (the copy's versions are never handed out again).
        rc0 = cl.client()
        hashes = [k for k in (f"h:{i}" for i in range(400)) if keyslot(k) < SLOTS // 3][:40]
        for k in hashes:
            rc0.hset(k, mapping={"old": "1", "f": "2"})
            rc0.delete(k)
            rc0.hset(k, mapping={f"f{j}": str(j) for j in range(5)})

        def rewrite_hashes(tag):
            for k in hashes:
                assert rc0.hgetall(k) == {f"f{j}".encode(): str(j).encode() for j in range(5)}, k
            for k in hashes[::2]:
                rc0.delete(k)
                rc0.hset(k, mapping={f"f{j}": str(j) for j in range(5)})
            for k in hashes:
                assert rc0.hgetall(k) == {f"f{j}".encode(): str(j).encode() for j in range(5)}, \
                    (tag, k, rc0.hgetall(k))

        threads = [start(w) for w in range(4)]
        time.sleep(1.0)
        third = f"0-{SLOTS // 3 - 1}"
        t0 = time.time()
        out1 = cl.migrate(third, cl.ids[1])
        t1 = time.time()
        rewrite_hashes("moved")
        time.sleep(0.5)
        out2 = cl.migrate(third, cl.ids[0])
        t2 = time.time()
        rewrite_hashes("moved back")
        time.sleep(0.5)
        stop.set()
        for t in threads:
            t.join(timeout=30)
        assert not errors, errors[:10]
        print(f"migration: {third} to {cl.ids[1]} in {t1 - t0:.1f} s, back in {t2 - t1:.1f} s, "
              f"{counts[0]} writes acknowledged meanwhile")
        print("  " + out1.strip().replace("\n", "\n  "))
        print("  " + out2.strip().replace("\n", "\n  "))
        rc = cl.client()
        bad = [(k, v, rc.get(k)) for k, v in acked.items() if rc.get(k) != v.encode()]
        assert not bad, f"{len(bad)} acknowledged keys lost or stale: {bad[:5]}"
        # The sources drop what they gave away in the background.
        wait_until("slots given away to be dropped",
                   lambda: sum(cl.node(i).dbsize() for i in range(3)) == len(acked) + len(hashes))
        check_placement(cl, len(acked) + len(hashes))
        print(f"migration: {len(acked)} acknowledged keys, each with its last value, none on two nodes; "
              f"{len(hashes)} hashes moved and back with their fields")
    finally:
        cl.stop()


def nutcracker():
    exe = common.need("nutcracker")
    d = tempfile.mkdtemp(prefix="sepkv-twemproxy-")
    nodes = [common.start_sepkv("leveldb") for _ in range(3)]
    proxy = None
    try:
        port = common.free_port()
        conf = os.path.join(d, "nutcracker.yml")
        with open(conf, "w") as f:
            f.write(f"""sepkv:
  listen: 127.0.0.1:{port}
  hash: fnv1a_64
  distribution: ketama
  redis: true
  auto_eject_hosts: false
  timeout: 5000
  servers:
""")
            for i, n in enumerate(nodes):
                f.write(f"    - 127.0.0.1:{n.port}:1 node{i + 1}\n")
        proxy = common.Server([exe, "-c", conf, "-s", str(common.free_port()),
                               "-o", os.path.join(d, "nutcracker.log")], port)
        # RESP2, and no CLIENT SETINFO on connect: twemproxy closes the
        # connection on commands it does not know.
        r = redis.Redis(port=port, socket_timeout=10, protocol=2, lib_name=None, lib_version=None)
        t0 = time.time()
        for i in range(10_000):
            r.set(f"proxied:{i}", f"p{i}")
        for i in range(10_000):
            assert r.get(f"proxied:{i}") == f"p{i}".encode(), i
        assert r.mget(["proxied:1", "proxied:2", "proxied:3"]) == [b"p1", b"p2", b"p3"]
        took = time.time() - t0
        sizes = [redis.Redis(port=n.port).dbsize() for n in nodes]
        assert sum(sizes) == 10_000 and all(s > 1000 for s in sizes), sizes
        print(f"nutcracker: 10000 SET + 10000 GET through the proxy in {took:.1f} s; "
              f"keys per node {sizes}")
    finally:
        if proxy is not None:
            proxy.stop()
        for n in nodes:
            n.stop()
            shutil.rmtree(n.workdir, ignore_errors=True)
        shutil.rmtree(d, ignore_errors=True)


def kill9():
    cl = Cluster(fsync="always")
    try:
        stop = threading.Event()
        acked = {}
        lock = threading.Lock()

        def worker(w):
            rc = cl.client()
            n = 0
            while not stop.is_set():
                k = f"crash:{w}:{n % 3000}"
                try:
                    rc.set(k, n)
                    with lock:
                        acked[k] = {str(n)}
                except Exception:  # noqa: BLE001
                    # The node went down: not acknowledged, but it may have
                    # been applied before the kill. (redis-py raises more
                    # than RedisError while it rereads the slots.)
                    with lock:
                        if k in acked:
                            acked[k].add(str(n))
                    time.sleep(0.05)
                n += 1

        threads = [threading.Thread(target=worker, args=(w,), daemon=True) for w in range(3)]
        for t in threads:
            t.start()
        time.sleep(1.5)
        victim = 1
        cl.servers[victim].kill9()
        time.sleep(0.5)
        cl.start(victim)
        time.sleep(1.5)
        stop.set()
        for t in threads:
            t.join(timeout=30)
        rc = cl.client()
        on_victim = [k for k in acked if keyslot(k) in cl.owned(victim)]
        assert on_victim, "no key of the killed node's slots was written"
        bad = [k for k, v in acked.items() if (rc.get(k) or b"").decode() not in v]
        assert not bad, f"{len(bad)} acknowledged writes lost: {bad[:5]}"
        print(f"kill -9: {cl.ids[victim]} killed and restarted; {len(acked)} acknowledged keys "
              f"({len(on_victim)} on its slots) all present")
    finally:
        cl.stop()


def main():
    start = time.time()
    for test in (three_nodes, migration_under_load, nutcracker, kill9):
        t0 = time.time()
        test()
        print(f"  {test.__name__}: {time.time() - t0:.1f} s")
    print(f"cluster suite passed in {time.time() - start:.1f} s")


if __name__ == "__main__":
    main()
