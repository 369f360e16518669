import sys, re, collections
def stacks(path):
    cur=None; frames=[]
    for line in open(path, errors='replace'):
        if not line.strip():
            if cur is not None: yield cur, frames[::-1]
            cur=None; frames=[]; continue
        if not line.startswith((' ','\t')):
            cur=line.split()[0]; frames=[]
        else:
            parts=line.strip().split(' ',1)
            sym=parts[1] if len(parts)>1 else '?'
            sym=re.sub(r'\+0x[0-9a-f]+ \(.*\)$','',sym)
            sym=re.sub(r' \(.*\)$','',sym)
            frames.append(sym)
    if cur is not None: yield cur, frames[::-1]
out=collections.Counter()
for comm, fr in stacks(sys.argv[1]):
    out[comm+';'+';'.join(fr)]+=1
for k,v in out.items(): print(k, v)
