#!/usr/bin/env bash
# The test command: installs what the tests need when it is missing, then
# runs every suite. `.ci/run` calls this script after its format and lint
# checks; run it by hand from any directory of a checkout.
#
# Environment:
#   CI=true            a prerequisite that cannot be installed fails the run
#                      instead of skipping the suites that need it
#   SEPKV_TEST_QUICK=1 only `cargo test --workspace`
set -euo pipefail
cd "$(dirname "$0")/.."

started=$(date +%s)
step() { echo "== $* ($(( $(date +%s) - started )) s)"; }

step "cargo test --workspace"
cargo test --workspace

if [[ "${SEPKV_TEST_QUICK:-}" != 1 ]]; then
  # Suites beyond cargo (servers, language bindings) bring their own
  # script, which installs what they need and runs them.
  for extra in scripts/test-server.sh scripts/test-cluster.sh scripts/test-replication.sh scripts/test-python.sh; do
    if [[ -x "$extra" ]]; then
      step "$extra"
      "$extra"
    fi
  done
fi
step "all tests passed"
