#!/bin/bash
# Three rotated rounds of CPU time per operation (cpu.sh) for four runs:
# leveldb and lwc of this build (sepkv-new) and of the base build (sepkv-base).
out=$1; mkdir -p $out
runs=("new:leveldb" "new:lwc" "base:lwc" "base:leveldb")
for r in 0 1 2; do
  for k in 0 1 2 3; do
    spec=${runs[$(( (r + k) % 4 ))]}; b=${spec%%:*}; e=${spec##*:}
    tag=r$((r+1))-$((k+1))-$b-$e
    la=$(cut -d' ' -f1-3 /proc/loadavg)
    res=$(./cpu.sh ./sepkv-$b $e $tag)
    echo "round $((r+1)) pos $((k+1)) $b $e: $res [load before: $la]" | sed 's| load=[0-9.]*||' >> $out/cpu-rounds.txt
    mv pc-$tag.txt $out/bench-$tag.txt
    rm -f pc-$tag.data pcs-$tag.txt
  done
done
echo finished >> $out/cpu-rounds.txt
