import sys, collections
anchor=sys.argv[2]; depth=int(sys.argv[3]) if len(sys.argv)>3 else 3
tot=0; c=collections.Counter(); leaf=collections.Counter(); allt=0
for line in open(sys.argv[1]):
    st,_,n=line.rstrip().rpartition(' '); n=int(n); allt+=n
    fr=st.split(';')
    idx=[i for i,f in enumerate(fr) if anchor in f]
    if not idx: continue
    i=idx[0]; tot+=n
    c[' > '.join(f[:70] for f in fr[i+1:i+1+depth])]+=n
    leaf[fr[-1][:90]]+=n
print('all',allt,'anchor',tot)
for k,v in c.most_common(40): print(v, k)
print('--- leaves')
for k,v in leaf.most_common(30): print(v,k)
