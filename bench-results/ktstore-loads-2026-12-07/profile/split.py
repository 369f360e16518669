# Splits the writer thread's samples of `perf script` (dwarf call graphs) by
# part of a put; prints the sample count per part. See ../README.md.
import sys,re,collections
samples=sys.stdin.read().split('\n\n')
c=collections.Counter(); tot=0
pats=[('vstore append: write syscall', r'(VlogStore::append_records|TrieStore::append_values).*'),]
for s in samples:
    lines=[l.strip() for l in s.split('\n')[1:] if l.strip()]
    syms=[re.sub(r'^[0-9a-f]+ ','',l) for l in lines]
    syms=[re.sub(r'\+0x[0-9a-f]+.*$','',x).replace(' (inlined)','') for x in syms]
    j=' | '.join(syms)
    if 'Engine>::put' not in j: 
        continue
    tot+=1
    if 'append_values' in j or 'VlogStore::append' in j:
        if 'File as std::io::Write>::write' in j: k='vstore: write(2)'
        elif 'place_fixed' in j or 'Trie::place' in j: k='vstore: routing'
        elif 'new_table' in j: k='vstore: new table file'
        else: k='vstore: rest'
    elif 'LsmIndex as sepkv::index::Index>::apply' in j:
        if 'File as std::io::Write>::write' in j: k='index: WAL write(2)'
        elif 'MemTable::add' in j: k='index: memtable'
        else: k='index: rest'
    else: k='rest (bench, batch, commit queue)'
    c[k]+=1
print('writer samples', tot)
for k,v in sorted(c.items()): print(f'{v:6d} {k}')
