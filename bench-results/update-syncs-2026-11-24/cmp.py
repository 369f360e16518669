import json,sys
files=sys.argv[1:]
data={f:json.load(open(f)) for f in files}
rows={}
for f,rs in data.items():
    for r in rs:
        k=(r['engine'],r['phase'])
        lat=r['latency_us']
        rows.setdefault(k,[]).append((r['ops_per_sec']/1e3, lat.get('p99'), lat.get('p99.9') or lat.get('p999'), lat.get('p99.99') or lat.get('p9999'), r['space_amp'], r['write_amp'], r['bytes_written']))
print(list(data[files[0]][0]['latency_us'].keys()))
for k,v in rows.items():
    print(k, ' | '.join('%.1f kops p99 %s p99.9 %s p99.99 %s SA %s WA %s' % x[:6] for x in v))
