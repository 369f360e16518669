#!/bin/bash
# Three rotated rounds of cpu.sh for three runs: leveldb and lwc of this build
# (sepkv-new, seek merges on by default) and lwc of the base build (sepkv-base,
# which has no seek merges). Order: new leveldb, new lwc, base lwc; then
# starting one later.
out=$1; mkdir -p $out
runs=("new:leveldb" "new:lwc" "base:lwc")
for r in 0 1 2; do
  for k in 0 1 2; do
    spec=${runs[$(( (r + k) % 3 ))]}; b=${spec%%:*}; e=${spec##*:}
    tag=r$((r+1))-$((k+1))-$b-$e
    la=$(cut -d' ' -f1-3 /proc/loadavg)
    res=$(./cpu.sh ./sepkv-$b $e $tag)
    echo "$(date -u +%H:%M:%S) round $((r+1)) pos $((k+1)) $b $e: $res [load before: $la]" >> $out/cpu-rounds.txt
    mv pc-$tag.txt $out/bench-$tag.txt; mv counters-$tag.txt $out/counters-$tag.txt 2>/dev/null; mv pc-$tag.json $out/bench-$tag.json
    rm -f pc-$tag.data pcs-$tag.txt
  done
done
echo finished >> $out/cpu-rounds.txt
