#!/bin/bash
# fio direct and buffered reads inside a 300 MiB memory cgroup (v1), 8 s each, on a 1 GiB file in TMPDIR. Usage: fio-cgroup.sh OUT_DIR (as root)
set -e
out=$1
par=/sys/fs/cgroup/memory$(grep ':memory:' /proc/self/cgroup | cut -d: -f3)
g=$par/fio-cgroup-$$
mkdir $g
echo $((300<<20)) > $g/memory.limit_in_bytes
dir=$(mktemp -d)
fio --name=mk --filename=$dir/f --size=1G --rw=write --bs=1M --direct=1 --output=/dev/null
run() { # name, args
  bash -c "echo \$\$ > $g/cgroup.procs; exec fio --name=$1 --filename=$dir/f --size=1G --runtime=8 --time_based --rw=read $2 --output=$out/fio-$1.txt" 
  echo "$1: $(grep -o 'READ: bw=[^ ]* ([^)]*)' $out/fio-$1.txt)  $(uptime)"
}
run direct-1m-qd1 "--bs=1M --direct=1 --ioengine=psync"
run buffered-1m-j1 "--bs=1M --direct=0 --ioengine=psync"
run direct-512k-qd1 "--bs=512k --direct=1 --ioengine=psync"
run buffered-512k-j1 "--bs=512k --direct=0 --ioengine=psync"
run direct-1m-qd16 "--bs=1M --direct=1 --ioengine=libaio --iodepth=16"
run buffered-1m-j4 "--bs=1M --direct=0 --ioengine=psync --numjobs=4 --group_reporting"
run direct-512k-j4 "--bs=512k --direct=1 --ioengine=psync --numjobs=4 --group_reporting"
rm -rf $dir
echo $$ > $par/cgroup.procs 2>/dev/null || true
rmdir $g
