#!/bin/bash
# rotated rounds of cpu.sh over engines of one binary; usage: segrounds.sh BIN OUT ROUNDS engine...
bin=$1; out=$2; rounds=$3; shift 3; engines=("$@"); n=${#engines[@]}
for r in $(seq 0 $((rounds-1))); do
  for k in $(seq 0 $((n-1))); do
    e=${engines[$(( (r + k) % n ))]}; tag=seg-r$((r+1))-$((k+1))-$e
    la=$(cut -d' ' -f1-3 /proc/loadavg)
    res=$(./cpu.sh $bin $e $tag)
    echo "round $((r+1)) pos $((k+1)) $e: $res [load before: $la]" | sed 's| load=[0-9.]*||' >> $out
    rm -f pc-$tag.data pcs-$tag.txt
  done
done
echo finished >> $out
