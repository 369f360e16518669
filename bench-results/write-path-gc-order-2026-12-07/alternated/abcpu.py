import json,collections,sys
for r in (1,2,3):
  for b in ('base','new'):
    t=f'ab2-{b}-{r}'
    last={0:{},1:{},2:{}}; comm={}
    for l in open(t+'.cpu'):
        ph,tid,c,u,s=l.split(); last[int(ph)][tid]=(int(u),int(s)); comm[tid]=c
    per=collections.defaultdict(lambda:[0,0])
    for tid,(u,s) in last[1].items():
        u0,s0=last[0].get(tid,(0,0))
        u1,s1=last[2].get(tid,(u,s))
        per[comm[tid]][0]+=u1-u0; per[comm[tid]][1]+=s1-s0
    ow=json.load(open(t+'.json'))[1]
    s='  '.join(f"{k} {v[0]*10000/500000:.2f}+{v[1]*10000/500000:.2f}" for k,v in sorted(per.items()) if sum(v)>0)
    print(t, f"{ow['ops_per_sec']/1000:.1f} kops/s |", s, '| load', open(t+'.uptime').read().split('average:')[1].split(',')[0].strip())
