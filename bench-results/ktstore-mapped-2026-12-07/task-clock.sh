#!/usr/bin/env bash
# Process CPU (perf stat task-clock: all of the process's threads) and the
# phase's seconds of one fillrandom per (build, engine), alternating within
# each round. Usage: BASE_BIN=... NEW_BIN=... task-clock.sh OUT_FILE
# Environment: ROUNDS (3), NUM (262144), VALUE (1024), RUNS (the pairs).
set -uo pipefail
out="${1:?usage: $0 OUT_FILE}"
ROUNDS="${ROUNDS:-3}"; NUM="${NUM:-262144}"; VALUE="${VALUE:-1024}"
RUNS="${RUNS:-base|sepkv:ktstore+paper new|sepkv:ktstore+paper new|sepkv:ktstore+paper+nomap new|sepkv:wisckey}"
read -r -a runs <<<"$RUNS"
n=${#runs[@]}
for round in $(seq 1 "$ROUNDS"); do
    for i in $(seq 0 $((n - 1))); do
        pair="${runs[$(((i + round - 1) % n))]}"
        build="${pair%%|*}"; e="${pair#*|}"
        if [ "$build" = base ]; then bin="$BASE_BIN"; else bin="$NEW_BIN"; fi
        t=$(mktemp)
        perf stat -e task-clock -x, -o "$t" -- "$bin" bench --engine "$e" --workload fillrandom \
            --num "$NUM" --value-size "$VALUE" > "$t.out" 2>&1
        ms=$(grep task-clock "$t" | cut -d, -f1)
        phase=$(grep -E ' fillrandom/run: [0-9]+ ops' "$t.out" | sed 's/.*ops in \([0-9.]*\) s.*/\1/')
        echo "round $round $build $e value $VALUE: phase $phase s, process CPU $(awk -v m="$ms" -v n="$NUM" 'BEGIN{printf "%.2f", m*1000/n}') us/put; load average $(cut -d' ' -f1 /proc/loadavg)" | tee -a "$out"
        rm -f "$t" "$t.out"
    done
done
