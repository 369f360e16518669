import json,sys,statistics as st
def load(n):
    d=json.load(open(n)); return d['phases'] if isinstance(d,dict) else d
for n in sys.argv[1:]:
    ph=load(n)
    print('==',n)
    by={}
    for r in ph:
        by.setdefault((r['engine'],r['workload']),[]).append(r)
    for wl in ['fillrandom','overwrite']:
        for eng in ['sepkv:wisckey','sepkv:wisckey+nowal','fjall-kv']:
            rs=by[(eng,wl)]
            k=[r['ops_per_sec']/1e3 for r in rs]
            wa=[r['process_write_amp'] for r in rs]; sa=[r['space_amp'] for r in rs]
            c=[r['engine_counters'] for r in rs]
            stall=[x.get('write_stall_micros',0)/1e6 for x in c]
            mx=[r['latency_us']['max']/1e3 for r in rs]
            p99=[r['latency_us']['p99'] for r in rs]
            print(f"{wl:10} {eng:20} kops {st.median(k):6.1f} ({min(k):.1f}-{max(k):.1f})  WA {st.median(wa):.2f} ({min(wa):.2f}-{max(wa):.2f}) SA {st.median(sa):.2f} ({min(sa):.2f}-{max(sa):.2f}) stall s {st.median(stall):.2f} ({min(stall):.2f}-{max(stall):.2f}) max ms {st.median(mx):.0f} ({min(mx):.0f}-{max(mx):.0f}) p99us {st.median(p99):.0f}")
        # per round ratios
        rounds=sorted(set(r.get('round') for r in ph))
        for eng in ['sepkv:wisckey','sepkv:wisckey+nowal']:
            rat=[]
            for rd in rounds:
                a=[r for r in by[(eng,wl)] if r.get('round')==rd][0]['ops_per_sec']
                b=[r for r in by[('fjall-kv',wl)] if r.get('round')==rd][0]['ops_per_sec']
                rat.append(a/b)
            print(f"   {wl} {eng} / fjall-kv per round: "+', '.join('%.2f'%x for x in rat), ' median %.2f'%st.median(rat))
