"""Per-phase CPU from a `perf script -F comm,tid,time,ip,sym` dump of cpu.sh's run.

usage: phases.py PERF_SCRIPT BENCH_OUTPUT
Prints get_us (foreground CPU µs per readrandom op), scan1_us / scan2_us (per
seek of the first and second seekrandom phase), merge_ms_r / merge_ms_s1 /
merge_ms_s2 (CPU ms of samples under run_in_place, i.e. seek merges, from the
start of the phase to the start of the next), then the bench's rates.
"""
import re, sys

SAMPLE_MS = 0.5
OPS = 200000

samples = []  # (time, kind, tid)
cur_t = None; kind = None; tid = None
def close():
    if cur_t is not None:
        samples.append((cur_t, kind, tid))
for line in open(sys.argv[1], errors='replace'):
    if not line.strip():
        continue
    if line[0] not in ' \t':
        close()
        m = re.search(r'\s(\d+\.\d+):', line)
        cur_t = float(m.group(1)) if m else None
        t = re.match(r'\S+\s+(\d+)\s', line)
        tid = t.group(1) if t else None
        kind = None
        continue
    if kind in ('r', 's'):
        continue
    if 'read_random' in line:
        kind = 'r'
    elif 'seek_random' in line:
        kind = 's'
    elif 'run_in_place' in line:
        kind = 'm'
close()

rates = {}
secs = []
for line in open(sys.argv[2]):
    m = re.match(r'^sepkv:\S+(?:\s+r\d+)?\s+(\w+)\s+run\s+(\d+)\s+([\d.]+)\s+([\d.]+)', line)
    if m:
        secs.append((m.group(1), float(m.group(3)), m.group(4)))
r_times = sorted(t for t, k, _ in samples if k == 'r')
s_times = sorted(t for t, k, _ in samples if k == 's')
seek_secs = [s for w, s, _ in secs if w == 'seekrandom']
r0 = r_times[0] if r_times else 0
s0 = s_times[0] if s_times else 0
# The second seek phase starts after the first one's wall-clock time.
s1_end = s0 + (seek_secs[0] if seek_secs else 0)
s2_0 = next((t for t in s_times if t > s1_end), float('inf'))
out = {}
out['get_us'] = len(r_times) * SAMPLE_MS * 1000 / OPS
out['scan1_us'] = sum(1 for t in s_times if t < s2_0) * SAMPLE_MS * 1000 / OPS
out['scan2_us'] = sum(1 for t in s_times if t >= s2_0) * SAMPLE_MS * 1000 / OPS
m_times = [t for t, k, _ in samples if k == 'm']
out['merge_ms_r'] = sum(1 for t in m_times if r0 <= t < s0) * SAMPLE_MS
out['merge_ms_s1'] = sum(1 for t in m_times if s0 <= t < s2_0) * SAMPLE_MS
out['merge_ms_s2'] = sum(1 for t in m_times if t >= s2_0) * SAMPLE_MS
out['merge_ms_load'] = sum(1 for t in m_times if t < r0) * SAMPLE_MS
# Every sample of another thread than the reads' (the compaction thread: in
# read phases it runs nothing but seek merges), from the start of the phase
# to the start of the next: the merges' CPU whatever their stacks.
fg = {x for t, k, x in samples if k in ('r', 's')}
other = [t for t, k, x in samples if x not in fg]
out['bg_ms_r'] = sum(1 for t in other if r0 <= t < s0) * SAMPLE_MS
out['bg_ms_s1'] = sum(1 for t in other if s0 <= t < s2_0) * SAMPLE_MS
out['bg_ms_s2'] = sum(1 for t in other if t >= s2_0) * SAMPLE_MS
print(' '.join(f'{k}={v:.2f}' for k, v in out.items()), end=' ')
print(' '.join(f'{w}={rate}' for w, _, rate in secs), end='')
