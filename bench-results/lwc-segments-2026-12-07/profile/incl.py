import sys, collections
f, phase = sys.argv[1], sys.argv[2]; keys = sys.argv[3:]
ops=200000
c=collections.Counter(); n=0; kern=0
def flush(st):
    global n, kern
    if not st or not any(phase in s for s in st): return
    n+=1
    if st[0].startswith('KERN'): kern+=1
    for k in keys:
        if any((s.replace(' (inlined)','').endswith(k[:-1]) if k.endswith('$') else k in s) for s in st): c[k]+=1
st=[]
for line in open(f, errors='replace'):
    if not line.strip() or line[0] not in ' \t':
        flush(st); st=[]; continue
    p=line.strip().split(' ',1)
    if len(p)==2: st.append(('KERN ' if p[0].startswith('ffffffff') else '')+p[1])
flush(st)
print(f"{'total':60s} {n*500/ops:7.2f} us/op   kernel-leaf {kern*500/ops:.2f}")
for k in keys: print(f"{k[:60]:60s} {c[k]*500/ops:7.2f}")
