#!/usr/bin/env bash
# KT-Store's headline (its §4): long range queries of 4 KiB values,
# device-bound, beside the value log and RocksDB, with fio's sequential
# read rate of the same disk measured before and after the engines; and
# loads at several value sizes.
#
# Usage: scripts/bench-ktstore-headline.sh scans|loads OUT_DIR
#   scans: for each scan length in LENGTHS, one `sepkv bench` process per
#          engine (fillrandom of NUM records of VALUE bytes, then OPS_<len>
#          seekrandom scans) under a memory cgroup of LIMIT (page cache
#          included), so the scans' reads reach the device. Each process
#          loads its own database: the loads are the 4 KiB load figures too.
#   loads: ROUNDS rounds; in each, every value size of SIZES is loaded
#          (LOAD_BYTES of values, in random key order, page cache) by every
#          engine, one process each, the engine order rotated by one
#          between rounds.
# Environment: ENGINES (comma-free list), NUM (250000), VALUE (4096),
# LIMIT (300M), LENGTHS ("2000 20000"), OPS_2000 (200), OPS_20000 (20),
# SIZES ("1024 4096 16384"), LOAD_BYTES (512 MiB), ROUNDS (3), SEPKV_BIN
# (default target/release/sepkv, built with `--features rocksdb,leveldb`
# for the RocksDB peers), TMPDIR (must be on the disk being measured).
# Needs root for the memory cgroup; fio optional (skipped when missing).
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
mode="${1:?usage: $0 scans|loads OUT_DIR}"
out="${2:?usage: $0 scans|loads OUT_DIR}"
mkdir -p "$out"
bin="${SEPKV_BIN:-${CARGO_TARGET_DIR:-$root/target}/release/sepkv}"
log() { echo "$*" | tee -a "$out/summary-$mode.txt"; }

# fio's sequential read rate (1 MiB direct reads, libaio) at queue depths
# 1 and 16, 10 s each, on a 1 GiB file in TMPDIR.
fio_seq() {
    command -v fio >/dev/null || { log "fio not installed: no device rate"; return 0; }
    local dir
    dir="$(mktemp -d)"
    for qd in 1 16; do
        fio --name=seqread --filename="$dir/fio.dat" --size=1G --rw=read --bs=1M \
            --direct=1 --ioengine=libaio --iodepth=$qd --runtime=10 --time_based \
            --output="$out/fio-$1-qd$qd.txt" >/dev/null
        log "fio $1: sequential 1 MiB reads, queue depth $qd: $(grep -o 'READ: bw=[^ ]* ([^)]*)' "$out/fio-$1-qd$qd.txt"); load average $(cut -d' ' -f1-3 /proc/loadavg)"
    done
    rm -rf "$dir"
}

case "$mode" in
scans)
    ENGINES="${ENGINES:-sepkv:ktstore sepkv:ktstore+paper sepkv:wisckey rocksdb rocksdb-blob}"
    NUM="${NUM:-250000}"
    VALUE="${VALUE:-4096}"
    LIMIT="${LIMIT:-300M}"
    LENGTHS="${LENGTHS:-2000 20000}"
    log "scans: $NUM x $VALUE B, memory limit $LIMIT, lengths $LENGTHS; $(date -u +%FT%TZ)"
    fio_seq before
    for len in $LENGTHS; do
        ops_var="OPS_$len"
        ops="${!ops_var:-$((400000 / len))}"
        for e in $ENGINES; do
            name="${e#sepkv:}-L$len"
            "$bin" bench --engine "$e" --workload fillrandom,seekrandom --num "$NUM" \
                --value-size "$VALUE" --scan-length "$len" --ops "$ops" \
                --memory-limit "$LIMIT" --json "$out/$name.json" >"$out/$name.txt" 2>&1 ||
                log "$e L=$len: exit status $? (see $name.txt)"
            log "$e L=$len: $(grep -E ' (fillrandom|seekrandom)/run: ' "$out/$name.txt" | sed 's/^ *//' | paste -sd';'); load average $(cut -d' ' -f1-3 /proc/loadavg)"
        done
    done
    fio_seq after
    ;;
loads)
    ENGINES="${ENGINES:-sepkv:ktstore sepkv:ktstore+paper sepkv:ktstore+nosort sepkv:wisckey rocksdb}"
    SIZES="${SIZES:-1024 4096 16384}"
    LOAD_BYTES="${LOAD_BYTES:-$((512 << 20))}"
    ROUNDS="${ROUNDS:-3}"
    read -r -a engines <<<"$ENGINES"
    log "loads: $LOAD_BYTES B of values per load, sizes $SIZES, $ROUNDS rounds; $(date -u +%FT%TZ)"
    for round in $(seq 1 "$ROUNDS"); do
        n=${#engines[@]}
        for size in $SIZES; do
            num=$((LOAD_BYTES / size))
            for i in $(seq 0 $((n - 1))); do
                e="${engines[$(((i + round - 1) % n))]}"
                name="${e#sepkv:}-V$size-r$round"
                "$bin" bench --engine "$e" --workload fillrandom --num "$num" \
                    --value-size "$size" --json "$out/$name.json" >"$out/$name.txt" 2>&1 ||
                    log "round $round $e V=$size: exit status $? (see $name.txt)"
                log "round $round $e V=$size: $(grep -E ' fillrandom/run: ' "$out/$name.txt" | sed 's/^ *//')"
            done
        done
    done
    ;;
*)
    echo "usage: $0 scans|loads OUT_DIR" >&2
    exit 2
    ;;
esac
