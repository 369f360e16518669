# Medians and per-round ratios of a run.sh summary: python3 ratios.py summary.txt
import re,sys,statistics,collections
rows=collections.defaultdict(dict)  # (build,engine,size) -> round -> MB/s
tot=collections.defaultdict(dict)
for l in open(sys.argv[1]):
    m=re.match(r'round (\d+) (\w+) (\S+) V=(\d+): .* (\d+) ops in ([\d.]+) s .*total ([\d.]+) s',l)
    if not m: continue
    r,b,e,v,ops,s,t=m.groups()
    mbs=int(ops)*int(v)/float(s)/1e6
    rows[(b,e,int(v))][int(r)]=mbs
    tot[(b,e,int(v))][int(r)]=float(t)-float(s)
for v in (1024,4096,16384):
    print(f'V={v}')
    for b in ('base','new'):
        wk=rows.get((b,'sepkv:wisckey',v),{})
        for e in ('sepkv:wisckey','sepkv:ktstore+paper','sepkv:ktstore'):
            d=rows.get((b,e,v),{})
            if not d: continue
            ratios=[d[r]/wk[r] for r in sorted(d) if r in wk]
            print(f'  {b:4} {e:20} median {statistics.median(d.values()):7.1f} MB/s  rounds {" ".join(f"{d[r]:.0f}" for r in sorted(d))}  vs wisckey same build/round {" ".join(f"{x:.2f}" for x in ratios)} (median {statistics.median(ratios) if ratios else 0:.2f})  after-phase s {" ".join(f"{tot[(b,e,v)][r]:.1f}" for r in sorted(d))}')
    for e in ('sepkv:wisckey','sepkv:ktstore+paper','sepkv:ktstore'):
        n=rows.get(('new',e,v),{}); o=rows.get(('base',e,v),{})
        rr=[n[r]/o[r] for r in sorted(n) if r in o]
        if rr: print(f'  new/base {e:20} {" ".join(f"{x:.2f}" for x in rr)} (median {statistics.median(rr):.2f})')
