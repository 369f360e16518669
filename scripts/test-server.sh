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

root="$(cd "$(dirname "$0")/.." && pwd)"
target="${CARGO_TARGET_DIR:-$root/target}"
# shellcheck source=scripts/lib/prereqs.sh
. "$root/scripts/lib/prereqs.sh"

need_tools "redis-server redis-cli redis-benchmark" "redis-server redis-tools"
need_redis_py

echo "building sepkv (test profile)"
cargo build --profile test -p sepkv-cli --bin sepkv --manifest-path "$root/Cargo.toml"
export SEPKV_BIN="$target/debug/sepkv"

start=$SECONDS
"$py" "$root/crates/sepkv-server/tests/py/differential.py"
"$py" "$root/crates/sepkv-server/tests/py/tools.py"
echo "server suites passed in $((SECONDS - start)) s"
