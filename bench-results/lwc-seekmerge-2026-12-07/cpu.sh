#!/bin/bash
# usage: cpu.sh BINARY ENGINE TAG [bench args...]
# Runs fillrandom, readrandom and two seekrandom phases under perf (task-clock
# samples of 0.5 ms of CPU, DWARF call graphs) and prints, per read phase, the
# foreground CPU µs per operation (samples with the phase's runner frame on
# their stack), the CPU ms of seek merges (samples under run_in_place) that ran
# during the phase or the wait that ends it, and the phases' rates (k ops/s).
bin=$1; e=$2; tag=$3; shift 3
perf record -q -e task-clock -c 500000 --call-graph dwarf,8192 -o pc-$tag.data \
  $bin bench --engine sepkv:$e --workload fillrandom,readrandom,seekrandom,seekrandom \
  --num 1000000 --ops 200000 --value-size 100 --no-progress --json pc-$tag.json "$@" > pc-$tag.txt 2>&1
perf script -i pc-$tag.data -F comm,tid,time,ip,sym 2>/dev/null > pcs-$tag.txt
python3 "$(dirname "$0")/phases.py" pcs-$tag.txt pc-$tag.txt
echo " $e"; python3 "$(dirname "$0")/counters.py" pc-$tag.json > counters-$tag.txt
