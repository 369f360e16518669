import json,sys
for n in sys.argv[1:]:
    d=json.load(open(n)); d=d.get('phases', d) if isinstance(d,dict) else d
    for r in d:
        if r['workload']!='overwrite': continue
        if 'fjall' in r['engine']: continue
        c=r['engine_counters']
        g=lambda k: c.get(k,0)
        print(r['engine'], r.get('round'), 'kops %.1f'%(r['ops_per_sec']/1e3), 'WA %.2f SA %.2f'%(r['write_amp'], r['space_amp']),
          'est', g('space_amp_estimate_milli'), 'stall s %.2f stop s %.2f'%(g('write_stall_micros')/1e6, g('write_stop_micros')/1e6),
          'stops', g('space_stops'), 'slow', g('space_slowdowns'), 'disc', g('space_discoveries'), 'steps', g('vstore_gc_runs'), 'chunks', g('vstore_gc_chunks'), 'syncr', g('vstore_gc_sync_rounds'),
          'gcread %.0f rew %.0f freed %.0f'%(g('vstore_gc_bytes_read')/1e6, g('vstore_gc_bytes_rewritten')/1e6, g('vstore_gc_bytes_freed')/1e6),
          'maxstep ms %.0f'%(g('gc_step_micros_max')/1e3))
        ch=max(g('vstore_gc_chunks'),1); sr=max(g('vstore_gc_sync_rounds'),1)
        if g('vstore_gc_chunks'):
          print('   per chunk ms: judge %.1f reloc %.1f | per round sync %.1f free %.1f'%(g('vstore_gc_judge_micros')/ch/1e3, g('vstore_gc_relocate_micros')/ch/1e3, g('vstore_gc_sync_micros')/sr/1e3, g('vstore_gc_free_micros')/sr/1e3),
          'GC busy s %.2f'%((g('vstore_gc_judge_micros')+g('vstore_gc_relocate_micros')+g('vstore_gc_sync_micros')+g('vstore_gc_free_micros'))/1e6))
