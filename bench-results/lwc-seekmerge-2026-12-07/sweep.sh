#!/bin/bash
# usage: sweep.sh OUT BINARY ENGINE... : one cpu.sh run per engine, in order.
out=$1; bin=$2; shift 2; mkdir -p $out
for e in "$@"; do
  tag=sw-$e
  la=$(cut -d' ' -f1-3 /proc/loadavg)
  res=$(./cpu.sh $bin $e $tag)
  echo "$(date -u +%H:%M:%S) $e: $res [load before: $la]" >> $out/sweep.txt
  mv pc-$tag.txt $out/bench-$tag.txt; mv counters-$tag.txt $out/counters-$tag.txt; mv pc-$tag.json $out/bench-$tag.json
  rm -f pc-$tag.data pcs-$tag.txt
done
echo finished >> $out/sweep.txt
