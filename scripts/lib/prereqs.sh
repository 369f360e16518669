# Helpers the server suites share (sourced by scripts/test-server.sh and
# scripts/test-cluster.sh): installing Debian packages and redis-py when
# missing. With CI=true anything that cannot be installed fails the run;
# otherwise the caller's suites are skipped with a message.
#
# Expects: $target (the cargo target directory).

REDIS_PY_VERSION=5.0.8
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

# need_tools "TOOL..." "PACKAGE...": installs the Debian packages when a
# tool is missing.
need_tools() {
    local tools="$1" pkgs="$2" t missing=""
    for t in $tools; do command -v "$t" >/dev/null || missing="$missing $t"; done
    [ -z "$missing" ] && return 0
    echo "installing $pkgs (missing:$missing)"
    if command -v apt-get >/dev/null; then
        as_root apt-get update -qq || true
        # shellcheck disable=SC2086
        as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $pkgs || true
    fi
    for t in $tools; do
        command -v "$t" >/dev/null || fail_or_skip "$t could not be installed (Debian: $pkgs)"
    done
}

# Sets $py to a Python with redis-py $REDIS_PY_VERSION: a virtualenv under
# the target directory, else the user site when Python has no venv module.
need_redis_py() {
    local python="${PYTHON:-python3}" venv="$target/redis-py-$REDIS_PY_VERSION"
    command -v "$python" >/dev/null || fail_or_skip "python3 not found"
    has_redis_py() { "$1" -c "import redis, sys; sys.exit(redis.__version__ != '$REDIS_PY_VERSION')" 2>/dev/null; }
    if has_redis_py "$venv/bin/python"; then
        py="$venv/bin/python"
    elif "$python" -m venv "$venv" >/dev/null 2>&1 \
        && "$venv/bin/python" -m pip install -q "redis==$REDIS_PY_VERSION"; then
        echo "installed redis-py $REDIS_PY_VERSION into a virtualenv under the target directory"
        py="$venv/bin/python"
    elif has_redis_py "$python" || "$python" -m pip install -q --user "redis==$REDIS_PY_VERSION"; then
        py="$python"
    else
        fail_or_skip "redis-py $REDIS_PY_VERSION could not be installed"
    fi
}
