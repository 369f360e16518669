# The samples of the value store's write(2), by the kernel function under
# generic_perform_write / ext4_buffered_write_iter / vfs_write. See ../README.md.
import sys,re,collections
samples=sys.stdin.read().split('\n\n')
c=collections.Counter(); tot=0
for s in samples:
    lines=[l.strip() for l in s.split('\n')[1:] if l.strip()]
    syms=[re.sub(r'^[0-9a-f]+ ','',l) for l in lines]
    syms=[re.sub(r'\+0x[0-9a-f]+.*$','',x).replace(' (inlined)','') for x in syms]
    j=' | '.join(syms)
    if not ('append_values' in j or 'VlogStore::append' in j): continue
    if 'File as std::io::Write>::write' not in j: continue
    tot+=1
    # second-level kernel function under vfs_write / ext4_buffered_write_iter
    ks=[x for x in syms if '([kernel' in x or True]
    names=[x.split(' ')[0] for x in syms]
    # find the frame directly under generic_perform_write or ext4_buffered_write_iter
    key=None
    for i,n in enumerate(names):
        if n in ('generic_perform_write',):
            key='gpw>'+names[i-1] if i>0 else 'gpw'
            break
        if n in ('ext4_buffered_write_iter',):
            key='ebwi>'+names[i-1] if i>0 else 'ebwi'
            break
        if n in ('vfs_write',):
            key='vfs>'+names[i-1] if i>0 else 'vfs'
            break
    if key is None: key='user/syscall entry: '+names[0]
    c[key]+=1
print(tot)
for k,v in c.most_common(20): print(v,k)
