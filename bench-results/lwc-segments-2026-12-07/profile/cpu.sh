#!/bin/bash
# usage: cpu.sh BINARY ENGINE TAG -> CPU µs per op of readrandom and seekrandom (task-clock samples of 0.5 ms on the phase's stack)
bin=$1; e=$2; tag=$3; shift 3
perf record -q -e task-clock -c 500000 --call-graph dwarf,8192 -o pc-$tag.data $bin bench --engine sepkv:$e --workload fillrandom,readrandom,seekrandom --num 1000000 --ops 200000 --value-size 100 --no-progress "$@" > pc-$tag.txt 2>&1
perf script -i pc-$tag.data -F comm,tid,time,ip,sym 2>/dev/null > pcs-$tag.txt
python3 - pcs-$tag.txt <<'PY'
import sys
r=s=0; cur=False
for line in open(sys.argv[1],errors='replace'):
    if line.strip() and line[0] not in ' \t': cur=True; continue
    if cur and 'read_random' in line: r+=1; cur=False
    elif cur and 'seek_random' in line: s+=1; cur=False
print(f"get_us={r*500/200000:.2f} scan_us={s*500/200000:.2f}", end=' ')
PY
grep -E "^sepkv:.*(readrandom|seekrandom)" pc-$tag.txt | awk '{printf "%s=%s ", $2, $6}'; echo " $e load=$(cut -d' ' -f1 /proc/loadavg)"
