#!/bin/bash
# One round at reserve R: the two builds one after the other, in the order given.
# Usage: run-round.sh R TAG ORDER   (ORDER: new-first | base-first)
# NEW = the split build (band_split_lifetime 0.1 through +split0.1), BASE = 4d368400 with the RocksDB peer.
set -u
R=$1; TAG=$2; ORDER=$3
cd "$(dirname "$0")/../.."
OUT=bench-results/fksplit-2026-12-07/scale
NEW="nice -n 5 target/release/sepkv bench --engine sepkv:flashkey+split0.1 --workload update --num 1000000 --value-size 1000 --reserve $R --json $OUT/r$R-$TAG-new.json"
BASE_RF="nice -n 5 target/release/sepkv-base bench --engine rocksdb,sepkv:flashkey --workload update --num 1000000 --value-size 1000 --reserve $R --json $OUT/r$R-$TAG-base.json"
BASE_FR="nice -n 5 target/release/sepkv-base bench --engine sepkv:flashkey,rocksdb --workload update --num 1000000 --value-size 1000 --reserve $R --json $OUT/r$R-$TAG-base.json"
log() { echo "$(date -u +%FT%TZ) r$R $TAG $* | $(cut -d' ' -f1-3 /proc/loadavg)" >> $OUT/runs.log; }
if [ "$ORDER" = new-first ]; then
  log "start new"; $NEW > $OUT/r$R-$TAG-new.out 2>&1; log "end new"
  log "start base (rocksdb, flashkey)"; $BASE_RF > $OUT/r$R-$TAG-base.out 2>&1; log "end base"
else
  log "start base (flashkey, rocksdb)"; $BASE_FR > $OUT/r$R-$TAG-base.out 2>&1; log "end base"
  log "start new"; $NEW > $OUT/r$R-$TAG-new.out 2>&1; log "end new"
fi
