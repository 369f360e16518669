import sys,glob,os,re,statistics
d=sys.argv[1]; ops=int(sys.argv[2])
rows={}
for f in sorted(glob.glob(d+'/round*.txt')):
    m=re.match(r'round(\d)-(\d)-(.*)\.txt',os.path.basename(f)); r,pos,name=int(m[1]),int(m[2]),m[3]
    t=open(f).read(); la=re.search(r'load average: ([\d.]+)',t)[1]
    v={}
    rates={m[1]:float(m[2]) for m in re.finditer(r'(\w+)/run: \d+ ops in [\d.]+ s \((\d+) ops/s\)',t)}
    for line in t.splitlines():
        p=line.split()
        if line.startswith('sepkv:') and len(p)>10 and p[2]=='run':
            v[p[1]]=(rates.get(p[1],float(p[5])*1e3), float(p[-4])*1e6/ops/1e3)
    rows[(r,name)]=(pos,la,v)
for w in ['readrandom','seekrandom']:
    print(f"== {w}: ops/s (block KB per op) [load] by round")
    ratios={'lwc':[],'lwc-before':[]}
    for r in (1,2,3):
        base=rows.get((r,'leveldb'))
        line=f"round {r}: "
        for name in ['leveldb','lwc','lwc-before']:
            x=rows.get((r,name))
            if not x or w not in x[2]: line+=f"{name}=? "; continue
            k,kb=x[2][w]; line+=f"{name}#{x[0]}={k:,.0f}/s ({kb:.1f} KB) [{x[1]}]  "
            if name!='leveldb' and base and w in base[2]: ratios[name].append(k/base[2][w][0])
        print(line)
    for n,l in ratios.items():
        if l: print(f"  {n} / leveldb per round: {', '.join(f'{x:.2f}' for x in l)}; median {statistics.median(l):.2f}")
