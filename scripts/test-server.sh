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

root="$(cd "$(dirname "$0")/.." && pwd)"
target="${CARGO_TARGET_DIR:-$root/target}"
# shellcheck source=scripts/lib/prereqs.sh
. "$root/scripts/lib/prereqs.sh"

need_tools "redis-server redis-cli redis-benchmark" "redis-server redis-tools"
need_redis_py

# redis-py's own test suite: its source distribution, and what it imports.
PYTEST_VERSION=8.3.5
user_site=()
[ "$py" = "$target/redis-py-$REDIS_PY_VERSION/bin/python" ] || user_site=(--user)
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
