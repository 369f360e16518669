import sys,collections
rows=[]
for l in open(sys.argv[1]):
    if not l.startswith('gcstep'): continue
    parts=l.split(); kv=dict(p.split('=') for p in parts[3:]); rows.append((parts[1],int(parts[2].split('=')[1]),kv))
order=['free0','wait1','read','judge','wait2','append','relocate','durable','advance']
agg=collections.defaultdict(float); n=len(rows)
for th,live,kv in rows:
    prev=0
    for k in order:
        if k in kv: v=int(kv[k]); agg[k]+=v-prev; prev=v
tot=sum(agg.values())
print(sys.argv[1], n, "steps", collections.Counter(r[0] for r in rows), "total s %.2f"%(tot/1e6))
print("  "+"  ".join(f"{k} {agg[k]/n/1000:.1f}" for k in order), " ms/step")
