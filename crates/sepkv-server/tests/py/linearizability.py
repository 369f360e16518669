"""A linearizability run against one replicated shard: a recorder and a
nemesis. The history it writes is checked by the Go program in
crates/sepkv-server/tests/lincheck (porcupine); scripts/test-linearizability.sh
runs both.

Three `sepkv serve` nodes form one shard of all slots (one Raft group). In
network namespaces (root and iproute2; a bridge on 198.19.X.254 and one
namespace per node on 198.19.X.1-3, nothing leaving the machine) or, where
they cannot be made, on 127.0.0.1.

The recorder: CLIENTS threads, one redis-py connection each (no automatic
retry, short socket timeouts), send GET, SET and INCR on KEYS keys against
the node they believe leads. Each operation records its client, op, key,
argument, the monotonic-clock readings (ns) before it was sent and after
its reply came, and the reply. An operation whose reply does not come
(timeout, connection lost, an error after the node proposed it) is recorded
without a return time: indeterminate. `-MOVED` and `-CLUSTERDOWN The shard
has no leader` are definite failures (the node never proposed the write,
or openraft cut its entry from the log): recorded as failed, and the check
holds the server to that. The client then moves on (to the node `-MOVED`
names, else the next node), and whatever it does next is a new operation.
Client c's home is node c mod 3: away from it, a client goes back there
before one operation in five, so every node keeps being asked, a leader
cut off from the others included. SET writes integers unique to the run, so a read tells
which write it saw.

The nemesis, meanwhile, one fault at a time, seeded: kills a node with
kill -9 (the leader, two times in three) and restarts it; or, in
namespaces, cuts the leader off from the two
others (blackhole routes both ways between the nodes; the clients still
reach every node, so a deposed leader that answers is seen) and heals the
cut. It stops two seconds before the clients, with every node up and
every cut healed.

Bounded: the clients stop after SECONDS or OPS operations each; every
server is stopped by its pid and the namespaces removed at the end.

Usage: linearizability.py --seed N --out FILE [--seconds S] [--clients C]
           [--keys K] [--ops N] [--faults kill,partition] [--loopback]
Prints one line of figures:
  seed N: O operations recorded (C completed, I indeterminate (reads among
  them), F failed), faults: K kills, P partitions (NETWORK)
Environment: SEPKV_BIN.
"""

import argparse
import json
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

import redis  # noqa: E402
from redis.backoff import NoBackoff  # noqa: E402
from redis.retry import Retry  # noqa: E402

PASSWORD = "linearizability"
SOCKET_TIMEOUT = 1.0
# How often a client away from its home node goes back to it (per
# operation): clients keep asking every node, a cut-off leader included.
HOME_RETURN = 0.2
# Error replies of a node that did not propose the write (docs/replication.md,
# "What clients get"): definite failures.
NOT_PROPOSED = ("MOVED ", "CLUSTERDOWN The shard has no leader")


def ip(*args, check=True):
    return subprocess.run(["ip", *args], check=check, capture_output=True, text=True)


def netns_available():
    if os.geteuid() != 0 or shutil.which("ip") is None:
        return False
    probe = f"lzp{os.getpid() % 100000}"
    if ip("netns", "add", probe, check=False).returncode != 0:
        return False
    ip("netns", "del", probe, check=False)
    return True


