#!/usr/bin/env bash
# Builds `sepkv` in release mode with the RocksDB peers (`rocksdb`,
# `rocksdb-blob`) linked against the system's RocksDB shared library, so
# that no RocksDB C++ source is compiled (the bundled build takes about an
# hour of two cores).
#
# The `rocksdb` crate the peers use (0.20) binds RocksDB's C API of
# release 7.8/7.9; Debian 12's `librocksdb-dev` is RocksDB 7.8.3. Missing
# packages are installed with apt-get when run as root on Debian/Ubuntu
# (`apt-get update` once, then `apt-get install -y librocksdb-dev`, plus
# what `scripts/setup-deps.sh rocksdb` installs: libclang and clang, which
# bindgen needs to read RocksDB's C header).
#
# librocksdb-sys links the system library instead of building its own when
# ROCKSDB_LIB_DIR is set, and generates its bindings from the header under
# ROCKSDB_INCLUDE_DIR; both are set here from the installed package (or
# taken from the environment when already set). The binary then needs the
# shared library at run time (`ldd target/release/sepkv`).
#
# Usage: scripts/build-rocksdb-peers.sh [--leveldb] [--check]
#   --leveldb   also build the C++ LevelDB peer (`leveldb` feature; needs
#               cmake and clang, installed by scripts/setup-deps.sh leveldb)
#   --check     after the build, print the RocksDB version the binary runs
#               with (a tiny `fillrandom` in a temporary directory)
#
# The bundled build stays possible: `cargo build --release -p sepkv-cli
# --features rocksdb` without ROCKSDB_LIB_DIR compiles the crate's bundled
# RocksDB 7.9.2.
set -euo pipefail

say() { echo "build-rocksdb-peers.sh: $*" >&2; }

features=rocksdb
check=0
for a in "$@"; do
    case "$a" in
        --leveldb) features=rocksdb,leveldb ;;
        --check) check=1 ;;
        -h|--help) sed -n '2,28p' "$0"; exit 0 ;;
        *) say "unknown option '$a'"; exit 2 ;;
    esac
done

root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"

# The multiarch library directory (x86_64-linux-gnu, aarch64-linux-gnu...).
multiarch="$(gcc -print-multiarch 2>/dev/null || dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || echo x86_64-linux-gnu)"
lib_dir="${ROCKSDB_LIB_DIR:-/usr/lib/$multiarch}"
include_dir="${ROCKSDB_INCLUDE_DIR:-/usr/include}"

have_rocksdb() {
    [ -f "$include_dir/rocksdb/c.h" ] && compgen -G "$lib_dir/librocksdb.so*" > /dev/null
}

if ! have_rocksdb; then
    if [ -n "${ROCKSDB_LIB_DIR:-}" ] || [ -n "${ROCKSDB_INCLUDE_DIR:-}" ]; then
        say "no RocksDB library in '$lib_dir' or no rocksdb/c.h in '$include_dir' (from ROCKSDB_LIB_DIR / ROCKSDB_INCLUDE_DIR)"
        exit 1
    fi
    if ! command -v apt-get > /dev/null 2>&1 || [ "$(id -u)" != 0 ]; then
        say "RocksDB's shared library and headers are missing: run 'apt-get update && apt-get install -y librocksdb-dev' as root (or set ROCKSDB_LIB_DIR and ROCKSDB_INCLUDE_DIR)"
        exit 1
    fi
    say "apt-get update; apt-get install -y librocksdb-dev"
    DEBIAN_FRONTEND=noninteractive apt-get update -q >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends librocksdb-dev >&2
    have_rocksdb || { say "librocksdb-dev installed but no library in '$lib_dir'"; exit 1; }
fi

version="$(sed -n 's/^#define ROCKSDB_\(MAJOR\|MINOR\|PATCH\) \([0-9]*\).*/\2/p' "$include_dir/rocksdb/version.h" | paste -sd. -)"
case "$version" in
    7.8.*|7.9.*) ;;
    *) say "warning: RocksDB $version found; the rocksdb crate 0.20 binds the C API of 7.8/7.9 and may not compile against it" ;;
esac

# libclang and clang's builtin headers for bindgen.
libclang="$(scripts/setup-deps.sh rocksdb)"
export LIBCLANG_PATH="${LIBCLANG_PATH:-$libclang}"
if [ "$features" = rocksdb,leveldb ]; then
    scripts/setup-deps.sh leveldb
    # leveldb-sys's bundled LevelDB fails to build under GCC.
    export CC=clang CXX=clang++
fi

export ROCKSDB_LIB_DIR="$lib_dir" ROCKSDB_INCLUDE_DIR="$include_dir"
say "RocksDB $version from $lib_dir; cargo build --release -p sepkv-cli --features $features"
cargo build --release -p sepkv-cli --features "$features"

target="${CARGO_TARGET_DIR:-$root/target}"
bin="$target/release/sepkv"
say "built $bin"
if [ "$check" = 1 ]; then
    tmp="$(mktemp -d)"
    trap 'rm -rf "$tmp"' EXIT
    if ! "$bin" bench --engine rocksdb --workload fillrandom --num 1000 --db "$tmp/db" \
        --json "$tmp/check.json" > "$tmp/check.log" 2>&1; then
        cat "$tmp/check.log" >&2
        say "the rocksdb peer failed to run"
        exit 1
    fi
    ran="$(grep -o '"rocksdb_version": *"[^"]*"' "$tmp/check.json" | head -1 | sed 's/.*: *"\(.*\)"/\1/')"
    say "the rocksdb peer runs with RocksDB ${ran:-of unknown version}"
    [ -n "$ran" ]
fi
