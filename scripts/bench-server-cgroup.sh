#!/usr/bin/env bash
# The case Redis cannot serve: DATA bytes of 1000-byte values
# written with SET and HSET into a server running inside a memory cgroup of
# LIMIT bytes, then GETs of random keys with redis-benchmark — first
# `sepkv serve`, then `redis-server` with its defaults (no maxmemory), as a
# user would start it. Also fio's 4 KiB random-read rate of the disk the
# databases live on, for the GET rates to be read against.
#
# Usage: scripts/bench-server-cgroup.sh [OUT_DIR]
# Environment: DATA (bytes of values, default 4 GiB), LIMIT (default
# 512M), HASH_SHARE (fraction of DATA written with HSET, default 0.25),
# PRESET (default wisckey), GETS (GET requests, default 200000), SEPKV_BIN
# (default target/release/sepkv; `cargo build --release -p sepkv-cli`),
# WORK (directory for the databases, default a new one under TMPDIR; it
# must be on the disk being measured, not a tmpfs).
# Needs root (it creates memory cgroups: v2, or v1's memory controller,
# as a child of this shell's group), redis-server, redis-cli,
# redis-benchmark, python3; fio is optional.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
out="${1:-$(mktemp -d -t sepkv-bench-cgroup.XXXXXX)}"
mkdir -p "$out"
DATA="${DATA:-$((4 << 30))}"
LIMIT="${LIMIT:-512M}"
HASH_SHARE="${HASH_SHARE:-0.25}"
PRESET="${PRESET:-wisckey}"
GETS="${GETS:-200000}"
bin="${SEPKV_BIN:-${CARGO_TARGET_DIR:-$root/target}/release/sepkv}"
work="${WORK:-$(mktemp -d -t sepkv-bench-cgroup-work.XXXXXX)}"
mkdir -p "$work"
VALUE=1000
FIELDS=100
n_hash=$(python3 -c "print(int($DATA * $HASH_SHARE) // ($VALUE * $FIELDS))")
n_set=$(python3 -c "print(($DATA - $n_hash * $VALUE * $FIELDS) // $VALUE)")

pids=()
groups=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    sleep 2
    for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
    sleep 0.5
    for g in "${groups[@]}"; do rmdir "$g" 2>/dev/null || true; done
    rm -rf "$work"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_port() { for _ in $(seq 300); do redis-cli -p "$1" ping >/dev/null 2>&1 && return 0; sleep 0.1; done; return 1; }
log() { echo "$*" | tee -a "$out/summary.txt"; }
bytes() { python3 -c "import sys; s=sys.argv[1].upper(); m={'K':1<<10,'M':1<<20,'G':1<<30}; print(int(s[:-1])*m[s[-1]] if s[-1] in m else int(s))" "$1"; }
limit_bytes=$(bytes "$LIMIT")

# A memory cgroup bounded to LIMIT, page cache and swap included, as a
# child of this shell's own group. Prints its path.
make_group() {
    local name="$1" g
    if [[ -f /sys/fs/cgroup/cgroup.controllers ]]; then
        g="/sys/fs/cgroup$(awk -F: '$1=="0" {print $3}' /proc/self/cgroup)/$name"
        g="${g//\/\//\/}"
        mkdir "$g"
        echo "$limit_bytes" > "$g/memory.max"
        echo 0 > "$g/memory.swap.max" 2>/dev/null || true
    else
        g="/sys/fs/cgroup/memory$(awk -F: '$2=="memory" {print $3}' /proc/self/cgroup)/$name"
        g="${g//\/\//\/}"
        mkdir "$g"
        echo "$limit_bytes" > "$g/memory.limit_in_bytes"
        if [[ -f "$g/memory.memsw.limit_in_bytes" ]]; then
            echo "$limit_bytes" > "$g/memory.memsw.limit_in_bytes"
        fi
    fi
    echo "$g"
}

