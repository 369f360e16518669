#!/usr/bin/env bash
# The 100-byte rows at the goal's size (3 M records), with 1 M operations
# per read phase; three rotated rounds. Run from the repository root after
# run.sh. Load averages are appended to uptime.txt and uptime-trace-3m.txt.
set -uo pipefail
out=bench-results/lwc-matrix-2026-12-07
bin=target/release/sepkv
( for _ in $(seq 1 120); do echo "$(date -u +%H:%M:%S) $(uptime)"; sleep 20; done ) > "$out/uptime-trace-3m.txt" &
tracer=$!
name=v100-3m
mkdir -p "$out/$name"
echo "$name start $(date -u +%H:%M:%S) $(uptime)" >> "$out/uptime.txt"
"$bin" bench --engine sepkv:lwc,sepkv:leveldb,leveldb --repeat 3 --no-progress \
    --workload fillseq,fillrandom,readrandom,readseq,seekrandom \
    --num 3000000 --ops 1000000 --value-size 100 \
    --json "$out/$name/results.json" --markdown "$out/$name/results.md" \
    > "$out/$name/results.txt" 2> "$out/$name/stderr.txt"
echo "exit status $?" >> "$out/$name/stderr.txt"
echo "$name end   $(date -u +%H:%M:%S) $(uptime)" >> "$out/uptime.txt"
kill "$tracer"
