#!/usr/bin/env python3
"""Per-phase GC-room figures of `sepkv bench --json` files (flashkey rows).

Usage: python3 figures.py FILE.json...
Counters are cumulative since open; each phase's figure is the difference
from the phase before. Per phase: WA (process), SA, kops/s; GC steps;
GC copies per user byte; the victims' live share as GC judged it and as the
invalidity table gave it; the bands GC could not take (mean per step: MB,
1 MiB bands, and their invalid MB); the invalid MB GC could take; the band
files per live byte at the picks (the capacity in effect) and the live MB;
steps held by the checkpoint; GC steps run by writers; writers' stall time.
"""
import json
import sys

def lam(op):
    # model victim live share u and copies per user byte for OP (greedy, uniform)
    import math
    a=1+op; z=-a*math.exp(-a)
    w=-0.5
    for _ in range(200): w=w-(w*math.exp(w)-z)/(math.exp(w)*(w+1))
    wa=a/(a+w); return 1-1/wa, wa-1
for f in sys.argv[1:]:
    d=json.load(open(f)); prev={}; eng=None
    for r in d:
        if r['engine']!=eng:
            prev={}; eng=r['engine']
        c=r['engine_counters']; g=lambda k:c.get('vstore_'+k,0)-prev.get('vstore_'+k,0)
        runs=g('gc_runs'); ub=r['user_bytes_written']
        line=f"{f} {r['engine']} {r['phase']}: WA {r.get('process_write_amp') or 0:.2f} SA {r['space_amp']:.2f} kops {r['ops_per_sec']/1e3:.1f}"
        if runs and r['engine'].startswith('sepkv:flashkey'):
            vb=g('gc_victim_bytes')
            line+=(f" | steps {runs} copies/user {g('gc_bytes_rewritten')/ub:.2f} victim live(judged) {g('gc_victim_live')/vb:.3f} live(table) {1-g('gc_victim_invalid')/vb:.3f}"
              f" | held {g('gc_held_bytes')/runs/1e6:.1f}MB ({g('gc_held_bytes')/runs/2**20:.0f} bands) held inval {g('gc_held_invalid')/runs/1e6:.1f}MB collectable inval {g('gc_free_invalid')/runs/1e6:.1f}MB"
              f" | used/live {g('gc_used_bytes')/g('gc_live_bytes'):.3f} live {g('gc_live_bytes')/runs/1e6:.1f}MB heldsteps {g('gc_held_steps')} wgc {c.get('write_gc_steps',0)-prev.get('write_gc_steps',0)} stall_s {(c.get('write_stall_micros',0)-prev.get('write_stall_micros',0))/1e6:.1f}")
        print(line); prev=c

