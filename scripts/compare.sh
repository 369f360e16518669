#!/usr/bin/env bash
# Runs the standard comparison of sepkv's presets and the peer engines.
#
# Every engine this build can run (`sepkv bench --list-engines`: the
# available sepkv presets, fjall, fjall-kv, rocksdb and rocksdb-blob when
# built with `--features rocksdb`, leveldb with `--features leveldb`) runs,
# one after another and each in a
# fresh database, the workloads
#
#   fillrandom, overwrite, readrandom, seekrandom,
#   ycsb-load, ycsb-a .. ycsb-f, update
#
# with `--num` records of 16-byte keys and 1000-byte values (YCSB: 10 ×
# 100-byte fields), i.e. about 1 GiB of user data by default. Each engine
# writes OUT/<engine>.json; the script then combines them into
# OUT/results.json, OUT/results.md (markdown tables, engines side by side)
# and, with --plot, charts of throughput, write and space amplification and
# p99 latency per workload and engine, as SVG and PNG files.
#
# Missing system packages are installed with apt-get when the script runs
# as root on Debian/Ubuntu (scripts/setup-deps.sh; otherwise it says what
# to install): libclang and clang for a build with the rocksdb feature
# (bindgen, run by librocksdb-sys, needs them), and a TrueType font (DejaVu
# Sans) for the PNG charts, which are skipped with a warning without one.
# With the rocksdb feature the build links the system's RocksDB when
# librocksdb-dev is installed (see scripts/build-rocksdb-peers.sh), and
# compiles the rocksdb crate's bundled copy otherwise.
#
# Usage: scripts/compare.sh [options]
#   --num N          records (default 1000000)
#   --ops M          operations per run phase (default: num / 10)
#   --value-size B   value bytes of the db_bench-style workloads (default 1000)
#   --threads T      client threads (default 1)
#   --engines LIST   comma-separated engine specs (default: all available)
#   --out DIR        results directory (default: compare-results)
#   --db DIR         where the databases live (default: a temporary directory)
#   --plot           also write OUT/plots/*.svg and OUT/plots/*.png
#   --sync           sync every write
#   --features F     cargo features of the build (e.g. rocksdb or
#                    rocksdb,leveldb); badger is added when Go 1.24 or
#                    newer is present (scripts/setup-deps.sh badger)
#   --no-badger      do not add the badger feature
#   --scale-threads N  also run readrandom, ycsb-a and readwhilewriting with
#                    N client threads (default 4; 0: skip), see below
#   --bin PATH       use this sepkv binary instead of building one
#   --no-direct      skip the direct-I/O read runs (see below)
#   --memory-limit B also run the device-bound set (see below) with the
#                    process's memory, page cache included, bounded to B
#                    (e.g. 400M; needs root and a memory cgroup)
#
# Reads are also measured with direct I/O where an engine supports it
# (sepkv's Options::use_direct_reads and RocksDB's use_direct_reads; fjall
# and LevelDB read through the page cache only): those engines run
# readrandom, seekrandom and ycsb-c once more with --direct-io, labelled
# ENGINE+direct.
#
# Scaling: every engine also runs readrandom, ycsb-a and readwhilewriting
# with --scale-threads client threads (results in OUT/threads-N/), and
# OUT/scaling.md sets each engine's throughput there beside its figure
# from the main set (run with --threads), with the ratio.
#
# With --memory-limit, every engine also runs the device-bound set —
# fillrandom, readrandom, seekrandom, ycsb-c, ycsb-e and the update
# experiment — in a memory cgroup of that size, so that reads reach the
# device once the data outgrows it. Its results go to OUT/device/
# (results.md, results.json, per-engine files), beside the page-cache set.
set -euo pipefail

here="$(cd "$(dirname "$0")/.." && pwd)"
num=1000000
ops=""
value_size=1000
threads=1
engines=""
out="compare-results"
db=""
plot=0
sync=""
features=""
bin=""
direct=1
memory_limit=""
badger=1
scale_threads=4
while [ $# -gt 0 ]; do
    case "$1" in
        --num) num="$2"; shift 2 ;;
        --ops) ops="$2"; shift 2 ;;
        --value-size) value_size="$2"; shift 2 ;;
        --threads) threads="$2"; shift 2 ;;
        --engines) engines="$2"; shift 2 ;;
        --out) out="$2"; shift 2 ;;
        --db) db="$2"; shift 2 ;;
        --plot) plot=1; shift ;;
        --sync) sync="--sync"; shift ;;
        --features) features="$2"; shift 2 ;;
        --bin) bin="$2"; shift 2 ;;
        --no-direct) direct=0; shift ;;
        --memory-limit) memory_limit="$2"; shift 2 ;;
        --no-badger) badger=0; shift ;;
        --scale-threads) scale_threads="$2"; shift 2 ;;
        -h|--help) sed -n '2,63p' "$0"; exit 0 ;;
        *) echo "compare.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    esac