class Net:
    """A bridge in this namespace and one namespace per node, on a /24 of
    198.19.0.0/16 (the benchmarking range) not in use here."""

    def __init__(self, n):
        self.tag = f"lz{os.getpid() % 100000}"
        self.bridge = f"{self.tag}br"
        self.ns = []
        self.cuts = []
        used = ip("-4", "addr", "show").stdout
        base = os.getpid() % 250
        for k in range(250):
            x = (base + k) % 250 + 1
            if f"198.19.{x}." not in used:
                break
        else:
            raise RuntimeError("no free subnet of 198.19.0.0/16")
        self.hosts = [f"198.19.{x}.{i + 1}" for i in range(n)]
        try:
            ip("link", "add", self.bridge, "type", "bridge")
            ip("addr", "add", f"198.19.{x}.254/24", "dev", self.bridge)
            ip("link", "set", self.bridge, "up")
            for i in range(n):
                ns = f"{self.tag}n{i + 1}"
                ip("netns", "add", ns)
                self.ns.append(ns)
                veth, peer = f"{self.tag}v{i + 1}", f"{self.tag}p{i + 1}"
                ip("link", "add", veth, "type", "veth", "peer", "name", peer)
                ip("link", "set", peer, "netns", ns)
                ip("-n", ns, "addr", "add", f"{self.hosts[i]}/24", "dev", peer)
                ip("-n", ns, "link", "set", peer, "up")
                ip("-n", ns, "link", "set", "lo", "up")
                ip("link", "set", veth, "master", self.bridge, "up")
        except BaseException:  # SIGTERM too
            self.close()
            raise

    def prefix(self, i):
        return ["ip", "netns", "exec", self.ns[i]]

    def cut(self, i):
        """Node i loses the other nodes, both ways; clients reach all."""
        for j in range(len(self.ns)):
            if j != i:
                for a, b in ((i, j), (j, i)):
                    ip("-n", self.ns[a], "route", "add", "blackhole", f"{self.hosts[b]}/32")
                    self.cuts.append((a, b))

    def heal(self):
        for a, b in self.cuts:
            ip("-n", self.ns[a], "route", "del", "blackhole", f"{self.hosts[b]}/32", check=False)
        self.cuts = []

    def close(self):
        for ns in self.ns:
            ip("netns", "del", ns, check=False)
        ip("link", "del", self.bridge, check=False)


class Shard:
    """Three nodes, one shard of all slots, one Raft group."""

    def __init__(self, n, netns):
        self.dir = tempfile.mkdtemp(prefix="sepkv-linearizability-")
        self.net = Net(n) if netns else None
        if self.net:
            self.hosts = self.net.hosts
            self.ports = [6379] * n
            addrs = [f"{h}:6379" for h in self.hosts]
        else:
            self.hosts = ["127.0.0.1"] * n
            self.ports = [common.free_port() for _ in range(n)]
            addrs = [f"127.0.0.1:{p}@{common.free_port()}" for p in self.ports]
        self.ids = [f"node{i + 1}" for i in range(n)]
        self.conf = os.path.join(self.dir, "topology.conf")
        with open(self.conf, "w") as f:
            f.write("version 1\nshard1 0-16383 " + " ".join(
                f"{nid}={a}" for nid, a in zip(self.ids, addrs)) + "\n")
        self.procs = [None] * n
        # start, kill9 and stop hold it; after stop nothing starts again.
        self.lock = threading.Lock()
        self.closed = False
        try:
            for i in range(n):
                self.start(i)
        except BaseException:  # SIGTERM too
            self.stop()
            raise

    def start(self, i):
        argv = [common.sepkv_binary(), "--db", os.path.join(self.dir, self.ids[i]), "serve",
                "--bind", self.hosts[i], "--port", str(self.ports[i]), "--requirepass", PASSWORD,
                "--cluster-config", self.conf, "--cluster-node-id", self.ids[i]]
        if self.net:
            argv = self.net.prefix(i) + argv  # ip netns exec execs the server: same pid
        with self.lock:
            if self.closed:
                raise RuntimeError("the shard is stopped")
            with open(os.path.join(self.dir, f"{self.ids[i]}.out"), "a") as out:
                self.procs[i] = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
        end = time.monotonic() + 20
        while not self.answers(i):
            if self.procs[i].poll() is not None or time.monotonic() > end:
                raise RuntimeError(f"{self.ids[i]} did not start (see its log)")
            time.sleep(0.05)

    def answers(self, i):
        try:
            return self.client(i, timeout=0.5).ping()
        except redis.RedisError:
            return False

    def kill9(self, i):
        with self.lock:
            self.procs[i].kill()
            self.procs[i].wait()

    def client(self, i, timeout=SOCKET_TIMEOUT):
        # No retry of a command by redis-py: a resent INCR would count twice.
        return redis.Redis(host=self.hosts[i], port=self.ports[i], password=PASSWORD,
                           socket_timeout=timeout, socket_connect_timeout=timeout,
                           retry=Retry(NoBackoff(), 0), retry_on_timeout=False)

    def node_of(self, addr):
        host, port = addr.rsplit(":", 1)
        for i in range(len(self.ids)):
            if self.hosts[i] == host and self.ports[i] == int(port):
                return i
        return None

    def leaders(self):
        """The nodes that call themselves leader (INFO cluster)."""
        out = []
        for i, p in enumerate(self.procs):
            if p is None or p.poll() is not None:
                continue
            try:
                if self.client(i, timeout=1).info("cluster").get("raft_role") == "leader":
                    out.append(i)
            except redis.RedisError:
                pass
        return out

    def stop(self):
        with self.lock:
            self.closed = True
        try:
            for p in self.procs:
                if p is not None and p.poll() is None:
                    p.send_signal(signal.SIGTERM)
                    try:
                        p.wait(timeout=30)
                    except subprocess.TimeoutExpired:
                        p.kill()
                        p.wait()
        finally:
            if self.net:
                self.net.close()
            shutil.rmtree(self.dir, ignore_errors=True)


