#!/usr/bin/env bash
# Figures of a replicated shard (docs/replication.md), in one run:
# redis-benchmark SET and GET (-d 100 -c 50 -r 1000000, -P 1 and -P 16)
# against a plain single node and against the leader of a three-replica
# shard, then failover time (p50 and max) over KILLS kill -9s of the
# leader. Everything on loopback.
#
# Usage: scripts/bench-replication.sh [OUT_DIR]
# Environment: N (requests per test, default 100000), KILLS (default 20),
# SEPKV_BIN (default target/release/sepkv; cargo build --release -p
# sepkv-cli).
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
out="${1:-$(mktemp -d -t sepkv-bench-replication.XXXXXX)}"
mkdir -p "$out"
out="$(cd "$out" && pwd)"
target="${CARGO_TARGET_DIR:-$root/target}"
# shellcheck source=scripts/lib/prereqs.sh
. "$root/scripts/lib/prereqs.sh"
need_tools "redis-benchmark" "redis-tools"
need_redis_py
export SEPKV_BIN="${SEPKV_BIN:-$target/release/sepkv}"
export N="${N:-100000}" KILLS="${KILLS:-20}" OUT="$out"

{
    echo "date: $(date -u +%Y-%m-%dT%H:%MZ)"
    echo "build: $(git -C "$root" rev-parse --short HEAD) ($(basename "$(dirname "$SEPKV_BIN")"))"
    echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(free -g | awk '/Mem:/ {print $2}') GiB RAM"
    echo "redis-benchmark: $(redis-benchmark --version | cut -d' ' -f2); requests per test: $N; --fsync everysec; loopback"
} | tee "$out/summary.txt"
"$py" "$root/crates/sepkv-server/tests/py/bench_replication.py" 2>&1 | tee -a "$out/summary.txt"
