"""Per phase of a --json result: seek merges and the bytes they wrote (as
engine_counters gives them after the phase: totals since open), and segments /
tables of levels 1 and 2. usage: counters.py FILE.json"""
import json, sys
d = json.load(open(sys.argv[1]))
for p in d['phases']:
    c = p.get('engine_counters', {})
    segs = ' '.join(f"L{l}={c.get(f'level{l}_segments',0)}/{c.get(f'level{l}_files',0)}" for l in (1, 2, 3))
    print(f"{p['workload']:<11} seek_merges={c.get('seek_merges','-')} seek_merge_MB={c.get('seek_merge_bytes',0)/1e6:.1f} "
          f"compaction_out_MB={c.get('compaction_bytes_out',0)/1e6:.1f} WA={p.get('write_amp') or 0:.2f} segments/tables {segs}")
