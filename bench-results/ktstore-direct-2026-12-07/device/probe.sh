#!/bin/bash
# probe.sh ENGINE LEN OPS OUTPREFIX : runs one bench process, samples /sys/block/vda/stat every 0.2 s
e=$1; len=$2; ops=$3; o=$4
bin=${SEPKV_BIN:-target/release/sepkv}
$bin bench --engine "$e" --workload fillrandom,seekrandom --num 250000 --value-size 4096 --scan-length $len --ops $ops --memory-limit 300M --json $o.json > $o.txt 2>&1 &
pid=$!
: > $o.stat
while kill -0 $pid 2>/dev/null; do
  echo "$(date +%s.%N) $(grep -c 'fillrandom/run: [0-9]* ops in' $o.txt) $(cat /sys/block/vda/stat)" >> $o.stat
  sleep 0.2
done
wait $pid
