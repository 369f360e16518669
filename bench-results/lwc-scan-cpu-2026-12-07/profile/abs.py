import sys, collections
# absolute µs per op for chosen frames, samples of 0.5 ms task-clock
phase=sys.argv[1]; files=sys.argv[2:]; ops=200000
keys=['DbIterator::seek','DbIterator::next','DTableIterator as sepkv::index::iter::InternalIterator>::seek','LevelIterator as sepkv::index::iter::InternalIterator>::seek','TableIterator as sepkv::index::iter::InternalIterator>::seek','init_data_block','BlockIter::seek','MergingIterator::sift_down','Source::mapped_block','Block::from_bytes','hint_seek','MergingIterator as sepkv::index::iter::InternalIterator>::seek','Scan::advance','SepkvEngine as sepkv_bench::contract::Engine>::scan','clock_gettime','Table::get_filtered','DTable::get_reusing','Version::get_reusing','BloomFilter::may_contain','BlockFilters::may_contain','malloc','_int_free']
res={}
for f in files:
    c=collections.Counter(); st=[]; 
    def fl(st):
        if not st or not any(phase in x for x in st): return
        c['_total']+=1
        for k in keys:
            if any(k in x for x in st): c[k]+=1
    for line in open(f,errors='replace'):
        if not line.strip() or line[0] not in ' \t': fl(st); st=[]; continue
        p=line.strip().split(' ',1)
        if len(p)==2: st.append(p[1])
    fl(st); res[f]=c
print(f"{'frame':70s}"+''.join(f"{f[4:-4]:>16s}" for f in files))
for k in ['_total']+keys:
    print(f"{k[-70:]:70s}"+''.join(f"{res[f][k]*500/ops:16.2f}" for f in files))
