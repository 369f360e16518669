"""Membership changes of a replicated shard under a write load.

A shard of three nodes (one Raft group, all slots) takes SETs from four
RedisCluster writer threads, which record every acknowledged write, while:

1. changes that must be refused are refused, naming the shard: one that
   leaves one node, one that keeps only half of the nodes, and (on the
   leader) a second change while the first waits for its new node;
2. a fourth node is added (CLUSTER SETTOPOLOGY on every node, then the node
   starts with the new topology file): the leader is killed with kill -9
   before the new node starts, and the new leader adds it as a learner,
   catches it up (by snapshot, then log) and makes it a voter; the killed
   node restarts and catches up;
3. a fifth node is added, this time by SIGHUP after the file is rewritten;
4. the leader itself is removed: a new leader is elected among the other
   four, the removed node leaves the group (INFO says raft_role:removed)
   and answers -MOVED for the shard's keys;
5. a follower is killed with kill -9 and replaced by a sixth node in one
   change (the dead machine is never needed).

Then the writers stop, and every acknowledged write must be present with
its value on each of the four nodes of the end (READONLY reads on each),
whose DBSIZE must equal the leader's: acknowledged writes lost: 0, and the
new replicas serve the same data. CLUSTER NODES must list the voters only.

Every server listens on 127.0.0.1 (client and bus ports) and is stopped by
its pid at the end. Environment: SEPKV_BIN.
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
from redis.cluster import ClusterNode, RedisCluster  # noqa: E402

WRITERS = 4
LIMIT = 90.0  # seconds the whole scenario may take


class Group:
    """Up to six nodes on loopback; the topology lists those in `members`."""

    def __init__(self, n=6):
        self.dir = tempfile.mkdtemp(prefix="sepkv-membership-")
        # free_port never hands out a port twice in one process.
        ports = [common.free_port() for _ in range(2 * n)]
        self.ports, self.bus = ports[:n], ports[n:]
        self.ids = [f"node{i + 1}" for i in range(n)]
        self.conf = os.path.join(self.dir, "topology.conf")
        self.procs = [None] * n
        self.version = 0

    def topology(self, members, version):
        nodes = " ".join(f"{self.ids[i]}=127.0.0.1:{self.ports[i]}@{self.bus[i]}"
                         for i in members)
        return f"version {version}\nshard1 0-16383 {nodes}\n"

    def write(self, members):
        self.version += 1
        text = self.topology(members, self.version)
        with open(self.conf, "w") as f:
            f.write(text)
        return text

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

    def running(self):
        return [i for i, p in enumerate(self.procs) if p is not None and p.poll() is None]

    def node(self, i):
        return redis.Redis(port=self.ports[i], socket_timeout=10)

    def listed(self, i):
        """(master, [node IDs]) as node i's CLUSTER NODES lists them."""
        text = self.node(i).execute_command("CLUSTER NODES")
        ids, master = [], None
        if isinstance(text, dict):  # redis-py parses the reply
            for info in text.values():
                ids.append(info["node_id"])
                if "master" in info["flags"]:
                    master = info["node_id"]
            return master, sorted(ids)
        if isinstance(text, bytes):
            text = text.decode()
        for line in text.splitlines():
            w = line.split()
            ids.append(w[0])
            if "master" in w[2]:
                master = w[0]
        return master, sorted(ids)

    def leader(self, members):
        """The index of the node every member names as master, if any."""
        seen = set()
        for i in members:
            try:
                info = self.node(i).info("cluster")
            except redis.RedisError:
                return None
            if info.get("raft_leader", "-") == "-":
                return None
            seen.add(info["raft_leader"])
        if len(seen) != 1:
            return None
        nid = seen.pop()
        return self.ids.index(nid) if nid in self.ids else None

    def stop(self):
        common.stop_processes(self.procs)
        shutil.rmtree(self.dir, ignore_errors=True)


