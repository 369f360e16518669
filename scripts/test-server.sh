#!/usr/bin/env bash
# The sepkv-server suites that are not plain `cargo test`: the
# differential test against redis-server (RESP2 and RESP3, every preset),
# redis-py's own tests (the pinned version's source distribution,
# downloaded into the target directory) and the redis-cli /
# redis-benchmark runs. (The kill -9, malformed-frame
# and limit tests are `cargo test -p sepkv-cli --test serve`, part of
# `cargo test --workspace`.)
#
# Installs what it needs when missing: Debian's redis-server and
# redis-tools, and redis-py and pytest (pinned) in a virtualenv under the target
# directory (in the user site when Python has no venv module). With CI=true anything that cannot be installed fails the run;
# otherwise the suites that need it are skipped with a message.
#
# Environment: SEPKV_DIFF_OPS, SEPKV_DIFF_SEED, SEPKV_DIFF_PRESETS,
# SEPKV_TOOLS_REQUESTS (see the suites' headers), CARGO_TARGET_DIR.
set -euo pipefail

REDIS_PY_VERSION=5.0.8
PYTEST_VERSION=8.3.5
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

# redis-py's own test suite: its source distribution, and what it imports.
user_site=()
[ "$py" = "$python" ] && user_site=(--user)
"$py" -c "import pytest, packaging, sys; sys.exit(pytest.__version__ != '$PYTEST_VERSION')" 2>/dev/null \
    || "$py" -m pip install -q "${user_site[@]}" "pytest==$PYTEST_VERSION" packaging \
    || fail_or_skip "pytest could not be installed"
redis_py_src="$target/redis-py-src-$REDIS_PY_VERSION"
if [ ! -f "$redis_py_src/tests/test_commands.py" ]; then
    dl="$(mktemp -d)"
    "$py" -m pip download -q --no-binary :all: --no-deps "redis==$REDIS_PY_VERSION" -d "$dl" \
        && tar xzf "$dl/redis-$REDIS_PY_VERSION.tar.gz" -C "$dl" \
        && rm -rf "$redis_py_src" && mv "$dl/redis-$REDIS_PY_VERSION" "$redis_py_src"
    rm -rf "$dl"
    [ -f "$redis_py_src/tests/test_commands.py" ] \
        || fail_or_skip "redis-py $REDIS_PY_VERSION's source distribution could not be downloaded"
fi
export SEPKV_REDIS_PY_SRC="$redis_py_src"

echo "building sepkv (test profile)"
cargo build --profile test -p sepkv-cli --bin sepkv --manifest-path "$root/Cargo.toml"
export SEPKV_BIN="$target/debug/sepkv"

start=$SECONDS
"$py" "$root/crates/sepkv-server/tests/py/differential.py"
"$py" "$root/crates/sepkv-server/tests/py/redis_py_suite.py"
"$py" "$root/crates/sepkv-server/tests/py/tools.py"
echo "server suites passed in $((SECONDS - start)) s"