# The group's peak memory, limit hits and out-of-memory kills.
group_report() {
    local g="$1"
    if [[ -f "$g/memory.max" ]]; then
        echo "peak $(cat "$g/memory.peak" 2>/dev/null || echo '?') B; events: $(tr '\n' ' ' < "$g/memory.events")"
    else
        echo "peak $(cat "$g/memory.max_usage_in_bytes") B; limit hits (failcnt) $(cat "$g/memory.failcnt"); $(grep -E 'oom_kill|under_oom' "$g/memory.oom_control" | tr '\n' ' ')"
    fi
}

# Runs the rest of the command line inside group $1, replacing the shell
# that runs it: start it in the background (`in_group G cmd &`), so that
# `$!` is the server itself.
in_group() {
    local g="$1"
    shift
    exec sh -c 'echo $$ > "$0/cgroup.procs"; exec "$@"' "$g" "$@"
}

# The load: SETs of key:%012d (redis-benchmark's __rand_int__ keys), then
# HSETs of hash:%08d with FIELDS fields each, as one RESP stream for
# `redis-cli --pipe`.
load() {
    python3 - "$n_set" "$n_hash" "$VALUE" "$FIELDS" <<'EOF'
import os, sys
n_set, n_hash, size, fields = map(int, sys.argv[1:])
out = sys.stdout.buffer
base = os.urandom(size)
def bulk(b):
    return b"$%d\r\n%s\r\n" % (len(b), b)
buf = []
for i in range(n_set):
    v = b"%012d" % i + base[12:]
    buf.append(b"*3\r\n$3\r\nSET\r\n" + bulk(b"key:%012d" % i) + bulk(v))
    if len(buf) == 1000:
        out.write(b"".join(buf)); buf.clear()
for h in range(n_hash):
    parts = [b"*%d\r\n$4\r\nHSET\r\n" % (2 + 2 * fields), bulk(b"hash:%08d" % h)]
    for f in range(fields):
        parts.append(bulk(b"f%03d" % f))
        parts.append(bulk(b"%08d%03d" % (h, f) + base[11:]))
    buf.append(b"".join(parts))
    if len(buf) == 10:
        out.write(b"".join(buf)); buf.clear()
out.write(b"".join(buf))
EOF
}

{
    echo "date: $(date -u +%Y-%m-%dT%H:%MZ)"
    echo "build: $(git -C "$root" rev-parse --short HEAD) (release)"
    echo "machine: $(nproc) cores, $(free -g | awk '/Mem:/ {print $2}') GiB RAM, databases on $(df --output=source "$work" | tail -1) ($(df --output=fstype "$work" | tail -1))"
    echo "redis: $(redis-server --version | cut -d' ' -f3)"
    echo "load: $n_set SET of $VALUE-byte values + $n_hash HSET of $FIELDS fields of $VALUE bytes = $(( (n_set + n_hash * FIELDS) * VALUE )) value bytes; memory limit $LIMIT ($limit_bytes B)"
} | tee "$out/summary.txt"

if command -v fio >/dev/null; then
    for qd in 1 8; do
        fio --name=randread --filename="$work/fio.dat" --size=2G --bs=4k --rw=randread \
            --direct=1 --ioengine=libaio --iodepth="$qd" --runtime=15 --time_based \
            --output="$out/fio-qd$qd.txt"
        log "device: fio 4 KiB random reads, queue depth $qd: $(grep -m1 -o 'IOPS=[^,]*' "$out/fio-qd$qd.txt")"
    done
    rm -f "$work/fio.dat"
fi

# --- sepkv ---
port=$(free_port)
g=$(make_group sepkv-bench-sepkv-$$)
groups+=("$g")
in_group "$g" "$bin" --db "$work/sepkv" --preset "$PRESET" serve --port "$port" --fsync everysec \
    >"$out/sepkv-serve.log" 2>&1 &
