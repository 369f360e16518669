#!/bin/bash
# Usage: cpu.sh SEPKV_BIN ENGINE NUM VALUE
# One fillrandom of NUM records of VALUE bytes under `perf sched record`;
# prints the phase's seconds, the writer thread's CPU per put (the thread
# with the most run time) and that of all threads, and the load average.
bin=$1; e=$2; num=$3; v=$4
dir=$(mktemp -d)
perf sched record -o "$dir/sched.data" -- "$bin" bench --engine "$e" --workload fillrandom --num "$num" --value-size "$v" > "$dir/out.txt" 2>&1
phase=$(grep 'fillrandom/run:' "$dir/out.txt" | grep -v '\[' | sed 's/.*ops in \([0-9.]*\) s.*/\1/')
perf sched timehist -i "$dir/sched.data" -s 2>/dev/null | grep -E '^ +sepkv' | awk -v n="$num" -v e="$e" -v ph="$phase" -v la="$(cut -d' ' -f1 /proc/loadavg)" '{rt=$4; tot+=rt; if (rt>max) max=rt} END {printf "%s phase %.2f s writer %.2f us/put  all threads %.2f us/put  load %s\n", e, ph, max*1000/n, tot*1000/n, la}'
rm -rf "$dir"
