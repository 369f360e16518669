#!/usr/bin/env bash
# The cluster suites: crates/sepkv-server/tests/py/cluster.py (three nodes
# under redis-py's RedisCluster, redis-cli -c and redis-benchmark
# --cluster; slot migration under load; nutcracker in front of plain
# nodes; kill -9 and restart), then the three-hosts script
# (scripts/cluster-hosts.sh: network namespaces where they can be made,
# loopback otherwise) with a migration between the hosts and redis-cli -c
# following MOVED across them.
#
# Installs what it needs when missing (scripts/lib/prereqs.sh): Debian's
# redis-server, redis-tools and nutcracker, and redis-py (pinned). With
# CI=true anything that cannot be installed fails the run.
#
# Environment: SEPKV_CLUSTER_KEYS (default 30000), CARGO_TARGET_DIR.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
target="${CARGO_TARGET_DIR:-$root/target}"
# shellcheck source=scripts/lib/prereqs.sh
. "$root/scripts/lib/prereqs.sh"

need_tools "redis-server redis-cli redis-benchmark nutcracker" "redis-server redis-tools nutcracker"
need_redis_py

echo "building sepkv (test profile)"
cargo build --profile test -p sepkv-cli --bin sepkv --manifest-path "$root/Cargo.toml"
export SEPKV_BIN="$target/debug/sepkv"

start=$SECONDS
"$py" "$root/crates/sepkv-server/tests/py/cluster.py"

# Three hosts: move slots 0-1000 to node2 across the bridge, then read a
# key of them (slot 449) from node1 with redis-cli -c (MOVED to node2).
"$root/scripts/cluster-hosts.sh" -- bash -c '
    set -euo pipefail
    cli() { redis-cli --no-auth-warning -a "$SEPKV_PASSWORD" "$@"; }
    cli -c -h "$SEPKV_CLUSTER_HOST" -p "$SEPKV_CLUSTER_PORT" SET "{k2}" before >/dev/null
    "$SEPKV_BIN" cluster migrate --config "$SEPKV_CLUSTER_CONFIG" --slots 0-1000 --to node2
    got=$(cli -c -h "$SEPKV_CLUSTER_HOST" -p "$SEPKV_CLUSTER_PORT" GET "{k2}")
    [ "$got" = before ] || { echo "FAIL: GET {k2} after migration: $got" >&2; exit 1; }
    moved=$(cli -h "$SEPKV_CLUSTER_HOST" -p "$SEPKV_CLUSTER_PORT" GET "{k2}")
    case "$moved" in MOVED*) ;; *) echo "FAIL: node1 should answer MOVED: $moved" >&2; exit 1 ;; esac
    echo "three hosts: slots 0-1000 moved to node2; redis-cli -c follows $moved"
'
echo "cluster suites passed in $((SECONDS - start)) s"
