#!/bin/sh
# Main comparison: each build's wisckey against fjall-kv and fjall, three
# rotated rounds each; then the GC-thread-without-nice variant alone.
cd "$(dirname "$0")"
run() { # name binary engines repeat
  uptime > $1.uptime.txt
  nice -n 5 ${BIN:-../../../target/release}/sepkv-$2 bench --engine $3 \
    --workload fillrandom,overwrite --num 500000 --value-size 1000 --repeat $4 \
    --json $1.json --markdown $1.md > $1.txt 2> $1.stderr.txt
  uptime >> $1.uptime.txt
}
run new-a new1 sepkv:wisckey,fjall-kv,fjall 3
run base-a base sepkv:wisckey,fjall-kv,fjall 3
echo main > main-finished
run nonice-a nonice sepkv:wisckey 2
echo done > finished
