#!/bin/bash
# One device-bound round: 2 M x 100 B under a 128 MiB memory limit (page cache included), one process per run.
out=$1; mkdir -p $out
for spec in new:lwc base:lwc new:leveldb; do
  b=${spec%%:*}; e=${spec##*:}
  f=$out/$b-$e.txt
  echo "uptime before: $(uptime)" > $f
  ./sepkv-$b bench --engine sepkv:$e --workload fillrandom,readrandom,seekrandom --num 2000000 --ops 20000 --value-size 100 --memory-limit 128M --no-progress >> $f 2>&1
  echo "uptime after: $(uptime)" >> $f
done
echo finished > $out/DONE