class Writers:
    """Threads doing SETs of fresh keys through RedisCluster, recording
    every acknowledged one; a failed SET is retried (same key, same
    value) for up to 30 s."""

    def __init__(self, group, members):
        self.group = group
        self.members = list(members)
        self.acked = {}
        self.errors = 0
        self.failures = []
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.threads = [threading.Thread(target=self.run, args=(w,)) for w in range(WRITERS)]
        for t in self.threads:
            t.start()

    def client(self):
        nodes = [ClusterNode("127.0.0.1", self.group.ports[i]) for i in self.members]
        return RedisCluster(startup_nodes=nodes, socket_timeout=5, cluster_error_retry_attempts=1)

    def run(self, w):
        cl = None
        n = w
        try:
            while not self.stopping.is_set():
                key, val = f"m:{n}", f"v:{n}"
                end = time.time() + 30
                while True:
                    try:
                        if cl is None:
                            cl = self.client()
                        cl.set(key, val)
                        break
                    except Exception:  # a node leaving, an election: retry
                        with self.lock:
                            self.errors += 1
                        if time.time() > end:
                            raise
                        cl = None
                        time.sleep(0.05)
                with self.lock:
                    self.acked[key] = val
                n += WRITERS
        except Exception as e:  # noqa: BLE001 (reported by stop)
            self.failures.append(repr(e))

    def count(self):
        with self.lock:
            return len(self.acked)

    def stop(self):
        self.stopping.set()
        for t in self.threads:
            t.join(timeout=60)
        assert not self.failures, f"writers failed: {self.failures[:3]}"


def refused(node, text, *words):
    try:
        node.execute_command("CLUSTER", "SETTOPOLOGY", text)
    except redis.ResponseError as e:
        msg = str(e)
        assert all(w in msg for w in words), f"refused, but with {msg!r}"
        return msg
    raise AssertionError(f"accepted a topology that should be refused:\n{text}")


def install(group, members, text):
    for i in members:
        assert group.node(i).execute_command("CLUSTER", "SETTOPOLOGY", text) in (b"OK", "OK", True)


def settled(group, members):
    """Whether the leader of `members` says its membership change is done."""
    at = group.leader(members)
    if at is None:
        return False
    return group.node(at).info("cluster").get("raft_membership") == "settled"


def voters_listed(group, at, want):
    ids = sorted(group.ids[i] for i in want)
    master, listed = group.listed(at)
    return listed == ids and master in ids


def replica_values(group, i, keys):
    r = group.node(i)
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


