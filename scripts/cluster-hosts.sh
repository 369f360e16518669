#!/usr/bin/env bash
# Three sepkv hosts on one machine: starts N cluster nodes (default 3),
# each in its own network namespace on 198.18.0.1, .2, .3 (the
# benchmarking range, 198.18.0.0/15), joined to a bridge that holds
# 198.18.0.254 in this namespace, so that nothing leaves the machine.
# The nodes bind non-loopback addresses, so they run with --requirepass.
# Where namespaces cannot be made (no root, no iproute2, a container
# without CAP_NET_ADMIN) or with --loopback, the nodes listen on 127.0.0.1
# on free ports instead.
#
# Usage: scripts/cluster-hosts.sh [--nodes N] [--loopback] [--fsync POLICY]
#                                 [--replicated] [-- COMMAND [ARG...]]
#
# --replicated puts every node in one shard of all slots: one Raft group
# (docs/replication.md) instead of one shard per node.
#
# With a COMMAND, runs it once the cluster is up and tears everything down
# when it ends (its exit status is the script's); without one, prints the
# nodes and waits for Ctrl-C. Either way the nodes, namespaces, bridge and
# data are removed on exit. The command sees:
#
#   SEPKV_CLUSTER_HOSTS   "HOST:PORT HOST:PORT ..." of the nodes
#   SEPKV_CLUSTER_HOST, SEPKV_CLUSTER_PORT   the first node
#   SEPKV_CLUSTER_CONFIG  the topology file (for `sepkv cluster migrate`)
#   SEPKV_PASSWORD        the nodes' password (random unless set)
#   SEPKV_CLUSTER_NETNS   the nodes' namespaces, in node order (namespaces)
#   SEPKV_CLUSTER_LINKS   this side's veth of each node (namespaces): taking
#                         one down cuts that node off (partition tests)
#
# Environment: SEPKV_BIN (default: target/release/sepkv, else
# target/debug/sepkv), SEPKV_PRESET (default leveldb).
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
nodes=3
loopback=false
fsync=everysec
replicated=false
while [ $# -gt 0 ]; do
    case "$1" in
        --nodes) nodes="$2"; shift 2 ;;
        --loopback) loopback=true; shift ;;
        --fsync) fsync="$2"; shift 2 ;;
        --replicated) replicated=true; shift ;;
        --) shift; break ;;
        -h|--help) sed -n '2,35p' "$0"; exit 0 ;;
        *) echo "unknown option $1 (see --help)" >&2; exit 2 ;;
    esac
done
[[ "$nodes" =~ ^[1-3]$ ]] || { echo "--nodes takes 1, 2 or 3" >&2; exit 2; }

bin="${SEPKV_BIN:-}"
if [ -z "$bin" ]; then
    for p in release debug; do
        if [ -x "$root/target/$p/sepkv" ]; then bin="$root/target/$p/sepkv"; break; fi
    done
fi
[ -x "$bin" ] || { echo "no sepkv binary: cargo build --release -p sepkv-cli, or set SEPKV_BIN" >&2; exit 2; }
preset="${SEPKV_PRESET:-leveldb}"
export SEPKV_PASSWORD="${SEPKV_PASSWORD:-$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')}"

dir="$(mktemp -d "${TMPDIR:-/tmp}/sepkv-hosts.XXXXXX")"
tag="sk$$"
bridge="${tag}br"
pids=()
made_ns=()

teardown() {
    local p ns
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
    for ns in "${made_ns[@]}"; do ip netns del "$ns" 2>/dev/null || true; done
    ip link del "$bridge" 2>/dev/null || true
    rm -rf "$dir"
}
trap teardown EXIT
trap 'exit 130' INT TERM

netns_ok() {
    [ "$(id -u)" = 0 ] && command -v ip >/dev/null || return 1
    ip netns add "${tag}probe" 2>/dev/null || return 1
    ip netns del "${tag}probe"
    ! ip -4 addr show | grep -q '198\.18\.0\.254/'
}

if [ "$loopback" = false ] && netns_ok; then
    mode=namespaces
    ip link add "$bridge" type bridge
    ip addr add 198.18.0.254/24 dev "$bridge"
    ip link set "$bridge" up
    for i in $(seq 1 "$nodes"); do
        ns="${tag}n$i"
        ip netns add "$ns"
        made_ns+=("$ns")
        ip link add "${tag}v$i" type veth peer name "${tag}p$i"
        ip link set "${tag}p$i" netns "$ns"
        ip -n "$ns" addr add "198.18.0.$i/24" dev "${tag}p$i"
        ip -n "$ns" link set "${tag}p$i" up
        ip -n "$ns" link set lo up
        ip link set "${tag}v$i" master "$bridge" up
        hosts[i]="198.18.0.$i"
        ports[i]=6379
    done
else
    mode=loopback
    for i in $(seq 1 "$nodes"); do
        hosts[i]=127.0.0.1
        ports[i]=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    done
fi

conf="$dir/topology.conf"
{
    echo "version 1"
    if [ "$replicated" = true ]; then
        line="shard1 0-16383"
        for i in $(seq 1 "$nodes"); do line="$line node$i=${hosts[i]}:${ports[i]}"; done
        echo "$line"
    else
        for i in $(seq 1 "$nodes"); do
            echo "shard$i $(( (i - 1) * 16384 / nodes ))-$(( i * 16384 / nodes - 1 )) node$i=${hosts[i]}:${ports[i]}"
        done
    fi
} >"$conf"

for i in $(seq 1 "$nodes"); do
    run=()
    [ "$mode" = namespaces ] && run=(ip netns exec "${tag}n$i")
    "${run[@]}" "$bin" --db "$dir/node$i" --preset "$preset" serve \
        --bind "${hosts[i]}" --port "${ports[i]}" --requirepass "$SEPKV_PASSWORD" --fsync "$fsync" \
        --cluster-config "$conf" --cluster-node-id "node$i" >"$dir/node$i.log" 2>&1 &
    pids+=($!)
done
for i in $(seq 1 "$nodes"); do
    for _ in $(seq 1 200); do
        grep -q '^ready:' "$dir/node$i.log" 2>/dev/null && break
        sleep 0.05
    done
    grep -q '^ready:' "$dir/node$i.log" || { echo "node$i did not start:" >&2; cat "$dir/node$i.log" >&2; exit 1; }
done

list=""
for i in $(seq 1 "$nodes"); do list="$list ${hosts[i]}:${ports[i]}"; done
export SEPKV_CLUSTER_HOSTS="${list# }"
export SEPKV_CLUSTER_HOST="${hosts[1]}" SEPKV_CLUSTER_PORT="${ports[1]}"
export SEPKV_CLUSTER_CONFIG="$conf"
if [ "$mode" = namespaces ]; then
    export SEPKV_CLUSTER_NETNS="${made_ns[*]}"
    links=""
    for i in $(seq 1 "$nodes"); do links="$links ${tag}v$i"; done
    export SEPKV_CLUSTER_LINKS="${links# }"
fi
echo "cluster of $nodes node(s) on $mode: $SEPKV_CLUSTER_HOSTS" >&2

if [ $# -eq 0 ]; then
    echo "topology: $conf; password in SEPKV_PASSWORD of this script; Ctrl-C stops" >&2
    echo "  redis-cli -c -h $SEPKV_CLUSTER_HOST -p $SEPKV_CLUSTER_PORT -a $SEPKV_PASSWORD" >&2
    wait
else
    set +e
    "$@"
    status=$?
    set -e
    exit $status
fi
