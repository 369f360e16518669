#!/usr/bin/env bash
# Device-bound read tails, one `sepkv bench` process per engine, in
# rotating rounds: round N starts at the Nth engine of the list. Before and
# after each round fio measures the disk (4 KiB random reads at queue depth
# 1, 10 s, on a 2 GiB file in the temporary directory, which must be on the
# disk the databases use), and the load average is recorded before and
# after each engine's run, because other work on a shared machine moves the
# far tail.
#
# Usage: scripts/bench-read-tail.sh --out DIR [options]
#   --out DIR            where the reports go (created): <engine>-rN.txt and
#                        .json, fio-{before,after}-rN-qd1.txt, load.txt
#   --engines LIST       space-separated engines (default
#                        "sepkv:flashkey rocksdb")
#   --rounds N           rounds (default 3)
#   --num N              keys (default 1000000)
#   --ops N              gets per read phase (default 1000000)
#   --memory-limit SIZE  the cgroup bound (default 400M)
#   --workload LIST      workloads (default fillrandom,readrandom,ycsb-c)
#   --tag NAME           prefix of the report files (default none)
#   --bin PATH           the sepkv binary (default target/release/sepkv)
#
# Needs root for the memory cgroup; fio optional (skipped when missing).
# Temporary directories and the cgroup's path are printed as `<temporary
# directory>` and `<cgroup>` in the reports.
set -euo pipefail

say() { echo "bench-read-tail.sh: $*" >&2; }

out=""
engines="sepkv:flashkey rocksdb"
rounds=3
num=1000000
ops=1000000
mem=400M
workload=fillrandom,readrandom,ycsb-c
tag=""
root="$(cd "$(dirname "$0")/.." && pwd)"
bin="$root/target/release/sepkv"
while [ $# -gt 0 ]; do
    case "$1" in
        --out) out="$2"; shift 2 ;;
        --engines) engines="$2"; shift 2 ;;
        --rounds) rounds="$2"; shift 2 ;;
        --num) num="$2"; shift 2 ;;
        --ops) ops="$2"; shift 2 ;;
        --memory-limit) mem="$2"; shift 2 ;;
        --workload) workload="$2"; shift 2 ;;
        --tag) tag="$2-"; shift 2 ;;
        --bin) bin="$2"; shift 2 ;;
        -h|--help) sed -n '2,25p' "$0"; exit 0 ;;
        *) say "unknown option '$1'"; exit 2 ;;
    esac
done
[ -n "$out" ] || { say "--out DIR is required"; exit 2; }
[ -x "$bin" ] || { say "no binary at '$bin' (cargo build --release -p sepkv-cli)"; exit 1; }
case "$rounds" in ''|*[!0-9]*|0) say "--rounds must be a positive integer"; exit 2 ;; esac
mkdir -p "$out"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

# Paths of this machine out of the reports.
scrub() {
    sed -E -e "s#$tmp[^ ,;)\"]*#<temporary directory>#g" \
        -e 's#(/tmp|/var/tmp)/[^ ,;)"]*#<temporary directory>#g' \
        -e 's#/sys/fs/cgroup[^ ,;)"]*#<cgroup>#g'
}

fio_run() {
    command -v fio > /dev/null || { say "fio not installed: no device rate"; return 0; }
    fio --name=qd1 --filename="$tmp/fio.dat" --rw=randread --bs=4k --direct=1 \
        --ioengine=libaio --iodepth=1 --size=2g --runtime=10 --time_based 2>&1 \
        | scrub > "$out/fio-$1-qd1.txt"
    say "fio $1: $(grep -o 'IOPS=[^,]*' "$out/fio-$1-qd1.txt" | head -1)"
}

read -r -a list <<< "$engines"
n=${#list[@]}
for ((r = 1; r <= rounds; r++)); do
    fio_run "before-${tag}r$r"
    for ((i = 0; i < n; i++)); do
        e="${list[$(((i + r - 1) % n))]}"
        name="$tag${e//:/-}-r$r"
        echo "$name start $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)" >> "$out/load.txt"
        say "round $r: $e"
        "$bin" bench --engine "$e" --workload "$workload" --num "$num" --ops "$ops" \
            --value-size 1000 --memory-limit "$mem" --json "$tmp/$name.json" 2>&1 \
            | scrub > "$out/$name.txt"
        scrub < "$tmp/$name.json" > "$out/$name.json"
        rm -f "$tmp/$name.json"
        echo "$name end $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)" >> "$out/load.txt"
    done
    fio_run "after-${tag}r$r"
    rm -f "$tmp/fio.dat"
done