pids+=($!)
spid=$!
wait_port "$port"
start=$(date +%s.%N)
load | redis-cli -p "$port" --pipe > "$out/sepkv-load.txt" 2>&1 || true
end=$(date +%s.%N)
log "sepkv ($PRESET) load: $(tail -1 "$out/sepkv-load.txt" | tr -d '\r') in $(python3 -c "print(round($end - $start, 1))") s; alive: $(kill -0 "$spid" 2>/dev/null && echo yes || echo no)"
log "sepkv dbsize $(redis-cli -p "$port" dbsize 2>&1); directory $(du -sb "$work/sepkv" | cut -f1) B; group: $(group_report "$g")"
for P in 1 16; do
    redis-benchmark -h 127.0.0.1 -p "$port" -t get -r "$n_set" -n "$GETS" -c 50 -P "$P" --csv \
        > "$out/sepkv-get-P$P.csv" 2>&1 || true
    log "sepkv GET random keys -c 50 -P $P: $(awk -F, 'NR>1 {gsub(/"/,""); printf "%.0f req/s, p50 %s ms, p99 %s ms", $2, $5, $7}' "$out/sepkv-get-P$P.csv")"
done
redis-cli -p "$port" get key:000000000007 | head -c 12 > "$out/sepkv-check.txt"; echo >> "$out/sepkv-check.txt"
redis-cli -p "$port" hget hash:00000003 f042 | head -c 11 >> "$out/sepkv-check.txt"; echo >> "$out/sepkv-check.txt"
log "sepkv reads back: $(tr '\n' ' ' < "$out/sepkv-check.txt")(want 000000000007 00000003042); group after GETs: $(group_report "$g")"
kill "$spid"; wait "$spid" 2>/dev/null || true

# --- redis-server, defaults (no maxmemory) ---
port=$(free_port)
g=$(make_group sepkv-bench-redis-$$)
groups+=("$g")
mkdir -p "$work/redis"
in_group "$g" redis-server --port "$port" --bind 127.0.0.1 --dir "$work/redis" \
    >"$out/redis-server.log" 2>&1 &
pids+=($!)
rpid=$!
wait_port "$port"
start=$(date +%s.%N)
( while kill -0 "$rpid" 2>/dev/null; do
      echo "$(date +%s) $(redis-cli -p "$port" dbsize 2>/dev/null) $(redis-cli -p "$port" info memory 2>/dev/null | grep -m1 '^used_memory:' | tr -d '\r')"
      sleep 2
  done ) > "$out/redis-progress.txt" &
pids+=($!)
load | redis-cli -p "$port" --pipe > "$out/redis-load.txt" 2>&1 || true
end=$(date +%s.%N)
sleep 1
alive=$(kill -0 "$rpid" 2>/dev/null && echo yes || echo no)
status="running"
if [[ $alive == no ]]; then
    wait "$rpid" 2>/dev/null && status="exited 0" || status="exited $?"
fi
log "redis-server load: $(tail -1 "$out/redis-load.txt" | tr -d '\r') after $(python3 -c "print(round($end - $start, 1))") s; alive: $alive ($status); last progress (time, keys, memory): $(tail -1 "$out/redis-progress.txt")"
log "redis-server group: $(group_report "$g")"
if [[ $alive == yes ]]; then
    log "redis dbsize $(redis-cli -p "$port" dbsize 2>&1)"
    redis-benchmark -h 127.0.0.1 -p "$port" -t get -r "$n_set" -n "$GETS" -c 50 -P 1 --csv \
        > "$out/redis-get-P1.csv" 2>&1 || true
    log "redis GET random keys -c 50 -P 1: $(awk -F, 'NR>1 {gsub(/"/,""); printf "%.0f req/s, p50 %s ms, p99 %s ms", $2, $5, $7}' "$out/redis-get-P1.csv")"
    redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || kill "$rpid"
    wait "$rpid" 2>/dev/null || true
fi
tail -5 "$out/redis-server.log" > "$out/redis-server-tail.txt" || true
echo "results in $out"
