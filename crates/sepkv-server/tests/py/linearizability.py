"""A linearizability run against one replicated shard: a recorder and a
nemesis. The history it writes is checked by the Go program in
crates/sepkv-server/tests/lincheck (porcupine); scripts/test-linearizability.sh
runs both.

Three `sepkv serve` nodes form one shard of all slots (one Raft group);
with membership changes, two spare machines stand beside them. In
network namespaces (root and iproute2; a bridge on 198.19.X.254 and one
namespace per machine on 198.19.X.1-5, nothing leaving the machine) or,
where they cannot be made, on 127.0.0.1.

The recorder: CLIENTS threads, one redis-py connection each (no automatic
retry, short socket timeouts), send GET, SET and INCR on KEYS keys against
the node they believe leads. Each operation records its client, op, key,
argument, the monotonic-clock readings (ns) before it was sent and after
its reply came, and the reply (and the node, by machine and node ID). An operation whose reply does not come
(timeout, connection lost, an error after the node proposed it) is recorded
without a return time: indeterminate. `-MOVED` and `-CLUSTERDOWN The shard
has no leader` are definite failures (the node never proposed the write,
or openraft cut its entry from the log): recorded as failed, and the check
holds the server to that. The client then moves on (to the node `-MOVED`
names, else the next member), and whatever it does next is a new operation.
Clients connect only to the shard's current members (a client still
connected to a node just removed gets its `-MOVED`, a definite failure:
the node does not propose). Client c's home is member c mod 3 of the
current list: away from it, a client goes back there
before one operation in five, so every node keeps being asked, a leader
cut off from the others included. SET writes integers unique to the run, so a read tells
which write it saw.

The nemesis, meanwhile, one fault at a time, seeded: kills a node with
kill -9 (the leader, two times in three) and restarts it; or, in
namespaces, cuts the leader off from the two
others (blackhole routes both ways between the nodes; the clients still
reach every node, so a deposed leader that answers is seen) and heals the
cut; or (fault `member`) replaces a voter (the leader one time in three)
by a spare: a new topology version listing the spare in its place is
installed with CLUSTER SETTOPOLOGY on every node, the leader first, the
spare starts with an empty data directory, and once the leader says
`raft_membership:settled` with the new voters (at most 60 s) and the
removed node says `raft_role:removed` (at most 30 s), the removed node is
stopped and its data directory and Raft records deleted: the machine is
a spare again, to come back only as a new node (a new ID and port). Each
step is written to the history's events with its clock reading. It stops
two seconds before the clients, with every member up and every cut
healed.

Bounded: the clients stop after SECONDS or OPS operations each; every
server is stopped by its pid and the namespaces removed at the end.

Usage: linearizability.py --seed N --out FILE [--seconds S] [--clients C]
           [--keys K] [--ops N] [--faults kill,partition,member] [--loopback]
Prints one line of figures:
  seed N: O operations recorded (C completed, I indeterminate (reads among
  them), F failed), faults: K kills, P partitions, M membership changes
  (NETWORK)
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
    """One shard of all slots, one Raft group: `voters` machines (slots
    0..voters-1) are its nodes at first; the others are spares, not
    started until a membership change adds them."""

    def __init__(self, n, netns, voters=3):
        self.dir = tempfile.mkdtemp(prefix="sepkv-linearizability-")
        self.net = Net(n) if netns else None
        self.hosts = self.net.hosts if self.net else ["127.0.0.1"] * n
        self.ports = [0] * n
        self.addrs = [""] * n
        self.ids = [""] * n
        self.gen = [0] * n
        self.conf = os.path.join(self.dir, "topology.conf")
        self.version = 0
        self.procs = [None] * n
        # start, kill9, stop and the members list hold it; after stop
        # nothing starts again.
        self.lock = threading.Lock()
        self.closed = False
        self.members = list(range(voters))
        for i in range(n):
            self.new_identity(i)
        self.write_topology()
        try:
            for i in self.members:
                self.start(i)
        except BaseException:  # SIGTERM too
            self.stop()
            raise

    def new_identity(self, i):
        """Machine i's next node: a new ID, a new client port, a new data
        directory (a removed node comes back only as a new node)."""
        self.gen[i] += 1
        g = self.gen[i]
        self.ids[i] = f"node{i + 1}" if g == 1 else f"node{i + 1}-{g}"
        if self.net:
            self.ports[i] = 6378 + g
            self.addrs[i] = f"{self.hosts[i]}:{self.ports[i]}"
        else:
            self.ports[i] = common.free_port()
            self.addrs[i] = f"127.0.0.1:{self.ports[i]}@{common.free_port()}"

    def topology(self):
        """The next version of the topology, listing the members."""
        self.version += 1
        return f"version {self.version}\nshard1 0-16383 " + " ".join(
            f"{self.ids[i]}={self.addrs[i]}" for i in self.members) + "\n"

    def write_topology(self):
        text = self.topology()
        with open(self.conf, "w") as f:
            f.write(text)
        return text

    def current(self):
        with self.lock:
            return list(self.members)

    def home(self, cid):
        m = self.current()
        return m[cid % len(m)]

    def after(self, i):
        """The member after machine i (the first one if i is none)."""
        m = self.current()
        return m[(m.index(i) + 1) % len(m)] if i in m else m[0]

    def wipe(self, i):
        """Deletes machine i's data directory and its Raft records."""
        db = os.path.join(self.dir, self.ids[i])
        shutil.rmtree(db, ignore_errors=True)
        shutil.rmtree(db + ".raft", ignore_errors=True)

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

    def terminate(self, i):
        """Stops machine i's server with SIGTERM (kill -9 after 30 s)."""
        with self.lock:
            p = self.procs[i]
        common.stop_process(p)

    def client(self, i, timeout=SOCKET_TIMEOUT):
        # No retry of a command by redis-py: a resent INCR would count twice.
        return redis.Redis(host=self.hosts[i], port=self.ports[i], password=PASSWORD,
                           socket_timeout=timeout, socket_connect_timeout=timeout,
                           retry=Retry(NoBackoff(), 0), retry_on_timeout=False)

    def node_of(self, addr):
        host, port = addr.rsplit(":", 1)
        with self.lock:
            for i in self.members:
                if self.hosts[i] == host and self.ports[i] == int(port):
                    return i
        return None

    def info(self, i):
        return self.client(i, timeout=1).info("cluster")

    def leaders(self):
        """The nodes that call themselves leader (INFO cluster)."""
        out = []
        for i in self.current():
            p = self.procs[i]
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
            common.stop_processes(self.procs)
        finally:
            if self.net:
                self.net.close()
            shutil.rmtree(self.dir, ignore_errors=True)


