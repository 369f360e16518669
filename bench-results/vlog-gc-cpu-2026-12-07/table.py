"""Medians, ranges and per-round ratios of `sepkv bench --json` files.

python3 table.py main/new-a.json main/base-a.json ...
Prints, per file, workload and engine: kops/s, process WA, SA, writer
stall, and for sepkv the GC thread's CPU per chunk and per record
examined (when the build counts it); then per round `wisckey` over
fjall-kv and over fjall (each round's engines ran side by side).
"""
import json, sys, statistics as st


def load(n):
    d = json.load(open(n))
    return d['phases'] if isinstance(d, dict) else d


def med(xs):
    return st.median(xs), min(xs), max(xs)


for n in sys.argv[1:]:
    ph = load(n)
    print('==', n)
    by = {}
    for r in ph:
        by.setdefault((r['engine'], r['workload']), []).append(r)
    engines = sorted({e for e, _ in by})
    for wl in ['fillrandom', 'overwrite']:
        for eng in engines:
            rs = by.get((eng, wl))
            if not rs:
                continue
            k = [r['ops_per_sec'] / 1e3 for r in rs]
            wa = [r['process_write_amp'] for r in rs]
            sa = [r['space_amp'] for r in rs]
            c = [r.get('engine_counters') or {} for r in rs]
            stall = [x.get('write_stall_micros', 0) / 1e6 for x in c]
            line = (f"{wl:10} {eng:15} kops %6.1f (%.1f-%.1f)  WA %.2f (%.2f-%.2f)  SA %.2f (%.2f-%.2f)  stall s %.2f (%.2f-%.2f)"
                    % (*med(k), *med(wa), *med(sa), *med(stall)))
            ch = [x.get('vstore_gc_chunks', 0) for x in c]
            cpu = [x.get('vstore_gc_cpu_micros', 0) for x in c]
            lk = [x.get('vstore_gc_lookups', 0) for x in c]
            if any(ch) and any(cpu):
                per_chunk = [u / 1e3 / max(h, 1) for u, h in zip(cpu, ch)]
                per_rec = [u / max(l, 1) for u, l in zip(cpu, lk)]
                line += "  GC CPU ms/chunk %.1f (%.1f-%.1f) us/record %.2f" % (*med(per_chunk), st.median(per_rec))
            print(line)
        rounds = sorted(set(r.get('round') for r in ph if r['workload'] == wl))
        for peer in ['fjall-kv', 'fjall']:
            if ('sepkv:wisckey', wl) not in by or (peer, wl) not in by:
                continue
            rat = []
            for rd in rounds:
                a = [r for r in by[('sepkv:wisckey', wl)] if r.get('round') == rd]
                b = [r for r in by[(peer, wl)] if r.get('round') == rd]
                if a and b:
                    rat.append(a[0]['ops_per_sec'] / b[0]['ops_per_sec'])
            if rat:
                print(f"   {wl} wisckey / {peer} per round: " + ', '.join('%.2f' % x for x in rat), ' median %.2f' % st.median(rat))
