#!/usr/bin/env bash
# Device-bound rows: 2 M x 100 B under a 128 MiB memory limit (page cache
# included; needs root), 20 k reads and scans per phase. One process per
# engine (the bound covers the whole process, and a `--repeat 3` run of
# the three engines in one process was killed in its second round), three
# rounds in rotated order. Run from the repository root. Load averages
# are appended to uptime.txt and uptime-trace-device.txt.
set -uo pipefail
out=bench-results/lwc-matrix-2026-12-07/device-2m
bin=target/release/sepkv
mkdir -p "$out"
( for _ in $(seq 1 120); do echo "$(date -u +%H:%M:%S) $(uptime)"; sleep 20; done ) > "$out/../uptime-trace-device.txt" &
tracer=$!
orders=("sepkv:lwc sepkv:leveldb leveldb" "sepkv:leveldb leveldb sepkv:lwc" "leveldb sepkv:lwc sepkv:leveldb")
for r in 1 2 3; do
    for e in ${orders[$((r - 1))]}; do
        name="r$r-${e/:/-}"
        echo "$name start $(date -u +%H:%M:%S) $(uptime)" >> "$out/../uptime.txt"
        "$bin" bench --engine "$e" --no-progress \
            --workload fillrandom,readrandom,seekrandom \
            --num 2000000 --ops 20000 --value-size 100 --memory-limit 128M \
            --json "$out/$name.json" > "$out/$name.txt" 2> "$out/$name.stderr.txt"
        echo "exit status $?" >> "$out/$name.stderr.txt"
        sed -i -E 's#\(cgroup V1 /[^ )]*#(cgroup V1 <cgroup>#' "$out/$name.stderr.txt"
    done
done
echo "device-2m end $(date -u +%H:%M:%S) $(uptime)" >> "$out/../uptime.txt"
kill "$tracer"
