#!/usr/bin/env bash
# Runs the LWC-tree matrix: three rotated rounds of `sepkv:lwc`,
# `sepkv:leveldb` and C++ LevelDB per value size, then YCSB A-F at 1 KiB.
# Run from the repository root with a binary built by
# `scripts/build-rocksdb-peers.sh --leveldb`. Load averages go to
# uptime.txt (before and after each run) and uptime-trace.txt (every 20 s).
set -uo pipefail
out=bench-results/lwc-matrix-2026-12-07
bin=target/release/sepkv
engines=sepkv:lwc,sepkv:leveldb,leveldb
( for _ in $(seq 1 240); do echo "$(date -u +%H:%M:%S) $(uptime)"; sleep 20; done ) > "$out/uptime-trace.txt" &
tracer=$!
run() {
    name=$1; shift
    mkdir -p "$out/$name"
    echo "$name start $(date -u +%H:%M:%S) $(uptime)" >> "$out/uptime.txt"
    "$bin" bench --engine "$engines" --repeat 3 --no-progress "$@" \
        --json "$out/$name/results.json" --markdown "$out/$name/results.md" \
        > "$out/$name/results.txt" 2> "$out/$name/stderr.txt"
    echo "exit status $?" >> "$out/$name/stderr.txt"
    echo "$name end   $(date -u +%H:%M:%S) $(uptime)" >> "$out/uptime.txt"
}
db="fillseq,fillrandom,readrandom,readseq,seekrandom"
run v100  --workload "$db" --num 1000000 --ops 200000 --value-size 100
run v1k   --workload "$db" --num 500000  --ops 100000 --value-size 1024
run v4k   --workload "$db" --num 150000  --ops 50000  --value-size 4096
run ycsb  --workload ycsb-load,ycsb-a,ycsb-b,ycsb-c,ycsb-d,ycsb-e,ycsb-f --num 300000 --ops 200000
kill "$tracer"
