#!/usr/bin/env bash
# YCSB A-F at 1 KiB records (10 fields of 100 B) with 600 k operations a
# phase, three rotated rounds. Run from the repository root after
# run-3m.sh. Load averages are appended to uptime.txt and uptime-trace-ycsb.txt.
set -uo pipefail
out=bench-results/lwc-matrix-2026-12-07
bin=target/release/sepkv
( for _ in $(seq 1 120); do echo "$(date -u +%H:%M:%S) $(uptime)"; sleep 20; done ) > "$out/uptime-trace-ycsb.txt" &
tracer=$!
name=ycsb-600k
mkdir -p "$out/$name"
echo "$name start $(date -u +%H:%M:%S) $(uptime)" >> "$out/uptime.txt"
"$bin" bench --engine sepkv:lwc,sepkv:leveldb,leveldb --repeat 3 --no-progress \
    --workload ycsb-load,ycsb-a,ycsb-b,ycsb-c,ycsb-d,ycsb-e,ycsb-f \
    --num 300000 --ops 600000 \
    --json "$out/$name/results.json" --markdown "$out/$name/results.md" \
    > "$out/$name/results.txt" 2> "$out/$name/stderr.txt"
echo "exit status $?" >> "$out/$name/stderr.txt"
echo "$name end   $(date -u +%H:%M:%S) $(uptime)" >> "$out/uptime.txt"
kill "$tracer"