def client_loop(shard, cid, seed, keys, end, max_ops, history, lock):
    rng = random.Random(seed * 1009 + cid)
    node, conn, done, serial = shard.home(cid), None, 0, 0
    while done < max_ops and time.monotonic() < end:
        home = shard.home(cid)
        if node != home and rng.random() < HOME_RETURN:
            node, conn = home, None
        if conn is None:
            # Connecting is not an operation: a node that is down is
            # skipped, and a client connects only to current members.
            node = node if node in shard.current() else shard.after(node)
            conn = shard.client(node)
            try:
                conn.ping()
            except redis.RedisError:
                conn, node = None, shard.after(node)
                time.sleep(0.05)
                continue
        key = rng.choice(keys)
        x = rng.random()
        rec = {"client": cid, "node": node, "id": shard.ids[node], "key": key}
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
            node = nxt if nxt is not None else shard.after(node)
            conn = None
            if nxt is None:
                time.sleep(0.05)
        except (redis.ConnectionError, redis.TimeoutError) as e:
            rec["error"] = type(e).__name__
            conn, node = None, shard.after(node)
            time.sleep(0.05)
        with lock:
            history.append(rec)
        done += 1


def voters_of(info):
    v = info.get("raft_voters", "")
    if isinstance(v, str):  # redis-py splits a value with commas
        v = v.split(",")
    return sorted(str(x) for x in v)


