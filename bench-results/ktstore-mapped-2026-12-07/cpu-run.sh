#!/usr/bin/env bash
# Writer CPU per put (cpu.sh: `perf sched` of one fillrandom process; the
# writer is the thread with the most run time), both builds and mapped
# appends on and off, alternating within each round.
# Usage: BASE_BIN=... NEW_BIN=... cpu-run.sh OUT_FILE
# Environment: ROUNDS (3); SPECS ("262144 1024|65536 4096|16384 16384":
# records and value size, 256 MiB of values each).
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${1:?usage: $0 OUT_FILE}"
ROUNDS="${ROUNDS:-3}"
SPECS="${SPECS:-262144 1024|65536 4096|16384 16384}"
IFS='|' read -r -a specs <<<"$SPECS"
runs=("$BASE_BIN|sepkv:ktstore+paper|base" "$NEW_BIN|sepkv:ktstore+paper|new"
      "$NEW_BIN|sepkv:ktstore+paper+nomap|new" "$NEW_BIN|sepkv:wisckey|new")
n=${#runs[@]}
for round in $(seq 1 "$ROUNDS"); do
    for spec in "${specs[@]}"; do
        for i in $(seq 0 $((n - 1))); do
            IFS='|' read -r bin e build <<<"${runs[$(((i + round - 1) % n))]}"
            echo "round $round build $build value ${spec#* } $(bash "$here/cpu.sh" "$bin" "$e" $spec)" | tee -a "$out"
        done
    done
done
