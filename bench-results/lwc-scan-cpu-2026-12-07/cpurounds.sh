#!/bin/bash
# Three rotated rounds of CPU time per operation (task-clock samples of 0.5 ms, attributed to the
# readrandom and seekrandom phases by their call stacks), 1 M x 100 B, 200,000 ops per phase.
out=$1; mkdir -p $out
engines=("v2:leveldb" "v2:lwc" "before:lwc")
for r in 0 1 2; do
  for k in 0 1 2; do
    i=$(( (r + k) % 3 )); spec=${engines[$i]}; b=${spec%%:*}; e=${spec##*:}
    name=$( [ $b = before ] && echo lwc-before || echo $e )
    tag=r$((r+1))-$((k+1))-$name
    la=$(cut -d' ' -f1-3 /proc/loadavg)
    res=$(./cpu.sh $b $e $tag)
    echo "round $((r+1)) pos $((k+1)) $name: $res [load before: $la]" | sed 's| load=[0-9.]*||' >> $out/cpu-rounds.txt
    cp pc-$tag.txt $out/bench-$tag.txt   # machine paths then replaced by <temporary directory>
    rm -f pcs-$tag.txt
  done
done
echo finished > $out/DONE