done
[ -n "$ops" ] || ops=$(( num / 10 > 0 ? num / 10 : 1 ))

if [ -z "$bin" ] && [ "$badger" = 1 ] && [[ "$features" != *badger* ]]; then
    # Badger runs through a Go driver linked into sepkv: build it when Go
    # is here.
    if "$here/scripts/setup-deps.sh" badger; then
        features="${features:+$features,}badger"
    else
        echo "compare.sh: no Go 1.24 or newer: the Badger peers are left out" >&2
    fi
fi

if [ -z "$bin" ] && [[ "$features" == *rocksdb* ]]; then
    # The directory of libclang goes to LIBCLANG_PATH only where clang-sys
    # would not look by itself: setting it anew makes cargo rebuild RocksDB.
    if libclang="$("$here/scripts/setup-deps.sh" rocksdb)"; then
        case "$libclang" in
            ""|/usr/lib*|/usr/local/lib*|/usr/local/llvm*) ;;
            *) [ -n "${LIBCLANG_PATH:-}" ] || export LIBCLANG_PATH="$libclang" ;;
        esac
    else
        echo "compare.sh: the rocksdb build dependencies are missing (see above); trying the build anyway" >&2
    fi
    # Link the system's RocksDB when it is installed (librocksdb-dev, as
    # scripts/build-rocksdb-peers.sh does) instead of compiling the crate's
    # bundled copy, which takes the best part of an hour on two cores.
    if [ -z "${ROCKSDB_LIB_DIR:-}" ]; then
        multiarch="$(gcc -print-multiarch 2>/dev/null || echo x86_64-linux-gnu)"
        if [ -f /usr/include/rocksdb/c.h ] && compgen -G "/usr/lib/$multiarch/librocksdb.so*" > /dev/null; then
            export ROCKSDB_LIB_DIR="/usr/lib/$multiarch" ROCKSDB_INCLUDE_DIR=/usr/include
            echo "compare.sh: linking the system RocksDB in $ROCKSDB_LIB_DIR" >&2
        else
            echo "compare.sh: no system RocksDB (librocksdb-dev): cargo compiles the bundled one, which is slow" >&2
        fi
    fi
fi
if [ -z "$bin" ] && [[ "$features" == *leveldb* ]]; then
    # LevelDB 1.22's CMake build fails under GCC: build the C and C++ parts
    # with clang (RocksDB too, when both features are on).
    if "$here/scripts/setup-deps.sh" leveldb; then
        export CC=clang CXX=clang++
    else
        echo "compare.sh: the leveldb build dependencies are missing (see above); trying the build anyway" >&2
    fi
fi
if [ "$plot" = 1 ] && ! "$here/scripts/setup-deps.sh" fonts; then
    echo "compare.sh: no font for the PNG charts: only SVG charts will be written" >&2
fi

if [ -z "$bin" ]; then
    build=(cargo build --release -p sepkv-cli --manifest-path "$here/Cargo.toml")
    [ -z "$features" ] || build+=(--features "$features")
    "${build[@]}" >&2
    target="$(cd "$here" && cargo metadata --format-version 1 --no-deps | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')"
    bin="$target/release/sepkv"
fi

if [ -z "$engines" ]; then
    engines="$("$bin" bench --list-engines | awk 'NR > 1 && $2 == "available" { print $1 }' | paste -sd, -)"
fi
[ -n "$engines" ] || { echo "compare.sh: no engine available" >&2; exit 2; }

workloads="fillrandom,overwrite,readrandom,seekrandom,readwhilewriting,ycsb-load,ycsb-a,ycsb-b,ycsb-c,ycsb-d,ycsb-e,ycsb-f,update"
mkdir -p "$out"
echo "compare.sh: engines $engines; num $num; ops $ops; value $value_size B; threads $threads" >&2

failed=()
IFS=',' read -ra list <<< "$engines"
[ -z "$db" ] || mkdir -p "$db"

