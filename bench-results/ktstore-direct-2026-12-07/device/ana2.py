import sys
rows=[l.split() for l in open(sys.argv[1])]
ph=[r for r in rows if r[1]!='0']
f=lambda r,i: int(r[2+i])
T=0;ios=0;sec=0;ticks=0;busy=0;mer=0
for a,b in zip(ph,ph[1:]):
    d=float(b[0])-float(a[0]); s=f(b,2)-f(a,2)
    if s*512/d < 100e6: continue   # idle or non-scan interval
    T+=d; ios+=f(b,0)-f(a,0); sec+=s; ticks+=f(b,3)-f(a,3); busy+=f(b,9)-f(a,9); mer+=f(b,1)-f(a,1)
print(f"active {T:.2f}s: {sec*512/1e6:.0f} MB, {sec*512/1e6/T:.0f} MB/s, {ios} reads avg {sec*512/1e3/max(ios,1):.0f} KB, merges {mer}, latency {ticks/max(ios,1):.2f} ms, util {busy/1000/T:.2f}, avg in flight {ticks/1000/T:.2f}")
