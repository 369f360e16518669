#!/usr/bin/env bash
# redis-benchmark against `sepkv serve` (every preset, --fsync everysec)
# and against redis-server with AOF (appendfsync everysec), in one run;
# then the group-commit check: SET with --fsync always from 1 client and
# from 50 clients.
#
# Usage: scripts/bench-server.sh [OUT_DIR]
# Environment: N (requests per test, default 1000000), PRESETS (default
# all six), SEPKV_BIN (default target/release/sepkv; build it with
# `cargo build --release -p sepkv-cli`), ALWAYS_N (requests for the
# --fsync always runs, default 20000), TESTS (redis-benchmark -t list,
# default set,get,incr,mset), PIPELINES (the -P values, default "16 1"),
# ALWAYS (yes: also the --fsync always runs, the default; no: not).
# The hash benchmark: TESTS=hset PIPELINES=16 ALWAYS=no.
# Writes one CSV per run (redis-benchmark --csv) and a summary.txt.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
out="${1:-$(mktemp -d -t sepkv-bench-server.XXXXXX)}"
mkdir -p "$out"
N="${N:-1000000}"
ALWAYS_N="${ALWAYS_N:-20000}"
PRESETS="${PRESETS:-leveldb wisckey hashkv ktstore flashkey lwc}"
TESTS="${TESTS:-set,get,incr,mset}"
PIPELINES="${PIPELINES:-16 1}"
ALWAYS="${ALWAYS:-yes}"
bin="${SEPKV_BIN:-${CARGO_TARGET_DIR:-$root/target}/release/sepkv}"
work="$(mktemp -d -t sepkv-bench-work.XXXXXX)"
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    rm -rf "$work"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_port() { for _ in $(seq 200); do redis-cli -p "$1" ping >/dev/null 2>&1 && return 0; sleep 0.1; done; return 1; }

{
    echo "date: $(date -u +%Y-%m-%dT%H:%MZ)"
    echo "build: $(git -C "$root" rev-parse --short HEAD)"
    echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(free -g | awk '/Mem:/ {print $2}') GiB RAM"
    echo "redis: $(redis-server --version | cut -d' ' -f3)"
    echo "requests per test: $N, -t $TESTS -d 1000 -c 50, -P in: $PIPELINES"
} | tee "$out/summary.txt"

# run NAME PORT: the tests at each pipeline depth.
run() {
    for P in $PIPELINES; do
        redis-benchmark -h 127.0.0.1 -p "$2" -t "$TESTS" -n "$N" -d 1000 -c 50 -P "$P" --csv \
            > "$out/$1-P$P.csv"
        awk -F, -v n="$1" -v p="$P" 'NR>1 {gsub(/"/,""); printf "%-10s P%-3s %-16s %10.0f req/s  p50 %6.3f ms  p99 %6.3f ms\n", n, p, $1, $2, $5, $7}' \
            "$out/$1-P$P.csv" | tee -a "$out/summary.txt"
    done
}

port=$(free_port)
redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly yes --appendfsync everysec \
    --dir "$work" --daemonize no >"$work/redis.log" 2>&1 &
pids+=($!)
wait_port "$port"
run redis "$port"
kill "${pids[-1]}"; wait "${pids[-1]}" 2>/dev/null || true

for preset in $PRESETS; do
    port=$(free_port)
    rm -rf "$work/db"
    "$bin" --db "$work/db" --preset "$preset" serve --port "$port" --fsync everysec >"$work/serve.log" 2>&1 &
    pids+=($!)
    wait_port "$port"
    run "$preset" "$port"
    kill "${pids[-1]}"; wait "${pids[-1]}" || true
done

[ "$ALWAYS" = yes ] && echo "--fsync always: SET, 1 client against 50 clients (-P 1, -d 1000)" | tee -a "$out/summary.txt"
[ "$ALWAYS" = yes ] && for preset in $PRESETS; do
    port=$(free_port)
    rm -rf "$work/db"
    "$bin" --db "$work/db" --preset "$preset" serve --port "$port" --fsync always >"$work/serve.log" 2>&1 &
    pids+=($!)
    wait_port "$port"
    one=$(redis-benchmark -h 127.0.0.1 -p "$port" -t set -n $((ALWAYS_N / 10)) -d 1000 -c 1 -r 100000 --csv | awk -F, 'NR>1 {gsub(/"/,""); print $2}')
    fifty=$(redis-benchmark -h 127.0.0.1 -p "$port" -t set -n "$ALWAYS_N" -d 1000 -c 50 -r 100000 --csv | awk -F, 'NR>1 {gsub(/"/,""); print $2}')
    printf "%-10s 1 client %8.0f req/s   50 clients %8.0f req/s   ratio %.1f\n" "$preset" "$one" "$fifty" \
        "$(echo "$fifty / $one" | bc -l)" | tee -a "$out/summary.txt"
    kill "${pids[-1]}"; wait "${pids[-1]}" || true
done
echo "results in $out"
