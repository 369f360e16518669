#!/usr/bin/env bash
# redis-benchmark --cluster against 1, 2 and 3 sepkv nodes started by
# scripts/cluster-hosts.sh (network namespaces on 198.18.0.1-3 where they
# can be made, loopback otherwise), SET and GET at -P 1 and -P 16; and
# how the commands spread over the nodes (each node's
# total_commands_processed).
#
# Usage: scripts/bench-cluster.sh [OUT_DIR]
# Environment: N (requests per test, default 300000), SEPKV_BIN (default
# target/release/sepkv; `cargo build --release -p sepkv-cli`).
# Writes one CSV per run (redis-benchmark --csv) and a summary.txt.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
out="${1:-$(mktemp -d -t sepkv-bench-cluster.XXXXXX)}"
mkdir -p "$out"
export N="${N:-300000}"
export SEPKV_BIN="${SEPKV_BIN:-${CARGO_TARGET_DIR:-$root/target}/release/sepkv}"
export OUT="$out"

{
    echo "date: $(date -u +%Y-%m-%dT%H:%MZ)"
    echo "build: $(git -C "$root" rev-parse --short HEAD) (release)"
    echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(free -g | awk '/Mem:/ {print $2}') GiB RAM"
    echo "redis-benchmark: $(redis-benchmark --version | cut -d' ' -f2)"
    echo "requests per test: $N, -d 100 -c 50 -r 1000000, preset leveldb, --fsync everysec"
} | tee "$out/summary.txt"

for n in 1 2 3; do
    "$root/scripts/cluster-hosts.sh" --nodes "$n" -- bash -c '
        set -euo pipefail
        n=$1
        cli() { redis-cli --no-auth-warning -a "$SEPKV_PASSWORD" "$@"; }
        for P in 1 16; do
            before=()
            for hp in $SEPKV_CLUSTER_HOSTS; do
                before+=("$(cli -h "${hp%:*}" -p "${hp##*:}" info stats | tr -d "\r" | awk -F: "/^total_commands_processed/ {print \$2}")")
            done
            redis-benchmark --cluster -h "$SEPKV_CLUSTER_HOST" -p "$SEPKV_CLUSTER_PORT" -a "$SEPKV_PASSWORD" \
                -t set,get -n "$N" -d 100 -c 50 -r 1000000 -P "$P" --csv >"$OUT/nodes$n-P$P.csv"
            share=""
            i=0
            for hp in $SEPKV_CLUSTER_HOSTS; do
                after=$(cli -h "${hp%:*}" -p "${hp##*:}" info stats | tr -d "\r" | awk -F: "/^total_commands_processed/ {print \$2}")
                share="$share $((after - before[i]))"
                i=$((i + 1))
            done
            awk -F, -v n="$n" -v p="$P" -v share="$share" '"'"'NR>1 {gsub(/"/,""); printf "%d node(s) P%-3s %-4s %9.0f req/s  %9.0f req/s per node  p50 %6.3f ms  p99 %6.3f ms  commands per node:%s\n", n, p, $1, $2, $2/n, $5, $7, share}'"'"' \
                "$OUT/nodes$n-P$P.csv" | tee -a "$OUT/summary.txt"
        done
    ' _ "$n"
done
