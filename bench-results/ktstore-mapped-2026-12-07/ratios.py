# Medians and per-round ratios of a run.sh output folder:
#   python3 ratios.py OUT_DIR
# MB/s = value bytes / the phase's seconds; each round's ratio to `wisckey`
# of the same build and round, and to RocksDB (base build) of the same
# round; new / base per round; WA and SA from each process's table;
# "after" = the process's total seconds less the phase's.
import re, sys, os, statistics, collections
out = sys.argv[1]
rows = collections.defaultdict(dict)   # (build, engine, size) -> round -> MB/s
after = collections.defaultdict(dict)
wa = collections.defaultdict(dict)
sa = collections.defaultdict(dict)
pwa = collections.defaultdict(dict)  # bytes the process dirtied / user bytes
for l in open(os.path.join(out, 'summary.txt')):
    m = re.match(r'round (\d+) (\w+) (\S+) V=(\d+): .* (\d+) ops in ([\d.]+) s .*total ([\d.]+) s', l)
    if not m:
        continue
    r, b, e, v, ops, s, t = m.groups()
    r, v = int(r), int(v)
    rows[(b, e, v)][r] = int(ops) * v / float(s) / 1e6
    after[(b, e, v)][r] = float(t) - float(s)
    name = f"{b}-{e.removeprefix('sepkv:')}-V{v}-r{r}.txt"
    try:
        for line in open(os.path.join(out, name)):
            f = line.split()
            if len(f) > 14 and f[1] == 'fillrandom' and f[2] == 'run':
                wa[(b, e, v)][r] = f[12]
                sa[(b, e, v)][r] = f[14]
    except OSError:
        pass
    try:
        import json
        d = json.load(open(os.path.join(out, name[:-4] + '.json')))[0]
        pwa[(b, e, v)][r] = f"{d['process_write_amp']:.2f}"
    except (OSError, ValueError, KeyError, IndexError, TypeError):
        pass
med = statistics.median
def fmt(xs):
    return ' '.join(f'{x:.2f}' for x in xs)
engines = ['sepkv:ktstore+paper', 'sepkv:wisckey', 'sepkv:ktstore', 'rocksdb']
for v in sorted({k[2] for k in rows}):
    print(f'V={v}')
    for b in ('base', 'new'):
        wk = rows.get((b, 'sepkv:wisckey', v), {})
        rk = rows.get(('base', 'rocksdb', v), {})
        for e in engines:
            d = rows.get((b, e, v), {})
            if not d:
                continue
            rw = [d[r] / wk[r] for r in sorted(d) if r in wk]
            rr = [d[r] / rk[r] for r in sorted(d) if r in rk]
            print(f'  {b:4} {e:20} median {med(d.values()):7.1f} MB/s  rounds {" ".join(f"{d[r]:.0f}" for r in sorted(d))}'
                  f'  / wisckey {fmt(rw)} (median {med(rw) if rw else 0:.2f})'
                  f'  / rocksdb {fmt(rr)} (median {med(rr) if rr else 0:.2f})'
                  f'  WA {" ".join(wa[(b, e, v)].get(r, "-") for r in sorted(d))}'
                  f'  SA {" ".join(sa[(b, e, v)].get(r, "-") for r in sorted(d))}'
                  f'  process WA {" ".join(pwa[(b, e, v)].get(r, "-") for r in sorted(d))}'
                  f'  after s {" ".join(f"{after[(b, e, v)][r]:.1f}" for r in sorted(d))}')
    for e in engines[:3]:
        n = rows.get(('new', e, v), {})
        o = rows.get(('base', e, v), {})
        rr = [n[r] / o[r] for r in sorted(n) if r in o]
        if rr:
            print(f'  new/base {e:20} {fmt(rr)} (median {med(rr):.2f})')
