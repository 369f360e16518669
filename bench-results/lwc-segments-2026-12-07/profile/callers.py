import sys, collections, re
# For samples whose stack contains PHASE: count (caller sym+off) of frames matching CHILD
f, phase, child = sys.argv[1], sys.argv[2], sys.argv[3]
c = collections.Counter(); n=0
def flush(st):
    global n
    if not st or not any(phase in s for _,s in st): return
    n+=1
    for i,(a,s) in enumerate(st):
        if child in s and i+1 < len(st):
            c[(st[i+1][0], st[i+1][1][:110])]+=1
            break
st=[]
for line in open(f, errors='replace'):
    if not line.strip() or line[0] not in ' \t':
        flush(st); st=[]; continue
    p=line.strip().split(' ',1)
    if len(p)==2: st.append((p[0], p[1]))
flush(st)
print("samples", n)
for k,v in c.most_common(15): print(f"{v:6d} {100*v/n:5.1f}% {k[0]} {k[1]}")
