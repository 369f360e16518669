#!/bin/bash
# Device-bound point reads again, base lwc then new lwc (the reverse of
# device.sh's order), one process each.
out=$1; mkdir -p $out
for spec in base:lwc new:lwc; do
  b=${spec%%:*}; e=${spec##*:}
  echo "$(date -u +%H:%M:%S) $b $e before: $(cut -d' ' -f1-3 /proc/loadavg)" >> $out/device-gets.txt
  ./sepkv-$b bench --engine sepkv:$e --workload fillrandom,readrandom \
    --num 2000000 --ops 100000 --value-size 100 --memory-limit 128M --no-progress \
    --json $out/gets-$b-$e.json > $out/gets-$b-$e.txt 2>&1
  echo "$(date -u +%H:%M:%S) $b $e after: $(cut -d' ' -f1-3 /proc/loadavg)" >> $out/device-gets.txt
done
echo finished >> $out/device-gets.txt
