#!/usr/bin/env bash
# The Python package's suite: builds bindings/python into a virtual
# environment with `pip install ./bindings/python` (maturin, release
# profile), checks the bindings crate's format and lints (it is not a member
# of the engine's workspace), then runs its pytest suite. scripts/test.sh
# calls it; run it by hand from any directory of a checkout.
#
# Environment:
#   CI=true              a missing Python 3.9+ or a failed install fails the
#                        run instead of skipping the suite
#   SEPKV_PY_VENV=DIR    the virtual environment (default target/py-venv,
#                        created when missing, reused after)
#   PYTHON=python3       the interpreter that creates it
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

venv=${SEPKV_PY_VENV:-$root/target/py-venv}
python=${PYTHON:-python3}
# Pinned: the build backend and the test runner.
pins=(maturin==1.16.0 pytest==8.3.4)

started=$(date +%s)
step() { echo "== python: $* ($(( $(date +%s) - started )) s)"; }

unavailable() {
  if [[ "${CI:-}" == true ]]; then
    echo "test-python: $*" >&2
    exit 1
  fi
  echo "test-python: $*; skipping the Python suite (CI=true makes this an error)" >&2
  exit 0
}

if ! "$python" -c 'import sys; sys.exit(sys.version_info < (3, 9))' 2>/dev/null; then
  unavailable "$python (3.9 or newer) is not available"
fi

if [[ ! -x "$venv/bin/python" ]]; then
  step "virtual environment $venv"
  "$python" -m venv "$venv" || unavailable "cannot create a virtual environment (python3-venv missing?)"
fi
export PATH="$venv/bin:$PATH" VIRTUAL_ENV="$venv"

step "pip install ${pins[*]}"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check "${pins[@]}" ||
  unavailable "cannot install ${pins[*]}"

step "cargo fmt and clippy (bindings/python)"
cargo fmt --manifest-path bindings/python/Cargo.toml --check
# The engine's target directory: the engine is built once for both.
export CARGO_TARGET_DIR="$root/target"
cargo clippy --manifest-path bindings/python/Cargo.toml --all-targets -- -D warnings

step "pip install ./bindings/python"
# The build backend pinned above, rather than one fetched for each build.
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
  --no-build-isolation ./bindings/python

step "pytest bindings/python/tests"
# From outside the source tree, so that the installed package is tested.
(cd "$root/target" && "$venv/bin/python" -m pytest -p no:cacheprovider -q "$root/bindings/python/tests")
step "done"
