import json,sys,glob,os,re
# usage: table.py RUNDIR : MB/s of each seekrandom phase, ratios to fio (depth 1 before), wisckey, rocksdb
d=sys.argv[1]
fio=None
for l in open(os.path.join(d,'summary-scans.txt')):
    m=re.search(r'fio before: .*queue depth 1: READ: bw=\S+ \((\d+)MB/s\)',l)
    if m: fio=int(m.group(1))
rows={}
for f in sorted(glob.glob(os.path.join(d,'*.json'))):
    for ph in json.load(open(f)):
        if ph['workload']!='seekrandom': continue
        name=os.path.basename(f)[:-5]
        eng,L=name.rsplit('-L',1)
        mb=ph['user_bytes_read']/ph['seconds']/1e6
        ra=ph['process_io']['read_bytes']/ph['user_bytes_read'] if ph.get('process_io') else float('nan')
        c=ph.get('engine_counters') or {}
        rows.setdefault(int(L),{})[eng]=(mb,ra,c.get('vstore_span_direct_reads'),c.get('vstore_span_reads'))
print('fio depth 1 before:',fio)
for L in sorted(rows):
    r=rows[L]
    w=r.get('wisckey',(None,))[0]; rk=r.get('rocksdb',(None,))[0]
    for e,(mb,ra,dr,sr) in r.items():
        print(f"L={L} {e:18s} {mb:7.0f} MB/s  xfio {mb/fio:.2f}  xwisckey {mb/w if w else 0:.2f}  xrocksdb {mb/rk if rk else 0:.2f}  storageRA {ra:.2f}  direct/span reads {dr}/{sr}")
