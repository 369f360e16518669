#!/usr/bin/env python3
"""Per-phase figures of `sepkv bench --json` files (one flashkey run each).

Usage: python3 figures.py FILE.json...   (figures.txt: base-1 new-1 new-2 base-2)
Counters are cumulative since open; each phase's is the difference from
the phase before.
"""
import json
import sys

for f in sys.argv[1:]:
    d = json.load(open(f)); prev = {}
    for x in d:
        c = x['engine_counters']; g = lambda k: c.get(k, 0) - prev.get(k, 0)
        if x['phase'] != 'load':
            ub = x['user_bytes_written']
            print(f"{f[:-5]} {x['phase']}: kops {x['ops_per_sec']/1e3:.1f} stall_s {g('write_stall_micros')/1e6:.1f}"
                  f" WA {x.get('process_write_amp') or 0:.2f} SA {x['space_amp']:.2f}"
                  f" copies/user {g('vstore_gc_bytes_rewritten')/ub:.2f} bands {g('vstore_gc_runs')}"
                  f" steps {g('vstore_gc_steps') or g('vstore_gc_runs')} writer_gc_steps {g('write_gc_steps')}"
                  f" writer_waits {g('write_gc_waits')} slowdowns {g('space_slowdowns')}")
        prev = c