def settled(shard, want):
    """Whether a leader among the members says the change to the voters
    `want` (node IDs) is done."""
    for i in shard.leaders():
        try:
            info = shard.info(i)
        except redis.RedisError:
            continue
        if info.get("raft_membership") == "settled" and voters_of(info) == want:
            return True
    return False


def role(shard, i):
    try:
        return shard.info(i).get("raft_role")
    except redis.RedisError:
        return None


def change_membership(shard, rng, events, counts):
    """Replaces a voter (the leader one time in three) by a spare machine,
    in one topology version installed on every node (the leader first),
    then waits for the change to settle, stops the removed node and wipes
    its data: the machine comes back only as a new node."""
    members = shard.current()
    spares = [i for i in range(len(shard.ids)) if i not in members]
    leaders = shard.leaders()
    followers = [i for i in members if i not in leaders]
    out = leaders[0] if leaders and (rng.random() < 1 / 3 or not followers) else rng.choice(followers)
    new = rng.choice(spares)
    old_id, new_id = shard.ids[out], shard.ids[new]
    order = leaders[:1] + [i for i in members if i not in leaders[:1]]
    with shard.lock:
        shard.members = [new if i == out else i for i in members]
    text = shard.write_topology()
    want = sorted(shard.ids[i] for i in shard.current())
    events.append({"time": time.monotonic_ns(),
                   "what": f"topology version {shard.version}: {new_id} replaces {old_id}"})
    counts["membership"] += 1
    for i in order:
        r = shard.client(i, timeout=10).execute_command("CLUSTER", "SETTOPOLOGY", text)
        if r not in (b"OK", "OK", True):
            raise RuntimeError(f"{shard.ids[i]} answered {r!r} to the topology")
    events.append({"time": time.monotonic_ns(), "what": f"start {new_id} (empty data directory)"})
    shard.start(new)
    common.wait_until(f"the change to {','.join(want)} to settle",
                      lambda: settled(shard, want), timeout=60)
    events.append({"time": time.monotonic_ns(), "what": f"settled: voters {','.join(want)}"})
    common.wait_until(f"{old_id} to leave the group",
                      lambda: role(shard, out) == "removed", timeout=30)
    shard.terminate(out)
    shard.wipe(out)
    shard.new_identity(out)
    events.append({"time": time.monotonic_ns(),
                   "what": f"{old_id} removed: stopped, data wiped (a spare again, as {shard.ids[out]})"})


def nemesis(shard, rng, faults, end, counts, stop, events):
    """One fault at a time until `end`; every node up and healed after."""
    while time.monotonic() < end and not stop.is_set():
        time.sleep(rng.uniform(0.5, 1.5))
        if time.monotonic() >= end:
            break
        kind = rng.choice(faults)
        if kind == "member":
            change_membership(shard, rng, events, counts)
            common.wait_until("a leader after the change", lambda: shard.leaders(), timeout=30)
            continue
        leaders = shard.leaders()
        # Kills hit the leader two times in three; cuts always do (a
        # cut-off follower only stops answering).
        leads = leaders and (kind == "partition" or rng.random() < 2 / 3)
        victim = leaders[0] if leads else rng.choice(shard.current())
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
    if not faults or any(f not in ("kill", "partition", "member") for f in faults):
        ap.error("--faults takes kill, partition and/or member")
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
    # Three voters; with membership changes two spare machines beside.
    shard = Shard(5 if "member" in faults else 3, netns)
    history, lock, counts, events = [], threading.Lock(), {"kills": 0, "partitions": 0, "membership": 0}, []
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
          f"indeterminate (reads among them), {failed} failed), faults: {counts['kills']} kills, {counts['partitions']} partitions, "
          f"{counts['membership']} membership changes "
          f"({'network namespaces' if netns else 'loopback'})")
    if completed == 0:
        sys.exit("FAIL: no operation completed")


if __name__ == "__main__":
    sys.exit(main())