# run_set DIR SUFFIX WHAT WORKLOADS [ARG...]: one `sepkv bench` per engine
# of the list (with SUFFIX -direct: only those with direct reads) running
# WORKLOADS with ARGs, into DIR/<engine>SUFFIX.json and .txt. The JSON
# files made go to the array set_jsons; a failed engine to failed.
run_set() {
    local dir="$1" suffix="$2" what="$3" wl="$4"
    shift 4
    local e name args dbargs tag="${dir#"$out"}"
    tag="${tag//\//-}"
    set_jsons=()
    mkdir -p "$dir"
    for e in "${list[@]}"; do
        if [ "$suffix" = -direct ]; then
            case "$e" in rocksdb|rocksdb-blob|sepkv:*) ;; *) continue ;; esac
        fi
        name="${e//[:+]/-}$suffix"
        args=(bench --engine "$e" --workload "$wl" --num "$num" --ops "$ops"
              --value-size "$value_size" --no-progress --json "$dir/$name.json" "$@")
        [ -z "$sync" ] || args+=("$sync")
        dbargs=()
        [ -z "$db" ] || dbargs=(--db "$db/$name$tag")
        echo "== $e${what:+ ($what)}" >&2
        if ! "$bin" "${dbargs[@]}" "${args[@]}" > "$dir/$name.txt"; then
            failed+=("$e${what:+ ($what)}")
            echo "compare.sh: $e${what:+ ($what)} failed (partial results, if any, are in $dir/$name.json)" >&2
        fi
        if [ -f "$dir/$name.json" ]; then
            set_jsons+=("$dir/$name.json")
        fi
    done
}

# combine DIR JSON...: the tables (and charts) of one set.
combine() {
    local dir="$1"
    shift
    local c=(bench --from-json "$(IFS=,; echo "$*")" --markdown "$dir/results.md" --json "$dir/results.json")
    [ "$plot" = 0 ] || c+=(--plot "$dir/plots")
    "$bin" "${c[@]}" > "$dir/results.txt"
}

run_set "$out" "" "" "$workloads" --threads "$threads"
jsons=("${set_jsons[@]}")
if [ "$direct" = 1 ]; then
    run_set "$out" -direct "direct reads" readrandom,seekrandom,ycsb-c --threads "$threads" --direct-io
    jsons+=("${set_jsons[@]}")
fi

if [ -n "$memory_limit" ]; then
    run_set "$out/device" "" "device-bound, memory limit $memory_limit" \
        fillrandom,readrandom,seekrandom,ycsb-c,ycsb-e,update --threads "$threads" \
        --memory-limit "$memory_limit"
    [ ${#set_jsons[@]} -eq 0 ] || combine "$out/device" "${set_jsons[@]}"
fi

if [ "$scale_threads" -gt 0 ] 2>/dev/null; then
    sdir="$out/threads-$scale_threads"
    run_set "$sdir" "" "$scale_threads threads" readrandom,ycsb-a,readwhilewriting \
        --threads "$scale_threads"
    if [ ${#set_jsons[@]} -gt 0 ]; then
        combine "$sdir" "${set_jsons[@]}"
        # The scaling table: each engine's run phases at both thread counts.
        if command -v python3 > /dev/null 2>&1; then
            python3 - "$out" "$sdir" "$threads" "$scale_threads" > "$out/scaling.md" <<'PY'
import json, os, sys
out, sdir, base, scaled = sys.argv[1:5]
def load(d):
    rows = {}
    for f in sorted(os.listdir(d)):
        # The main set's page-cache runs only (not the direct-read ones).
        if f.endswith(".json") and f != "results.json" and not f.endswith("-direct.json"):
            for r in json.load(open(os.path.join(d, f))):
                if r["phase"] == "run":
                    rows[(r["engine"], r["workload"])] = r["ops_per_sec"]
    return rows
one, many = load(out), load(sdir)
print(f"| engine | workload | {base} thread(s), kops/s | {scaled} threads, kops/s | ratio |")
print("| --- | --- | ---: | ---: | ---: |")
for (e, w), v in sorted(many.items()):
    b = one.get((e, w))
    ratio = f"{v / b:.2f}x" if b else "-"
    print(f"| {e} | {w} | {b / 1e3:.1f} | {v / 1e3:.1f} | {ratio} |" if b else f"| {e} | {w} | - | {v / 1e3:.1f} | - |")
PY
        fi
    fi
fi

[ ${#jsons[@]} -gt 0 ] || { echo "compare.sh: no results" >&2; exit 1; }
combine "$out" "${jsons[@]}"
cat "$out/results.txt"
echo "compare.sh: results in $out (results.md, results.json, per-engine .json and .txt; scaling.md)" >&2
if [ ${#failed[@]} -gt 0 ]; then
    echo "compare.sh: failed engines: ${failed[*]}" >&2
    exit 1
fi
