#!/usr/bin/env bash
# Makes sure this machine has what a part of the comparison needs, installing
# the missing pieces with apt-get (Debian/Ubuntu, as root) when it can.
#
# Usage: scripts/setup-deps.sh WHAT...
#   rocksdb   what the `rocksdb` cargo feature needs to build: a C++
#             compiler, libclang and clang's builtin headers (bindgen, run by
#             librocksdb-sys, parses RocksDB's C header with them). Prints the
#             directory holding libclang on stdout, for LIBCLANG_PATH.
#   leveldb   what the `leveldb` cargo feature needs: cmake and clang
#             (leveldb-sys builds the bundled LevelDB 1.22 with cmake; under
#             GCC its build fails, so the build runs with CC=clang
#             CXX=clang++).
#   badger    what the `badger` cargo feature needs: Go 1.24 or newer (not
#             installed here: distributions often ship older releases; get
#             one from the Go project) and a C compiler for cgo.
#   fonts     a TrueType font for the PNG charts of `sepkv bench --plot`
#             (DejaVu Sans); without one only SVG charts are written.
#
# Packages are installed only when something is missing: `apt-get update`
# once, then `apt-get install -y`. Without root or apt-get the script says
# what is missing and how to install it, and exits with status 1.
# Messages go to stderr.
set -euo pipefail

say() { echo "setup-deps.sh: $*" >&2; }

updated=0
# apt_install PKG... installs the packages, or says how to and fails.
apt_install() {
    if ! command -v apt-get > /dev/null 2>&1; then
        say "no apt-get here: install the equivalent of the Debian packages '$*' with this system's package manager"
        return 1
    fi
    if [ "$(id -u)" != 0 ]; then
        say "not root: run 'sudo apt-get update && sudo apt-get install -y $*' (or run this script as root)"
        return 1
    fi
    if [ "$updated" = 0 ]; then
        say "apt-get update"
        DEBIAN_FRONTEND=noninteractive apt-get update -q >&2
        updated=1
    fi
    say "apt-get install -y $*"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$@" >&2
}

