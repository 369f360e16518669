"""Ratios of cpu/cpu-rounds.txt: for each round, lwc ÷ leveldb of this build
(new) and of the base build's lwc against this build's leveldb, by CPU per
operation (leveldb's CPU ÷ lwc's: above 1 means lwc used less) and by
wall-clock rate; then the medians over the rounds. Also the load's WA and rate
from the bench JSON of each run. usage: ratios.py [cpu]"""
import json, re, statistics, sys, glob
d = sys.argv[1] if len(sys.argv) > 1 else 'cpu'
runs = {}
for line in open(f'{d}/cpu-rounds.txt'):
    m = re.match(r'\S+ round (\d) pos \d (\w+) (\S+): (.*) \[load', line)
    if not m:
        continue
    r, b, e, rest = m.groups()
    kv = dict(x.split('=') for x in rest.split() if '=' in x)
    # The two seekrandom rates: the first and second occurrence.
    seeks = re.findall(r'seekrandom=([\d.]+)', rest)
    kv['seek1'], kv['seek2'] = seeks[0], seeks[1]
    runs[(int(r), b, e)] = {k: float(v) for k, v in kv.items() if k != 'seekrandom'}
rounds = sorted({r for r, _, _ in runs})
rows = [('scan1 CPU', 'scan1_us', True), ('scan2 CPU', 'scan2_us', True), ('get CPU', 'get_us', True),
        ('seek1 rate', 'seek1', False), ('seek2 rate', 'seek2', False), ('get rate', 'readrandom', False),
        ('load rate', 'fillrandom', False)]
for b in ('new', 'base'):
    print(f'lwc of {b} ÷ leveldb of new:')
    for name, key, cpu in rows:
        rs = []
        for r in rounds:
            l, w = runs[(r, 'new', 'leveldb')][key], runs[(r, b, 'lwc')][key]
            rs.append(l / w if cpu else w / l)
        print(f'  {name:<11} ' + ', '.join(f'{x:.2f}' for x in rs) + f'  median {statistics.median(rs):.2f}')
print('merge CPU ms of new lwc (readrandom, seekrandom 1, 2):',
      [(runs[(r, 'new', 'lwc')]['merge_ms_r'], runs[(r, 'new', 'lwc')]['merge_ms_s1'], runs[(r, 'new', 'lwc')]['merge_ms_s2']) for r in rounds])
for f in sorted(glob.glob(f'{d}/bench-*.json')):
    p = json.load(open(f))['phases']
    load = next(x for x in p if x['workload'] == 'fillrandom')
    c = p[-1]['engine_counters']
    print(f"{f.split('/')[-1]:<28} load WA {load['write_amp']:.2f} {load['ops_per_sec']/1e3:.1f} kops/s; "
          f"seek_merges {c.get('seek_merges', '-')}, {c.get('seek_merge_bytes', 0)/1e6:.1f} MB")
