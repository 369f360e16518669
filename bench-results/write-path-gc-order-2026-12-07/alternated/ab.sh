#!/bin/bash
# usage: ab.sh BIN TAG — wisckey fill+overwrite 500k; every 0.1 s: phase, tid, comm, utime, stime (ticks)
bin=$1; tag=$2
uptime > $tag.uptime
: > $tag.err
./$bin bench --engine sepkv:wisckey --workload fillrandom,overwrite --num 500000 --value-size 1000 --no-settle --json $tag.json > $tag.txt 2> $tag.err &
pid=$!
phase=0
: > $tag.cpu
while kill -0 $pid 2>/dev/null; do
  [ $phase = 0 ] && grep -q "fillrandom/run: 500000 ops in" $tag.err && phase=1
  [ $phase = 1 ] && grep -q "overwrite/run: 500000 ops in" $tag.err && phase=2
  for s in /proc/$pid/task/*/stat; do l=$(cat $s 2>/dev/null) || continue; c=${l#*(}; c=${c%%)*}; r=${l#*) }; set -- $r; t=${s%/stat}; echo "$phase ${t##*/} $c ${12} ${13}"; done >> $tag.cpu
  sleep 0.1
done
uptime >> $tag.uptime
