#!/usr/bin/env bash
# Replication suite: crates/sepkv-server/tests/py/replication.py (one shard
# of three nodes as a Raft group on loopback: the leader killed with kill -9
# under four RedisCluster writers, the new leader serving within 5 s, the
# old one catching up, every acknowledged key on all three nodes; then a
# wiped follower rejoining by snapshot; then eight readers against an
# incrementing writer on the leader, no read older than an acknowledged
# increment); then crates/sepkv-server/tests/py/membership.py (a fourth node
# added while the leader is killed, a fifth added, the leader removed, a
# killed follower replaced, all under four writers; every acknowledged
# write on the four nodes of the end). Then the linearizability check's
# short seed (scripts/test-linearizability.sh: recorded histories under
# kill -9 and partitions, checked with porcupine).
#
# Installs what it needs when missing (scripts/lib/prereqs.sh): redis-py
# (pinned). With CI=true anything that cannot be installed fails the run.
#
# Environment: SEPKV_REPLICATION_KEYS (default 10000), CARGO_TARGET_DIR.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
target="${CARGO_TARGET_DIR:-$root/target}"
# shellcheck source=scripts/lib/prereqs.sh
. "$root/scripts/lib/prereqs.sh"

need_redis_py

echo "building sepkv (test profile)"
cargo build --profile test -p sepkv-cli --bin sepkv --manifest-path "$root/Cargo.toml"
export SEPKV_BIN="$target/debug/sepkv"

timeout 600 "$py" "$root/crates/sepkv-server/tests/py/replication.py"
timeout 300 "$py" "$root/crates/sepkv-server/tests/py/membership.py"

# A partition in network namespaces (root and iproute2 needed): the
# leader's link taken down, the majority serving, no acknowledged write
# lost on healing.
if [ "$(id -u)" = 0 ] && command -v ip >/dev/null && ip netns add "sk$$probe" 2>/dev/null; then
    ip netns del "sk$$probe"
    need_tools "redis-cli" "redis-tools"
    timeout 300 "$root/scripts/cluster-hosts.sh" --replicated -- \
        "$py" "$root/crates/sepkv-server/tests/py/partition.py"
elif [ "${CI:-}" = true ]; then
    echo "FAIL: the partition test needs network namespaces (root, iproute2)" >&2
    exit 1
else
    echo "partition: skipped (network namespaces unavailable: needs root and iproute2)"
fi

# Linearizability: one short seed (SEPKV_LONG=1 runs the long mode).
timeout 600 "$root/scripts/test-linearizability.sh"