def main():
    t0 = time.time()
    g = Group()
    try:
        g.write([0, 1, 2])
        for i in range(3):
            g.start(i)
        wait_until("a leader", lambda: g.leader([0, 1, 2]) is not None)
        w = Writers(g, [0, 1, 2])
        wait_until("3,000 acknowledged writes", lambda: w.count() >= 3000, timeout=60)

        # Refused changes, naming the shard.
        follower = next(i for i in range(3) if i != g.leader([0, 1, 2]))
        refused(g.node(follower), g.topology([follower, 3], 50), "shard1", "keeps 1 of its 3")
        refused(g.node(follower), g.topology([follower], 50), "shard1", "at least two")

        # A fourth node: installed everywhere before it starts, so the
        # leader waits for it; a second change meanwhile is refused.
        v2 = g.write([0, 1, 2, 3])
        install(g, [0, 1, 2], v2)
        leader = g.leader([0, 1, 2])
        msg = refused(g.node(leader), g.topology([0, 1, 2, 3, 4], g.version + 1),
                      "shard1", "in progress")
        # The leader is killed in the middle of the change: the new one
        # carries it on from the topology in force and the log.
        killed = leader
        g.kill9(killed)
        live = [i for i in range(3) if i != killed]
        wait_until("a new leader of the two left", lambda: g.leader(live) in live, timeout=30)
        t_add4 = time.time()
        g.start(3)
        wait_until("node4 listed as a voter",
                   lambda: voters_listed(g, g.leader(live + [3]) or live[0], [0, 1, 2, 3]),
                   timeout=60)
        add4 = time.time() - t_add4
        g.start(killed)
        wait_until("the change to four nodes to end", lambda: settled(g, range(4)), timeout=30)
        at4 = w.count()

        # A fifth node, by SIGHUP.
        g.write([0, 1, 2, 3, 4])
        for i in range(4):
            g.procs[i].send_signal(signal.SIGHUP)
        t_add5 = time.time()
        g.start(4)
        wait_until("node5 listed as a voter",
                   lambda: voters_listed(g, g.leader(range(5)) or 0, range(5)), timeout=60)
        add5 = time.time() - t_add5
        wait_until("the change to five nodes to end", lambda: settled(g, range(5)), timeout=30)
        for i in range(5):
            wait_until(f"{g.ids[i]} to list five voters",
                       lambda i=i: voters_listed(g, i, range(5)), timeout=30)
        at5 = w.count()

        # Remove the leader.
        gone = g.leader(range(5))
        assert gone is not None, "no leader of five"
        rest = [i for i in range(5) if i != gone]
        v4 = g.write(rest)
        t_rm = time.time()
        install(g, rest + [gone], v4)
        wait_until("a leader among the other four",
                   lambda: g.leader(rest) in rest and voters_listed(g, g.leader(rest), rest),
                   timeout=60)
        rm = time.time() - t_rm
        new_leader = g.leader(rest)
        wait_until("the removal to end", lambda: settled(g, rest), timeout=30)
        voters = g.node(new_leader).info("cluster")["raft_voters"]
        if isinstance(voters, str):  # redis-py splits a value with commas
            voters = voters.split(",")
        assert voters == sorted(g.ids[i] for i in rest), f"voters {voters}"
        wait_until("the removed node to leave the group",
                   lambda: g.node(gone).info("cluster").get("raft_role") == "removed",
                   timeout=30)
        for i in rest:
            wait_until(f"{g.ids[i]} to list the four voters",
                       lambda i=i: voters_listed(g, i, rest), timeout=30)
        try:
            g.node(gone).get("m:0")
            raise AssertionError("the removed node served a key of the shard")
        except redis.ResponseError as e:
            assert isinstance(e, redis.exceptions.MovedError) or str(e).startswith("MOVED"), \
                f"the removed node answered {e!r}"
        at_rm = w.count()
        wait_until("writes after the removal", lambda: w.count() >= at_rm + 500, timeout=60)

        # A dead machine replaced: a follower killed with kill -9, and a
        # topology with node6 in its place; the three survivors carry both
        # configurations of the joint change.
        dead = next(i for i in rest if i != new_leader)
        g.kill9(dead)
        alive = [i for i in rest if i != dead]
        final = alive + [5]
        v5 = g.write(final)
        install(g, alive, v5)
        t_rep = time.time()
        g.start(5)
        wait_until("node6 in the dead node's place",
                   lambda: voters_listed(g, g.leader(final) or alive[0], final), timeout=60)
        rep = time.time() - t_rep
        wait_until("the replacement to end", lambda: settled(g, final), timeout=30)
        at_rep = w.count()
        wait_until("writes after the replacement", lambda: w.count() >= at_rep + 300, timeout=60)
        w.stop()

        new_leader = g.leader(final)
        assert new_leader is not None, "no leader at the end"
        rest = final
        keys = sorted(w.acked)
        lead = g.node(new_leader)
        size = lead.dbsize()
        assert size >= len(keys), f"the leader holds {size} keys, {len(keys)} acknowledged"
        for i in rest:
            wait_until(f"{g.ids[i]} to hold every acknowledged write",
                       lambda i=i: all(v is not None and v.decode() == w.acked[k]
                                       for k, v in replica_values(g, i, keys).items()),
                       timeout=60)
            wait_until(f"{g.ids[i]} to hold the leader's {size} keys",
                       lambda i=i: g.node(i).dbsize() == size, timeout=30)
        snaps = []
        for i in (3, 4, 5):
            with open(g.log(i)) as f:
                line = next((ln for ln in f if "installed a snapshot" in ln), None)
            snaps.append(line.split("at log index ")[1].strip() if line else "none")
        elapsed = time.time() - t0
        assert elapsed < LIMIT, f"the scenario took {elapsed:.1f} s"
        print(f"membership: refused: {msg}")
        print(f"membership: leader {g.ids[killed]} killed during the change to four nodes; "
              f"node4 a voter {add4:.2f} s after it started (snapshot at index "
              f"{snaps[0]}), node5 {add5:.2f} s (snapshot at index {snaps[1]}); leader "
              f"{g.ids[gone]} removed, {g.ids[new_leader]} leading {rm:.2f} s after the "
              f"topology was installed; {g.ids[dead]} killed and replaced by node6, a voter "
              f"{rep:.2f} s after it started (snapshot at index {snaps[2]})")
        print(f"membership: {len(keys)} writes acknowledged ({at4} before node4 was a voter, "
              f"{at5} before node5, {at_rm} before the removal, {at_rep} before the "
              f"replacement), {w.errors} retried errors; all present with their values on the "
              f"four nodes of the end, DBSIZE {size} on each (acknowledged writes lost: 0)")
    except BaseException:
        for i, p in enumerate(g.procs):
            if p is None:
                continue
            with open(g.log(i)) as f:
                tail = f.readlines()[-12:]
            try:
                info = {k: v for k, v in g.node(i).info("cluster").items() if "raft" in k}
            except redis.RedisError as e:
                info = repr(e)
            print(f"--- {g.ids[i]} ({info}), its last lines:\n{''.join(tail)}", file=sys.stderr)
        raise
    finally:
        g.stop()
    print(f"membership: 1 passed, 0 failed in {time.time() - t0:.1f} s")


if __name__ == "__main__":
    main()