def client_loop(shard, cid, seed, keys, end, max_ops, history, lock):
    rng = random.Random(seed * 1009 + cid)
    n = len(shard.ids)
    node, conn, done, serial = cid % n, None, 0, 0
    home = cid % n
    while done < max_ops and time.monotonic() < end:
        if node != home and rng.random() < HOME_RETURN:
            node, conn = home, None
        if conn is None:
            # Connecting is not an operation: a node that is down is skipped.
            conn = shard.client(node)
            try:
                conn.ping()
            except redis.RedisError:
                conn, node = None, (node + 1) % n
                time.sleep(0.05)
                continue
        key = rng.choice(keys)
        x = rng.random()
        rec = {"client": cid, "node": node, "key": key}
        if x < 0.5:
            rec["op"] = "get"
        elif x < 0.8:
            serial += 1
            rec["op"], rec["arg"] = "set", (cid + 1) * 1_000_000_000 + serial * 1000
        else:
            rec["op"] = "incr"
        rec["call"] = time.monotonic_ns()
        try:
            if rec["op"] == "get":
                r = conn.get(key)
            elif rec["op"] == "set":
                r = conn.set(key, rec["arg"])
            else:
                r = conn.incr(key)
            ret = time.monotonic_ns()
            if rec["op"] == "set" and r is not True:
                raise redis.ResponseError(f"SET answered {r!r}")
            if rec["op"] == "get":
                rec["out"] = None if r is None else int(r)
            elif rec["op"] == "incr":
                rec["out"] = int(r)
            rec["ret"] = ret
        except redis.ResponseError as e:
            msg = str(e)
            rec["error"] = msg[:120]
            if msg.startswith(NOT_PROPOSED):
                # A definite failure: the node did not propose it, or its
                # entry was cut from the log (openraft answers
                # ForwardToLeader only then); if it took effect all the
                # same, the check finds its value.
                rec["failed"] = True
                rec["ret"] = time.monotonic_ns()
            # Any other error: indeterminate (it may have been proposed).
            moved = msg.split()[2] if msg.startswith("MOVED") and len(msg.split()) > 2 else None
            nxt = shard.node_of(moved) if moved else None
            node = nxt if nxt is not None else (node + 1) % n
            conn = None
            if nxt is None:
                time.sleep(0.05)
        except (redis.ConnectionError, redis.TimeoutError) as e:
            rec["error"] = type(e).__name__
            conn, node = None, (node + 1) % n
            time.sleep(0.05)
        with lock:
            history.append(rec)
        done += 1


