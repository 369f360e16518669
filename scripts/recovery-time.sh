#!/usr/bin/env bash
# Recovery time after a kill -9, per configuration.
#
# For each configuration, loads NUM records (16-byte keys in random order,
# VALUE-byte values) into a new database with `sepkv import --batch 1000`,
# kills the importer with SIGKILL once all but its last batches are
# acknowledged (so the process dies with its memtable, open band and
# unsynced state in flight, never at a clean close), then opens the
# database again with `sepkv stats` and reports the open time it prints
# (recovery included), and the open time of a second, clean reopen.
#
# Usage: scripts/recovery-time.sh [--num N] [--value-size B] [--sepkv BIN]
#                                 [--config SPEC,...]
#   SPEC is a preset, or `flashkey:disk` / `flashkey:memory` for FlashKey's
#   hash table on disk or in memory (--hash-index-mode).
#   Defaults: 1000000 records of 1000 B (about 1 GiB),
#   configs leveldb,wisckey,flashkey:memory,flashkey:disk,
#   BIN target/release/sepkv.
# Output: one line per configuration (records acknowledged, directory
# size, open time after the kill, open time of a clean reopen).
set -euo pipefail

num=1000000
value=1000
bin=target/release/sepkv
configs=leveldb,wisckey,flashkey:memory,flashkey:disk
while [ $# -gt 0 ]; do
    case "$1" in
        --num) num=$2; shift 2 ;;
        --value-size) value=$2; shift 2 ;;
        --sepkv) bin=$2; shift 2 ;;
        --config) configs=$2; shift 2 ;;
        -h|--help) sed -n '2,21p' "$0"; exit 0 ;;
        *) echo "recovery-time.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done
[ -x "$bin" ] || { echo "recovery-time.sh: no sepkv binary at $bin (cargo build --release -p sepkv-cli)" >&2; exit 2; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# key<TAB>value lines: keys 0..num in a random order (fixed seed), values
# of `value` bytes drawn from a repeating alphabet at a key-dependent
# offset.
gen() {
    python3 - "$num" "$value" <<'EOF'
import random, sys
num, size = int(sys.argv[1]), int(sys.argv[2])
order = list(range(num))
random.Random(1).shuffle(order)
alpha = ("abcdefghijklmnopqrstuvwxyz0123456789" * (size // 36 + 2)).encode()
out = sys.stdout.buffer
for i in order:
    o = i % 36
    out.write(b"%016d\t" % i + alpha[o:o + size] + b"\n")
EOF
}

open_ms() {
    "$bin" "$@" stats | awk '/^open time/ { print $3 }'
}

printf '%-16s %12s %10s %18s %16s\n' config acked dir_MB "open after kill" "clean reopen"
IFS=, read -r -a list <<<"$configs"
for spec in "${list[@]}"; do
    preset=${spec%%:*}
    mode=()
    [ "$spec" != "$preset" ] && mode=(--hash-index-mode "${spec#*:}")
    db="$work/db-${spec/:/-}"
    log="$work/acks-${spec/:/-}"
    gen 2>/dev/null | "$bin" --db "$db" --preset "$preset" "${mode[@]}" import --batch 1000 >"$log" &
    pid=$!
    # Kill once all but the last 2000 records are acknowledged.
    until [ "$(tail -n 1 "$log" | awk '{ n = $2 } END { print n + 0 }')" -ge $((num - 2000)) ]; do
        if ! kill -0 "$pid" 2>/dev/null; then
            echo "recovery-time.sh: the importer of $spec ended before the kill" >&2
            exit 1
        fi
        sleep 0.05
    done
    kill -9 "$pid" 2>/dev/null || {
        echo "recovery-time.sh: the importer of $spec ended before the kill (more records: --num)" >&2
        exit 1
    }
    wait "$pid" 2>/dev/null || true
    acked=$(tail -n 1 "$log" | awk '{ print $2 }')
    size=$(du -sb "$db" | awk '{ printf "%.1f", $1 / 1e6 }')
    after_kill=$(open_ms --db "$db" "${mode[@]}")
    clean=$(open_ms --db "$db" "${mode[@]}")
    printf '%-16s %12s %10s %15s ms %13s ms\n' "$spec" "$acked" "$size" "$after_kill" "$clean"
    rm -rf "$db"
done
