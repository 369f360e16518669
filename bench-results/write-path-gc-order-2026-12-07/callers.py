import sys,re,collections
t0,t1,hz,ops,comm=float(sys.argv[1]),float(sys.argv[2]),float(sys.argv[3]),float(sys.argv[4]),sys.argv[5]
hdr=re.compile(r'^\s*(\S.*?)\s+(\d+)\s+([\d.]+):')
cur=None; c=collections.Counter(); n=0
def done(s):
    global n
    if not s or not (t0<=s[1]<=t1) or s[0]!=comm: return
    fr=s[2]
    if not any('skiplist' in f for f in fr): return
    # path: innermost frames up to first of these callers
    for f in fr:
        for k in ['written_after','points_at_many','relocate_group','insert','apply','get_hashed_from','newest','seek_from','find_ge','insert_counting']:
            pass
    key=' <- '.join(f.split('::')[-1][:30] for f in fr[:9])
    c[key]+=1; n+=1
for line in sys.stdin:
    if not line.strip():
        done(cur); cur=None; continue
    m=hdr.match(line)
    if m and cur is None: cur=[m.group(1),float(m.group(3)),[]]; continue
    if cur is not None:
        p=line.strip().split(None,1)
        if len(p)==2: cur[2].append(re.sub(r'::h[0-9a-f]{16}$','',re.sub(r'\s+\(.*\)$','',p[1])))
done(cur)
print(n/hz/ops*1e6,'us/op')
for k,v in c.most_common(12): print(f"{v/hz/ops*1e6:.3f} {k}")
