#!/usr/bin/env bash
# Loads of KT-Store against the value log and RocksDB, two builds side by
# side: the loads mode of scripts/bench-ktstore-headline.sh (fillrandom of
# LOAD_BYTES of values per value size, page cache, one process per engine,
# size and build), with every (build, engine) pair in one rotation, so
# that builds and engines share each round's machine. RocksDB runs once per
# round and size, from the base build (the peer's code is the same in
# both; the base build links it).
#
# Usage: BASE_BIN=... NEW_BIN=... run.sh OUT_DIR
# Environment: ENGINES ("sepkv:ktstore+paper sepkv:wisckey sepkv:ktstore"),
# SIZES ("1024 4096 16384"), LOAD_BYTES (512 MiB), ROUNDS (3).
set -euo pipefail
out="${1:?usage: $0 OUT_DIR}"
mkdir -p "$out"
ENGINES="${ENGINES:-sepkv:ktstore+paper sepkv:wisckey sepkv:ktstore}"
SIZES="${SIZES:-1024 4096 16384}"
LOAD_BYTES="${LOAD_BYTES:-$((512 << 20))}"
ROUNDS="${ROUNDS:-3}"
runs=()
for e in $ENGINES; do
    runs+=("base|$e" "new|$e")
done
runs+=("base|rocksdb")
n=${#runs[@]}
log() { echo "$*" | tee -a "$out/summary.txt"; }
log "loads: $LOAD_BYTES B of values per load, sizes $SIZES, $ROUNDS rounds, builds base and new; $(date -u +%FT%TZ)"
for round in $(seq 1 "$ROUNDS"); do
    for size in $SIZES; do
        num=$((LOAD_BYTES / size))
        for i in $(seq 0 $((n - 1))); do
            pair="${runs[$(((i + (round - 1) * 3) % n))]}"
            build="${pair%%|*}"
            e="${pair#*|}"
            if [ "$build" = base ]; then bin="$BASE_BIN"; else bin="$NEW_BIN"; fi
            name="$build-${e#sepkv:}-V$size-r$round"
            "$bin" bench --engine "$e" --workload fillrandom --num "$num" \
                --value-size "$size" --json "$out/$name.json" >"$out/$name.txt" 2>&1 ||
                log "round $round $build $e V=$size: exit status $? (see $name.txt)"
            log "round $round $build $e V=$size: $(grep -E ' fillrandom/run: [0-9]+ ops' "$out/$name.txt" | sed 's/^ *//'); $(grep '^total' "$out/$name.txt"); load average $(cut -d' ' -f1-3 /proc/loadavg)"
        done
    done
done
