#!/usr/bin/env python3
"""Per-thread CPU of a perf recording in a time window: perf script text on stdin.
usage: prof.py T0 T1 HZ OPS [top]"""
import sys, re, collections
t0, t1, hz, ops = float(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
top = int(sys.argv[5]) if len(sys.argv) > 5 else 25
hdr = re.compile(r'^\s*(\S.*?)\s+(\d+)\s+([\d.]+):')
samples = []
cur = None
for line in sys.stdin:
    if not line.strip():
        if cur: samples.append(cur)
        cur = None
        continue
    m = hdr.match(line)
    if m and cur is None:
        cur = [m.group(1), float(m.group(3)), []]
        continue
    if cur is not None:
        parts = line.strip().split(None, 1)
        if len(parts) == 2:
            sym = re.sub(r'\s+\(.*\)$', '', parts[1])
            sym = re.sub(r'::h[0-9a-f]{16}$', '', sym)
            cur[2].append(sym)
if cur: samples.append(cur)
win = [s for s in samples if t0 <= s[1] <= t1]
per = collections.Counter(s[0] for s in win)
us = lambda n: n / hz / ops * 1e6
print(f"window {t1-t0:.2f} s, {len(win)} samples; wall per op {(t1-t0)/ops*1e6:.2f} us")
for c, n in per.most_common():
    print(f"  thread {c:12s} {n:6d} samples  {n/hz:7.2f} s CPU  {us(n):6.2f} us/op")
# inclusive frames per thread
KEYS = ['vlog::gc::step','retain_live','points_at_many','relocate_judged','append_as','VlogStore::append','punch_hole','persist_state',
        'memtable','SkipList','skiplist','Wal','wal::','crc32c','commit','CommitQueue','before_write','governor','SpaceGovernor','sample',
        'flush','compaction','Compaction','TableBuilder','table::','read_exact_at','malloc','free','memcpy','memmove','Db::write','write_batch',
        'parking_lot','futex','Condvar','bench','runner','hdrhistogram','rand', 'decode', 'Block', 'block', 'bloom', 'merge', 'MergingIter', 'encode','std::fs','libc','write']
for c, _ in per.most_common():
    ss = [s for s in win if s[0] == c]
    inc = collections.Counter(); selfc = collections.Counter()
    for s in ss:
        if s[2]: selfc[s[2][0][:110]] += 1
        seen = set()
        for f in s[2]:
            for k in KEYS:
                if k in f and k not in seen:
                    seen.add(k); inc[k] += 1
    print(f"\n== {c}: inclusive (us/op)")
    print("  " + ", ".join(f"{k} {us(n):.2f}" for k, n in inc.most_common(30)))
    print(f"== {c}: self top")
    for f, n in selfc.most_common(top):
        print(f"  {us(n):6.3f}  {100*n/len(ss):5.1f}%  {f}")
