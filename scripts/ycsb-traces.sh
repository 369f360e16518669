#!/usr/bin/env bash
# Regenerates real YCSB traces with the official YCSB core and its BasicDB.
#
# Fetches site.ycsb:core:0.17.0 (and its runtime dependencies) from Maven
# Central, runs site.ycsb.Client with -db site.ycsb.BasicDB and
# basicdb.verbose=true (which prints every operation), and converts that
# output into the harness's trace format (tab-separated, gzip):
#
#   INSERT <key> <value bytes>
#   UPDATE <key> <value bytes>
#   READ   <key>
#   SCAN   <start key> <record count>
#   DELETE <key>
#
# Usage: scripts/ycsb-traces.sh [OUT_DIR] [WORKLOADS]
#   OUT_DIR    where load-<N>.tsv.gz and run-<w>-<N>.tsv.gz go
#              (default: crates/sepkv-bench/data)
#   WORKLOADS  letters of the core workloads to run (default: "a b c d e f")
# Environment: RECORDS (default 100000), OPERATIONS (default = RECORDS),
#   FIELDS (default 10), FIELD_LENGTH (default 100), SUFFIX (default 100k
#   for 100000 records, else the record count).
#
# YCSB draws from ThreadLocalRandom, so every run produces different
# operations with the same distributions.
set -euo pipefail

here="$(cd "$(dirname "$0")/.." && pwd)"
out="${1:-$here/crates/sepkv-bench/data}"
workloads="${2:-a b c d e f}"
records="${RECORDS:-100000}"
operations="${OPERATIONS:-$records}"
fields="${FIELDS:-10}"
field_length="${FIELD_LENGTH:-100}"
if [ "$records" = 100000 ]; then suffix="${SUFFIX:-100k}"; else suffix="${SUFFIX:-$records}"; fi
version=0.17.0

for tool in java mvn gzip awk; do
  command -v "$tool" >/dev/null || { echo "error: $tool is required" >&2; exit 2; }
done
mkdir -p "$out"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# A throw-away project whose only dependency is YCSB's core, so that
# dependency:copy-dependencies fetches it with its runtime dependencies
# (HdrHistogram, htrace, jackson).
cat >"$work/pom.xml" <<EOF
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>local</groupId>
  <artifactId>ycsb-traces</artifactId>
  <version>1</version>
  <dependencies>
    <dependency>
      <groupId>site.ycsb</groupId>
      <artifactId>core</artifactId>
      <version>$version</version>
    </dependency>
  </dependencies>
</project>
EOF
echo "fetching site.ycsb:core:$version ..." >&2
mvn -q -B -Dstyle.color=never -f "$work/pom.xml" dependency:copy-dependencies \
  -DincludeScope=runtime -DoutputDirectory="$work/lib" >"$work/mvn.log" 2>&1 || {
  cat "$work/mvn.log" >&2
  echo "error: could not fetch site.ycsb:core:$version from Maven Central" >&2
  exit 1
}
ls "$work/lib/core-$version.jar" >/dev/null

# Settings shared by every phase; all five proportions are set explicitly
# because CoreWorkload defaults to 0.95 read / 0.05 update.
common=(
  -db site.ycsb.BasicDB
  -p basicdb.verbose=true
  -p workload=site.ycsb.workloads.CoreWorkload
  -p recordcount="$records"
  -p operationcount="$operations"
  -p fieldcount="$fields"
  -p fieldlength="$field_length"
  -p readallfields=true
  -p writeallfields=false
  -p threadcount=1
)

# Runs the YCSB client; BasicDB prints one line per operation on stdout.
ycsb() {
  java -cp "$work/lib/*" site.ycsb.Client "$@" 2>"$work/client.log" || {
    cat "$work/client.log" >&2
    echo "error: YCSB client failed" >&2
    exit 1
  }
}

# Converts BasicDB's verbose lines into the trace format:
#   READ usertable <key> [ <all fields>]
#   SCAN usertable <key> <count> [ <all fields>]
#   UPDATE usertable <key> [ field3=<value> ]
#   INSERT usertable <key> [ field0=<value> ... field9=<value> ]
#   DELETE usertable <key>
# Values are printable ASCII that may contain spaces and '=', so their size
# is the length of the bracketed text minus the field names and separators:
# inserts carry every field (field0..field<FIELDS-1>), updates exactly one
# (writeallfields=false).
convert() {
  LC_ALL=C awk -v fields="$fields" '
    BEGIN {
      OFS = "\t"
      names = 0
      for (i = 0; i < fields; i++) names += length("field" i) + 2
    }
    !/^(READ|UPDATE|INSERT|SCAN|DELETE) / { next }
    {
      op = $1; key = $3
      if (op == "READ") { print op, key; next }
      if (op == "DELETE") { print op, key; next }
      if (op == "SCAN") { print op, key, $4; next }
      prefix = op " " $2 " " key " [ "
      if (substr($0, 1, length(prefix)) != prefix || substr($0, length($0), 1) != "]") {
        printf "error: unexpected BasicDB line %d: %s\n", NR, substr($0, 1, 80) > "/dev/stderr"
        exit 1
      }
      body = substr($0, length(prefix) + 1, length($0) - length(prefix) - 1)
      if (op == "INSERT") {
        size = length(body) - names
      } else {
        eq = index(body, "=")
        size = length(body) - (eq - 1) - 2
      }
      if (size < 0) {
        printf "error: cannot size the value on BasicDB line %d\n", NR > "/dev/stderr"
        exit 1
      }
      print op, key, size
    }'
}

emit() { # emit NAME EXPECTED_MIN_LINES: converts stdin into OUT/NAME
  local name="$1" min="$2" lines
  convert | gzip -n -9 >"$out/$name"
  lines="$(gzip -dc "$out/$name" | wc -l)"
  if [ "$lines" -lt "$min" ]; then
    echo "error: $name has $lines lines, expected at least $min" >&2
    exit 1
  fi
  echo "wrote $out/$name ($lines lines)" >&2
}

echo "load phase: $records records" >&2
ycsb -load "${common[@]}" | emit "load-$suffix.tsv.gz" "$records"

for w in $workloads; do
  # read update insert scan readmodifywrite distribution
  case "$w" in
    a) mix=(0.5 0.5 0 0 0 zipfian) ;;
    b) mix=(0.95 0.05 0 0 0 zipfian) ;;
    c) mix=(1 0 0 0 0 zipfian) ;;
    d) mix=(0.95 0 0.05 0 0 latest) ;;
    e) mix=(0 0 0.05 0.95 0 zipfian) ;;
    f) mix=(0.5 0 0 0 0.5 zipfian) ;;
    *) echo "error: unknown workload $w (expected a..f)" >&2; exit 2 ;;
  esac
  echo "run phase of workload $w: $operations operations" >&2
  ycsb -t "${common[@]}" \
    -p readproportion="${mix[0]}" \
    -p updateproportion="${mix[1]}" \
    -p insertproportion="${mix[2]}" \
    -p scanproportion="${mix[3]}" \
    -p readmodifywriteproportion="${mix[4]}" \
    -p requestdistribution="${mix[5]}" \
    -p maxscanlength=100 \
    -p scanlengthdistribution=uniform \
    | emit "run-$w-$suffix.tsv.gz" "$operations"
done
