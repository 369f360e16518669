import sys, collections, re
phase = sys.argv[2]
self_c = collections.Counter(); incl = collections.Counter(); n=0
def flush(stack):
    global n
    if not stack or not any(phase in f for f in stack): return
    n+=1
    self_c[stack[0]]+=1
    for f in set(stack): incl[f]+=1
stack=[]
for line in open(sys.argv[1], errors='replace'):
    if not line.strip():
        flush(stack); stack=[]; continue
    if line[0] not in ' \t':
        flush(stack); stack=[]; continue
    parts=line.strip().split(' ',1)
    if len(parts)==2:
        s=re.sub(r' \(inlined\)$','',parts[1]); s=re.sub(r'<[^<>]*>','<>',s) if len(s)>120 else s
        stack.append(s)
flush(stack)
print("samples", n)
print("-- self"); 
for s,c in self_c.most_common(int(sys.argv[3]) if len(sys.argv)>3 else 30): print(f"{100*c/n:6.1f}% {s[:150]}")
print("-- inclusive")
for s,c in incl.most_common(80):
    if 'sepkv' in s or 'crc' in s or 'mem' in s: print(f"{100*c/n:6.1f}% {s[:150]}")