def nemesis(shard, rng, faults, end, counts, stop, events):
    """One fault at a time until `end`; every node up and healed after."""
    n = len(shard.ids)
    while time.monotonic() < end and not stop.is_set():
        time.sleep(rng.uniform(0.5, 1.5))
        if time.monotonic() >= end:
            break
        leaders = shard.leaders()
        kind = rng.choice(faults)
        # Kills hit the leader two times in three; cuts always do (a
        # cut-off follower only stops answering).
        leads = leaders and (kind == "partition" or rng.random() < 2 / 3)
        victim = leaders[0] if leads else rng.randrange(n)
        name = shard.ids[victim]
        if kind == "kill":
            events.append({"time": time.monotonic_ns(), "what": f"kill -9 {name}"})
            shard.kill9(victim)
            counts["kills"] += 1
            time.sleep(rng.uniform(0.3, 1.5))
            events.append({"time": time.monotonic_ns(), "what": f"restart {name}"})
            shard.start(victim)
        else:
            events.append({"time": time.monotonic_ns(), "what": f"cut {name} off"})
            shard.net.cut(victim)
            counts["partitions"] += 1
            try:
                time.sleep(rng.uniform(2.0, 4.0))
            finally:
                shard.net.heal()
                events.append({"time": time.monotonic_ns(), "what": f"heal {name}"})
        common.wait_until("a leader after the fault", lambda: shard.leaders(), timeout=30)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--out", required=True, help="the history file to write (JSON)")
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--clients", type=int, default=6)
    ap.add_argument("--keys", type=int, default=4)
    ap.add_argument("--ops", type=int, default=5000, help="most operations per client")
    ap.add_argument("--faults", default="kill,partition")
    ap.add_argument("--loopback", action="store_true", help="no namespaces: kills only")
    a = ap.parse_args()
    if not (1 <= a.clients <= 64 and 1 <= a.keys <= 64 and 0 < a.seconds <= 3600 and a.ops > 0):
        ap.error("--clients and --keys take 1-64, --seconds 0-3600, --ops a positive count")
    faults = [f for f in a.faults.split(",") if f]
    if not faults or any(f not in ("kill", "partition") for f in faults):
        ap.error("--faults takes kill and/or partition")
    netns = not a.loopback and netns_available()
    if not netns and "partition" in faults:
        if common.ci():
            sys.exit("FAIL: partitions need network namespaces (root, iproute2) (CI=true)")
        faults = [f for f in faults if f != "partition"] or ["kill"]
        why = "--loopback" if a.loopback else "network namespaces unavailable: needs root and iproute2"
        print(f"partitions: skipped ({why})")
    # Stopped from outside (timeout sends SIGTERM): the servers and the
    # namespaces are still removed (the finally below).
    def stopped(*_):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # one is enough: let the cleanup run
        sys.exit("FAIL: stopped by SIGTERM")

    signal.signal(signal.SIGTERM, stopped)
    rng = random.Random(a.seed)
    shard = Shard(3, netns)
    history, lock, counts, events = [], threading.Lock(), {"kills": 0, "partitions": 0}, []
    stop = threading.Event()
    try:
        common.wait_until("a leader", lambda: shard.leaders(), timeout=30)
        start = time.monotonic()
        end = start + a.seconds
        keys = [f"lin:{k}" for k in range(a.keys)]
        threads = [threading.Thread(target=client_loop,
                                    args=(shard, c, a.seed, keys, end, a.ops, history, lock),
                                    daemon=True)
                   for c in range(a.clients)]
        for t in threads:
            t.start()
        nem_error = []

        def run_nemesis():
            try:
                nemesis(shard, rng, faults, end - 2, counts, stop, events)
            except Exception as e:  # reported after the clients stop
                nem_error.append(e)

        nem = threading.Thread(target=run_nemesis, daemon=True)
        nem.start()
        for t in threads:
            t.join(timeout=a.seconds + 60)
        stop.set()
        nem.join(timeout=60)
        if nem_error:
            raise nem_error[0]
        if any(t.is_alive() for t in threads) or nem.is_alive():
            raise RuntimeError("a client or the nemesis did not stop in time")
    finally:
        shard.stop()
    history.sort(key=lambda r: r["call"])
    with open(a.out, "w") as f:
        json.dump({"seed": a.seed, "network": "network namespaces" if netns else "loopback",
                   "faults": counts, "events": events, "ops": history}, f)
    unknown = sum(1 for r in history if "ret" not in r)
    failed = sum(1 for r in history if r.get("failed"))
    completed = len(history) - unknown - failed
    print(f"seed {a.seed}: {len(history)} operations recorded ({completed} completed, {unknown} "
          f"indeterminate (reads among them), {failed} failed), faults: {counts['kills']} kills, {counts['partitions']} partitions "
          f"({'network namespaces' if netns else 'loopback'})")
    if completed == 0:
        sys.exit("FAIL: no operation completed")


if __name__ == "__main__":
    sys.exit(main())
