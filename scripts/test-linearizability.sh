#!/usr/bin/env bash
# Linearizability check of a replicated shard (docs/replication.md,
# "Linearizability check"): concurrent clients record GET, SET and INCR on
# a few keys while a nemesis kills nodes with kill -9, cuts the leader
# off in network namespaces and replaces a voter by a
# spare node through a new topology version; each recorded history is checked with
# porcupine (crates/sepkv-server/tests/lincheck, a Go module).
#
# Usage: scripts/test-linearizability.sh [--broken]
#
#   (default)  one short seed (about 20 s of load); SEPKV_LONG=1 runs six
#              seeds of 40 s each instead.
#   --broken   (kills and partitions only) builds the server with the test-only fault
#              `unsafe-skip-read-index` (a leader serves reads without a
#              read index) into a binary of its own and runs seeds until
#              the check finds a violation; it fails if none is found in
#              three seeds. Needs network namespaces.
#
# Prints each history's verdict and the figures: operations recorded,
# faults injected (kills, partitions, membership changes), histories
# checked, violations. A
# history that is not linearizable is kept under the target directory
# (`linearizability/`), with porcupine's visualization beside it.
#
# Installs what it needs when missing (scripts/lib/prereqs.sh): redis-py
# (pinned), Go (Debian golang-go), porcupine (through the Go module
# proxy, pinned in go.sum). With CI=true anything that cannot be
# installed, or namespaces that cannot be made, fail the run.
#
# Environment: SEPKV_LONG=1, SEPKV_LIN_SEEDS ("1 2 3": the seeds to run),
# SEPKV_LIN_SECONDS (load per seed), SEPKV_LIN_FAULTS (the nemesis's
# faults, of kill, partition and member, comma-separated), CARGO_TARGET_DIR.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
target="${CARGO_TARGET_DIR:-$root/target}"
# shellcheck source=scripts/lib/prereqs.sh
. "$root/scripts/lib/prereqs.sh"

broken=false
case "${1:-}" in
    --broken) broken=true ;;
    "") ;;
    *) echo "usage: $0 [--broken]" >&2; exit 2 ;;
esac

need_redis_py
[ -d /usr/local/go/bin ] && PATH="$PATH:/usr/local/go/bin"
need_tools "go" "golang-go"

checker="$root/crates/sepkv-server/tests/lincheck"
echo "checker: go test, then build (porcupine, pinned in go.sum)"
(cd "$checker" && GOFLAGS=-buildvcs=false go test -count=1 . && GOFLAGS=-buildvcs=false go build -o "$target/lincheck" .)

if [ "$broken" = true ]; then
    echo "building sepkv (test profile) with the test-only fault unsafe-skip-read-index"
    cargo build --profile test -p sepkv-cli --bin sepkv --features sepkv-server/unsafe-skip-read-index \
        --manifest-path "$root/Cargo.toml"
    cp "$target/debug/sepkv" "$target/debug/sepkv-unsafe-skip-read-index"
fi
# The plain build last, so that target/debug/sepkv never keeps the fault.
echo "building sepkv (test profile)"
cargo build --profile test -p sepkv-cli --bin sepkv --manifest-path "$root/Cargo.toml"
export SEPKV_BIN="$target/debug/sepkv"

if [ "${SEPKV_LONG:-}" = 1 ]; then
    seeds="${SEPKV_LIN_SEEDS:-1 2 3 4 5 6}"
    seconds="${SEPKV_LIN_SECONDS:-40}"
    faults="${SEPKV_LIN_FAULTS:-kill,partition,member}"
else
    seeds="${SEPKV_LIN_SEEDS:-1}"
    seconds="${SEPKV_LIN_SECONDS:-20}"
    faults="${SEPKV_LIN_FAULTS:-kill,partition,member}"
fi
if [ "$broken" = true ]; then
    export SEPKV_BIN="$target/debug/sepkv-unsafe-skip-read-index"
    seeds="${SEPKV_LIN_SEEDS:-1 2 3}"
    faults="${SEPKV_LIN_FAULTS:-kill,partition}"
    export CI=true  # the fault shows only with partitions: namespaces are needed
fi

work="$(mktemp -d -t sepkv-linearizability.XXXXXX)"
trap 'rm -rf "$work"' EXIT
keep="$target/linearizability"

histories=()
caught=false
for seed in $seeds; do
    h="$work/history-seed-$seed.json"
    timeout $((seconds * 3 + 120)) "$py" "$root/crates/sepkv-server/tests/py/linearizability.py" \
        --seed "$seed" --seconds "$seconds" --ops $((seconds * 300)) --faults "$faults" --out "$h"
    histories+=("$h")
    if [ "$broken" = true ]; then
        set +e
        "$target/lincheck" -timeout 60s -html "$work/history-seed-$seed.html" "$h"
        status=$?
        set -e
        if [ "$status" = 1 ]; then
            mkdir -p "$keep"
            cp "$h" "$keep/"
            [ -f "$work/history-seed-$seed.html" ] && cp "$work/history-seed-$seed.html" "$keep/"
            echo "the fault was caught (seed $seed); history and visualization kept in the target directory (linearizability/)"
            caught=true
            break
        fi
    fi
done

if [ "$broken" = true ]; then
    [ "$caught" = true ] || { echo "FAIL: the faulty build passed the check on seeds $seeds" >&2; exit 1; }
    exit 0
fi

set +e
"$target/lincheck" -timeout 120s -html "$work/violation.html" "${histories[@]}"
status=$?
set -e
if [ "$status" != 0 ]; then
    mkdir -p "$keep"
    cp "${histories[@]}" "$keep/"
    [ -f "$work/violation.html" ] && cp "$work/violation.html" "$keep/"
    echo "FAIL: linearizability check (status $status); histories kept in the target directory (linearizability/)" >&2
    exit 1
fi
