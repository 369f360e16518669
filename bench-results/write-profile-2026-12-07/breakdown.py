#!/usr/bin/env python3
"""Per-write CPU breakdown from folded stacks (perf cpu-clock:u, weights in ns)."""
import sys
CATS = [  # (name, frame substrings), first match from the leaf upwards wins
    ("alloc/free", ["malloc", "_int_free", "_int_malloc", "realloc", "cfree", "__libc_free", "malloc_consolidate", "unlink_chunk"]),
    ("memtable insert (skiplist)", ["SkipList::insert", "MemTable::add"]),
    ("hash index insert", ["hash::table::Table", "AddressMemo", "HashIndex::apply", "FlashKeyIndex as sepkv::index::Index>::apply"]),
    ("WAL record", ["RecordWriter", "encode_record", "encode_into"]),
    ("value store append", ["VlogStore", "value_record::encode", "hashkv::", "bands::"]),
    ("write(2) entry (user side)", ["__libc_write", "__GI___libc_write", "pthread_enable_asynccancel", "pthread_disable_asynccancel"]),
    ("crc32c", ["crc32c"]),
    ("batch build/copy", ["WriteBatch", "EntryIter", "memmove", "memcpy"]),
    ("space sampling lookup", ["Index>::get"]),
    ("write path glue", ["DbInner>::write_batch", "separate_values", "log_entries", "write_locked", "Index>::apply", "write_group", "space::"]),
    ("commit queue", ["CommitQueue", "commit::Slot", "yield"]),
]
def cat(frames):
    for f in reversed(frames):
        for name, subs in CATS:
            if any(s in f for s in subs):
                return name
    return "other"
path, ops = sys.argv[1], int(sys.argv[2])
writer, other_threads, per = 0, 0, {}
for line in open(path):
    stack, n = line.rsplit(" ", 1)
    n = int(n)
    frames = stack.split(";")
    if not any("Db>::write" in f or "DbInner>::write" in f for f in frames):
        other_threads += n
        continue
    writer += n
    c = cat(frames)
    per[c] = per.get(c, 0) + n
print(f"writer CPU: {writer/1e3/ops:.2f} us/write; other threads: {other_threads/1e3/ops:.2f} us/write")
for c, n in sorted(per.items(), key=lambda x: -x[1]):
    print(f"  {c:28s} {n/1e3/ops:6.2f} us/write  {100*n/writer:5.1f} %")
