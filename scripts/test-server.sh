#!/usr/bin/env bash
# The sepkv-server suites that are not plain `cargo test`: the
# differential test against redis-server (RESP2 and RESP3, every preset)
# and the redis-cli / redis-benchmark runs. (The kill -9, malformed-frame
# and limit tests are `cargo test -p sepkv-cli --test serve`, part of
# `cargo test --workspace`.)
#
# Installs what it needs when missing: Debian's redis-server and
# redis-tools, and redis-py (pinned) in a virtualenv under the target
# directory (in the user site when Python has no venv module). With CI=true anything that cannot be installed fails the run;
# otherwise the suites that need it are skipped with a message.
#
# Environment: SEPKV_DIFF_OPS, SEPKV_DIFF_SEED, SEPKV_DIFF_PRESETS,
# SEPKV_TOOLS_REQUESTS (see the suites' headers), CARGO_TARGET_DIR.
set -euo pipefail

REDIS_PY_VERSION=5.0.8
root="$(cd "$(dirname "$0")/.." && pwd)"
target="${CARGO_TARGET_DIR:-$root/target}"
ci="${CI:-false}"

fail_or_skip() {
    if [ "$ci" = "true" ]; then
        echo "FAIL: $1 (CI=true)" >&2
        exit 1
    fi
    echo "SKIP: $1" >&2
    exit 0
}

as_root() {
    if [ "$(id -u)" = 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else return 1; fi
}

if ! command -v redis-server >/dev/null || ! command -v redis-cli >/dev/null \
    || ! command -v redis-benchmark >/dev/null; then
    echo "installing redis-server and redis-tools"
    if command -v apt-get >/dev/null; then
        as_root apt-get update -qq || true
        as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server redis-tools \
            || true
    fi
    command -v redis-server >/dev/null && command -v redis-benchmark >/dev/null \
        || fail_or_skip "redis-server/redis-tools could not be installed"
fi

python="${PYTHON:-python3}"
command -v "$python" >/dev/null || fail_or_skip "python3 not found"
has_redis_py() { "$1" -c "import redis, sys; sys.exit(redis.__version__ != '$REDIS_PY_VERSION')" 2>/dev/null; }
venv="$target/redis-py-$REDIS_PY_VERSION"
if has_redis_py "$venv/bin/python"; then
    py="$venv/bin/python"
elif "$python" -m venv "$venv" >/dev/null 2>&1 \
    && "$venv/bin/python" -m pip install -q "redis==$REDIS_PY_VERSION"; then
    echo "installed redis-py $REDIS_PY_VERSION into a virtualenv under the target directory"
    py="$venv/bin/python"
elif has_redis_py "$python" || "$python" -m pip install -q --user "redis==$REDIS_PY_VERSION"; then
    # No venv module (Debian's python3-venv): the user site instead.
    py="$python"
else
    fail_or_skip "redis-py $REDIS_PY_VERSION could not be installed"
fi

echo "building sepkv (test profile)"
cargo build --profile test -p sepkv-cli --bin sepkv --manifest-path "$root/Cargo.toml"
export SEPKV_BIN="$target/debug/sepkv"

start=$SECONDS
"$py" "$root/crates/sepkv-server/tests/py/differential.py"
"$py" "$root/crates/sepkv-server/tests/py/tools.py"
echo "server suites passed in $((SECONDS - start)) s"