# A directory holding a libclang shared library that clang-sys accepts
# (libclang.so or libclang-N.so), or nothing. LIBCLANG_PATH wins; then the
# library of the clang on PATH, then llvm-config's, then the usual places.
libclang_dir() {
    local dirs=() d major
    [ -z "${LIBCLANG_PATH:-}" ] || dirs+=("$LIBCLANG_PATH")
    if command -v clang > /dev/null 2>&1; then
        major="$(clang -dumpversion 2>/dev/null | cut -d. -f1)"
        [ -z "$major" ] || dirs+=("/usr/lib/llvm-$major/lib")
    fi
    if command -v llvm-config > /dev/null 2>&1; then
        dirs+=("$(llvm-config --libdir 2>/dev/null || true)")
    fi
    # Newest LLVM first.
    while IFS= read -r d; do dirs+=("$d"); done < <(ls -d /usr/lib/llvm-*/lib /usr/lib/llvm/*/lib 2>/dev/null | sort -rV)
    dirs+=(/usr/lib/x86_64-linux-gnu /usr/lib/aarch64-linux-gnu /usr/lib64 /usr/lib /usr/local/lib)
    for d in "${dirs[@]}"; do
        [ -n "$d" ] && [ -d "$d" ] || continue
        if compgen -G "$d/libclang.so" > /dev/null || compgen -G "$d/libclang-*.so" > /dev/null; then
            echo "$d"
            return 0
        fi
    done
    return 1
}

# Whether clang finds its builtin headers (stddef.h, stdarg.h), which
# bindgen needs to parse RocksDB's c.h.
clang_headers_ok() {
    command -v clang > /dev/null 2>&1 &&
        printf '#include <stddef.h>\n#include <stdarg.h>\n#include <stdint.h>\n' |
            clang -x c -fsyntax-only - > /dev/null 2>&1
}

setup_rocksdb() {
    local pkgs=()
    command -v c++ > /dev/null 2>&1 || command -v g++ > /dev/null 2>&1 ||
        command -v clang++ > /dev/null 2>&1 || pkgs+=(g++)
    if ! libclang_dir > /dev/null || ! clang_headers_ok; then
        pkgs+=(libclang-dev clang)
    fi
    if [ ${#pkgs[@]} -gt 0 ]; then
        say "the rocksdb feature needs ${pkgs[*]}"
        apt_install "${pkgs[@]}" || return 1
    fi
    local dir
    if ! dir="$(libclang_dir)"; then
        say "no libclang.so found: install libclang-dev (Debian) and/or set LIBCLANG_PATH to its directory"
        return 1
    fi
    if ! clang_headers_ok; then
        say "clang cannot find its builtin headers (stddef.h): install clang and libclang-dev (Debian)"
        return 1
    fi
    say "rocksdb build dependencies present (libclang in $dir)"
    echo "$dir"
}

setup_leveldb() {
    local pkgs=()
    command -v cmake > /dev/null 2>&1 || pkgs+=(cmake)
    command -v clang++ > /dev/null 2>&1 || pkgs+=(clang)
    if [ ${#pkgs[@]} -gt 0 ]; then
        say "the leveldb feature needs ${pkgs[*]}"
        apt_install "${pkgs[@]}" || return 1
    fi
    say "leveldb build dependencies present (cmake, clang)"
}

# Go 1.24 or newer on PATH (or $GO) and a C compiler for cgo.
setup_badger() {
    local go="${GO:-go}" v
    if ! command -v "$go" > /dev/null 2>&1; then
        say "the badger feature needs Go 1.24 or newer; no '$go' on PATH"
        return 1
    fi
    v="$(GOTOOLCHAIN=local "$go" env GOVERSION 2>/dev/null | sed 's/^go//')"
    if ! printf '1.24\n%s\n' "$v" | sort -C -V; then
        say "the badger feature needs Go 1.24 or newer; '$go' is ${v:-of unknown version}"
        return 1
    fi
    if ! command -v cc > /dev/null 2>&1 && ! command -v gcc > /dev/null 2>&1; then
        say "the badger feature needs a C compiler for cgo"
        apt_install gcc || return 1
    fi
    say "badger build dependencies present (Go $v, a C compiler)"
}

# Where sepkv bench looks for a font first (see crates/sepkv-bench/src/plot.rs).
font_paths=(
    /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf
    /usr/share/fonts/TTF/DejaVuSans.ttf
    /usr/share/fonts/dejavu/DejaVuSans.ttf
    /usr/share/fonts/dejavu-sans-fonts/DejaVuSans.ttf
    /usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf
    /usr/share/fonts/liberation-sans/LiberationSans-Regular.ttf
)

font_ok() {
    local f
    [ -z "${SEPKV_PLOT_FONT:-}" ] || [ ! -f "$SEPKV_PLOT_FONT" ] || return 0
    for f in "${font_paths[@]}"; do
        [ ! -f "$f" ] || return 0
    done
    return 1
}

setup_fonts() {
    if ! font_ok; then
        say "PNG charts need a TrueType font (DejaVu Sans)"
        apt_install fonts-dejavu-core || return 1
    fi
    font_ok || { say "still no font found"; return 1; }
}

[ $# -gt 0 ] || { sed -n '2,24p' "$0" >&2; exit 2; }
status=0
for what in "$@"; do
    case "$what" in
        rocksdb) setup_rocksdb || status=1 ;;
        leveldb) setup_leveldb || status=1 ;;
        badger) setup_badger || status=1 ;;
        fonts) setup_fonts || status=1 ;;
        -h|--help) sed -n '2,24p' "$0"; exit 0 ;;
        *) say "unknown dependency '$what' (rocksdb, leveldb, badger, fonts)"; exit 2 ;;
    esac
done
exit "$status"
