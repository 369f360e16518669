import sys, collections
f, phase, frame = sys.argv[1], sys.argv[2], sys.argv[3]
c=collections.Counter(); n=0
def flush(st):
    global n
    if not st or not any(phase in s for s in st): return
    for i,s in enumerate(st):
        if frame in s:
            n+=1; c[st[0][:120]]+=1; return
st=[]
for line in open(f, errors='replace'):
    if not line.strip() or line[0] not in ' \t':
        flush(st); st=[]; continue
    p=line.strip().split(' ',1)
    if len(p)==2: st.append(p[1])
flush(st)
print(frame, n*500/200000, "us/op")
for k,v in c.most_common(12): print(f"{v*500/200000:6.2f} {k}")
