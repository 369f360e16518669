"""A partition of a replicated shard, in network namespaces.

Run by scripts/test-replication.sh inside `scripts/cluster-hosts.sh
--replicated` (three nodes on 198.18.0.1-3, one shard, one Raft group):

1. RedisCluster writes 1,000 keys.
2. The leader's link is taken down (its veth on the bridge): it is alone.
3. The majority elects a leader and serves RedisCluster writes (1,000
   more keys); the time from the cut to the first acknowledged write is
   printed.
4. The minority acknowledges nothing: SET sent to the old leader from
   inside its namespace never answers OK (3 s each).
5. The link comes back: the old leader steps down (it lists another node
   as master), and every acknowledged key is on all three nodes with its
   value; the keys sent to the minority are on none.

Environment (from cluster-hosts.sh): SEPKV_CLUSTER_HOSTS,
SEPKV_CLUSTER_NETNS, SEPKV_CLUSTER_LINKS, SEPKV_PASSWORD.
"""

import os
import subprocess
import sys
import time

import redis
from redis.cluster import ClusterNode, RedisCluster

HOSTS = [h.rsplit(":", 1) for h in os.environ["SEPKV_CLUSTER_HOSTS"].split()]
NETNS = os.environ["SEPKV_CLUSTER_NETNS"].split()
LINKS = os.environ["SEPKV_CLUSTER_LINKS"].split()
PASS = os.environ["SEPKV_PASSWORD"]
IDS = [f"node{i + 1}" for i in range(len(HOSTS))]


def node(i):
    return redis.Redis(host=HOSTS[i][0], port=int(HOSTS[i][1]), password=PASS,
                       socket_timeout=3, socket_connect_timeout=3)


def masters_seen_by(i):
    try:
        d = node(i).execute_command("CLUSTER NODES")
    except redis.RedisError:
        return None
    return {info["node_id"] for info in d.values() if "master" in info["flags"]}


def leader(among):
    seen = set()
    for i in among:
        m = masters_seen_by(i)
        if m is None:
            return None
        seen |= m
    return IDS.index(seen.pop()) if len(seen) == 1 else None


def wait_until(what, cond, timeout=30.0):
    end = time.time() + timeout
    while time.time() < end:
        v = cond()
        if v:
            return v
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def cluster(among):
    return RedisCluster(startup_nodes=[ClusterNode(HOSTS[i][0], int(HOSTS[i][1])) for i in among],
                        password=PASS, socket_timeout=3, socket_connect_timeout=3)


def readonly_values(i, keys):
    r = node(i)
    r.execute_command("READONLY")
    p = r.pipeline(transaction=False)
    for k in keys:
        p.get(k)
    return dict(zip(keys, p.execute()))


def main():
    all_nodes = range(len(HOSTS))
    old = wait_until("a leader", lambda: leader(all_nodes) is not None and leader(all_nodes) + 1)
    old -= 1
    acked = {}
    cl = cluster(all_nodes)
    for n in range(1000):
        cl.set(f"before:{n}", n)
        acked[f"before:{n}"] = str(n)
    cl.close()
    majority = [i for i in all_nodes if i != old]
    subprocess.run(["ip", "link", "set", LINKS[old], "down"], check=True)
    t_cut = time.time()
    try:
        # The majority elects and serves.
        new = wait_until("a leader of the majority",
                         lambda: (leader(majority) is not None and leader(majority) != old
                                  and leader(majority) + 1))
        new -= 1
        cl = cluster(majority)
        first = None
        for n in range(1000):
            end = time.time() + 10
            while True:
                try:
                    cl.set(f"after:{n}", n)
                    break
                except redis.RedisError:
                    if time.time() > end:
                        raise
                    time.sleep(0.1)
            if first is None:
                first = time.time() - t_cut
            acked[f"after:{n}"] = str(n)
        cl.close()
        # The minority: its old leader must acknowledge nothing.
        minority_keys = [f"minority:{n}" for n in range(3)]
        for k in minority_keys:
            r = subprocess.run(["ip", "netns", "exec", NETNS[old], "timeout", "3", "redis-cli",
                                "--no-auth-warning", "-a", PASS, "-h", HOSTS[old][0],
                                "-p", HOSTS[old][1], "SET", k, "lost"],
                               capture_output=True, text=True)
            assert r.stdout.strip() != "OK", f"the minority acknowledged SET {k}"
    finally:
        subprocess.run(["ip", "link", "set", LINKS[old], "up"], check=True)
    # Healed: the old leader steps down and catches up.
    wait_until(f"{IDS[old]} to step down",
               lambda: (masters_seen_by(old) or {IDS[old]}) - {IDS[old]}, timeout=30)
    keys = sorted(acked)
    for i in all_nodes:
        wait_until(f"{IDS[i]} to hold every acknowledged key",
                   lambda i=i: all(v is not None and v.decode() == acked[k]
                                   for k, v in readonly_values(i, keys).items()), timeout=60)
        vals = readonly_values(i, minority_keys)
        assert all(v is None for v in vals.values()), f"{IDS[i]} holds a minority write: {vals}"
    print(f"partition: {IDS[old]} (leader) cut off; it acknowledged none of "
          f"{len(minority_keys)} writes; {IDS[new]} elected, first write acknowledged "
          f"{first:.2f} s after the cut; healed: {IDS[old]} stepped down; "
          f"{len(acked)} acknowledged keys on all three nodes (lost: 0)")


if __name__ == "__main__":
    sys.exit(main())
