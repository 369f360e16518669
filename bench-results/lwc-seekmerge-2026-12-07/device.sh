#!/bin/bash
# One device-bound round: new lwc, base lwc, new leveldb, one process each,
# 2 M x 100 B under a 128 MiB memory limit (page cache included), 100,000
# reads per read phase so that seeks can pass the tables' allowances.
out=$1; mkdir -p $out
for spec in new:lwc base:lwc new:leveldb; do
  b=${spec%%:*}; e=${spec##*:}
  echo "$(date -u +%H:%M:%S) $b $e before: $(cut -d' ' -f1-3 /proc/loadavg)" >> $out/device.txt
  ./sepkv-$b bench --engine sepkv:$e --workload fillrandom,readrandom,seekrandom,seekrandom \
    --num 2000000 --ops 100000 --value-size 100 --memory-limit 128M --no-progress \
    --json $out/device-$b-$e.json > $out/device-$b-$e.txt 2>&1
  echo "$(date -u +%H:%M:%S) $b $e after: $(cut -d' ' -f1-3 /proc/loadavg)" >> $out/device.txt
done
echo finished >> $out/device.txt
