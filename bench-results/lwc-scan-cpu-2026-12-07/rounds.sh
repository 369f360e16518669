#!/bin/bash
# usage: rounds.sh MODE(pc|dev) OUTDIR
mode=$1; out=$2; mkdir -p $out
if [ $mode = pc ]; then extra="--ops 100000"; else extra="--ops 20000 --memory-limit 128M"; fi
engines=("v2:leveldb" "v2:lwc" "before:lwc")
for r in 0 1 2; do
  for k in 0 1 2; do
    i=$(( (r + k) % 3 )); spec=${engines[$i]}; b=${spec%%:*}; e=${spec##*:}
    name=$( [ $b = before ] && echo lwc-before || echo $e )
    f=$out/round$((r+1))-$((k+1))-$name.txt
    echo "uptime before: $(uptime)" > $f
    echo "command: sepkv bench --engine sepkv:$e --workload fillrandom,readrandom,seekrandom --num 2000000 --value-size 100 $extra --no-progress   (build: $([ $b = before ] && echo 640981a || echo 324e8e2))" >> $f
    ./sepkv-$b bench --engine sepkv:$e --workload fillrandom,readrandom,seekrandom --num 2000000 --value-size 100 $extra --no-progress >> $f 2>&1
    echo "uptime after: $(uptime)" >> $f
    # (machine paths in the saved outputs were then replaced by <temporary directory>)
  done
done
echo finished > $out/DONE
