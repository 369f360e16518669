#!/bin/sh
# Alternates builds: each run loads 500k x 1000 B and overwrites them once.
cd "$(dirname "$0")"
for r in 1 2; do
  for b in basecpu new1; do
    [ $r = 2 ] && { [ $b = basecpu ] && b=new1 || b=basecpu; }
    uptime > $b-$r.uptime
    nice -n 5 /usr/bin/time -f "%U user %S sys %e wall" ${BIN:-../../../target/release}/sepkv-$b bench --engine sepkv:wisckey --workload fillrandom,overwrite --num 500000 --value-size 1000 --no-progress --json $b-$r.json > $b-$r.txt 2> $b-$r.err
  done
done
echo done > finished
