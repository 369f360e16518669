//! Version edits: the records of the manifest.
//!
//! A version edit describes the change from one version of the LSM-tree to
//! the next: files added to and removed from levels, plus the counters that
//! must survive a restart.
//!
//! ```text
//! edit  := field*
//! field := tag:varint32 body
//!   1 log_number        varint64   WALs older than this are obsolete
//!   2 next_file_number  varint64
//!   3 last_sequence     varint64
//!   4 compact_pointer   varint32 level, lenprefixed internal key
//!   5 deleted_file      varint32 level, varint64 number
//!   6 new_file          varint32 level, varint64 number, varint64 size,
//!                       lenprefixed smallest, lenprefixed largest
//!   7 value_store_state lenprefixed bytes (the layout's GC state, e.g. the
//!                       vLog tail)
//!   8 value_store_garbage lenprefixed bytes (the layout's garbage estimate
//!                       per file, [`crate::vstore::garbage`]; added after
//!                       the first release: older readers refuse tag 8)
//!   9 table_counts      varint64 number, varint64 entries,
//!                       varint64 deletions, varint64 shadowed,
//!                       varint64 largest_seq ([`TableCounts`] of a
//!                       file added by this edit or an earlier one; added
//!                       after the first release: older readers refuse
//!                       tag 9)
//! ```
//! Each edit is one checksummed record of [`crate::format::record`].
//! Frozen: format version 1.

use crate::format::coding::*;
use crate::index::key::parse_internal_key;

/// An SSTable as the manifest knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileMeta {
    /// File number (`NNNNNN.sst`).
    pub number: u64,
    /// Size in bytes.
    pub size: u64,
    /// Smallest internal key.
    pub smallest: Vec<u8>,
    /// Largest internal key.
    pub largest: Vec<u8>,
}

/// What an SSTable holds, counted by the flush or compaction that wrote
/// it: the compaction picker's measure of the garbage a rewrite would drop
/// (tombstones and versions a newer entry of the table shadows), without
/// opening the table. Tables written before the counts existed, and those
/// a repair or a lightweight compaction wrote, have none.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TableCounts {
    /// Entries in the table.
    pub entries: u64,
    /// Entries that are tombstones.
    pub deletions: u64,
    /// Entries with a newer entry of the same user key in the table.
    pub shadowed: u64,
    /// The largest sequence number of any entry (0 for an empty table).
    pub largest_seq: u64,
}

impl TableCounts {
    /// Counts one more entry, written after every entry counted so far (in
    /// internal-key order): `same_key` when the entry before it has the
    /// same user key, which then shadows this one.
    pub fn add(&mut self, deletion: bool, same_key: bool, seq: u64) {
        self.entries += 1;
        self.deletions += u64::from(deletion);
        self.shadowed += u64::from(same_key);
        self.largest_seq = self.largest_seq.max(seq);
    }

    /// Entries a rewrite with nothing below and no snapshot in the way
    /// drops: the tombstones and the shadowed versions (a tombstone that
    /// is shadowed is counted once).
    pub fn garbage(&self) -> u64 {
        self.deletions
            .saturating_add(self.shadowed)
            .min(self.entries)
    }
}

/// A change to a version.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VersionEdit {
    /// New log number.
    pub log_number: Option<u64>,
    /// New next file number.
    pub next_file_number: Option<u64>,
    /// New last sequence.
    pub last_sequence: Option<u64>,
    /// Round-robin compaction cursors: (level, internal key).
    pub compact_pointers: Vec<(usize, Vec<u8>)>,
    /// Removed files: (level, number).
    pub deleted: Vec<(usize, u64)>,
    /// Added files: (level, meta).
    pub added: Vec<(usize, FileMeta)>,
    /// New value-store state.
    pub value_store_state: Option<Vec<u8>>,
    /// New value-store garbage table.
    pub value_store_garbage: Option<Vec<u8>>,
    /// Counts of added files: (file number, counts).
    pub table_counts: Vec<(u64, TableCounts)>,
}

impl VersionEdit {
    /// Encodes the edit.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::new();
        if let Some(v) = self.log_number {
            put_varint32(&mut b, 1);
            put_varint64(&mut b, v);
        }
        if let Some(v) = self.next_file_number {
            put_varint32(&mut b, 2);
            put_varint64(&mut b, v);
        }
        if let Some(v) = self.last_sequence {
            put_varint32(&mut b, 3);
            put_varint64(&mut b, v);
        }
        for (l, k) in &self.compact_pointers {
            put_varint32(&mut b, 4);
            put_varint32(&mut b, *l as u32);
            put_length_prefixed(&mut b, k);
        }
        for (l, n) in &self.deleted {
            put_varint32(&mut b, 5);
            put_varint32(&mut b, *l as u32);
            put_varint64(&mut b, *n);
        }
        if let Some(st) = &self.value_store_state {
            put_varint32(&mut b, 7);
            put_length_prefixed(&mut b, st);
        }
        if let Some(g) = &self.value_store_garbage {
            put_varint32(&mut b, 8);
            put_length_prefixed(&mut b, g);
        }
        for (l, f) in &self.added {
            put_varint32(&mut b, 6);
            put_varint32(&mut b, *l as u32);
            put_varint64(&mut b, f.number);
            put_varint64(&mut b, f.size);
            put_length_prefixed(&mut b, &f.smallest);
            put_length_prefixed(&mut b, &f.largest);
        }
        for (n, c) in &self.table_counts {
            put_varint32(&mut b, 9);
            for x in [*n, c.entries, c.deletions, c.shadowed, c.largest_seq] {
                put_varint64(&mut b, x);
            }
        }
        b
    }

    /// Decodes an edit; `Err(reason)` when malformed.
    pub fn decode(mut src: &[u8]) -> Result<VersionEdit, String> {
        let mut e = VersionEdit::default();
        let s = &mut src;
        let ikey = |k: &[u8]| -> Result<Vec<u8>, String> {
            parse_internal_key(k).ok_or("malformed internal key")?;
            Ok(k.to_vec())
        };
        while !s.is_empty() {
            let tag = get_varint32(s).ok_or("bad tag")?;
            match tag {
                1 => e.log_number = Some(get_varint64(s).ok_or("bad log number")?),
                2 => e.next_file_number = Some(get_varint64(s).ok_or("bad next file number")?),
                3 => e.last_sequence = Some(get_varint64(s).ok_or("bad last sequence")?),
                4 => {
                    let l = get_varint32(s).ok_or("bad level")? as usize;
                    let k = get_length_prefixed(s).ok_or("bad compact pointer")?;
                    e.compact_pointers.push((l, ikey(k)?));
                }
                5 => {
                    let l = get_varint32(s).ok_or("bad level")? as usize;
                    e.deleted
                        .push((l, get_varint64(s).ok_or("bad file number")?));
                }
                6 => {
                    let l = get_varint32(s).ok_or("bad level")? as usize;
                    let number = get_varint64(s).ok_or("bad file number")?;
                    let size = get_varint64(s).ok_or("bad file size")?;
                    let smallest = ikey(get_length_prefixed(s).ok_or("bad smallest key")?)?;
                    let largest = ikey(get_length_prefixed(s).ok_or("bad largest key")?)?;
                    e.added.push((
                        l,
                        FileMeta {
                            number,
                            size,
                            smallest,
                            largest,
                        },
                    ));
                }
                7 => {
                    let st = get_length_prefixed(s).ok_or("bad value-store state")?;
                    e.value_store_state = Some(st.to_vec());
                }
                8 => {
                    let g = get_length_prefixed(s).ok_or("bad value-store garbage table")?;
                    e.value_store_garbage = Some(g.to_vec());
                }
                9 => {
                    let mut x = [0u64; 5];
                    for v in &mut x {
                        *v = get_varint64(s).ok_or("bad table counts")?;
                    }
                    let c = TableCounts {
                        entries: x[1],
                        deletions: x[2],
                        shadowed: x[3],
                        largest_seq: x[4],
                    };
                    if c.deletions > c.entries || c.shadowed > c.entries {
                        return Err("table counts out of range".into());
                    }
                    e.table_counts.push((x[0], c));
                }
                t => return Err(format!("unknown tag {t}")),
            }
        }
        Ok(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::key::{internal_key, ValueType};

    #[test]
    fn roundtrip_and_garbage() {
        let e = VersionEdit {
            log_number: Some(3),
            next_file_number: Some(9),
            last_sequence: Some(1000),
            value_store_state: Some(vec![1, 2, 3]),
            value_store_garbage: Some(vec![1, 0]),
            compact_pointers: vec![(1, internal_key(b"m", 5, ValueType::Value))],
            deleted: vec![(0, 4), (1, 5)],
            added: vec![(
                1,
                FileMeta {
                    number: 8,
                    size: 4096,
                    smallest: internal_key(b"a", 1, ValueType::Value),
                    largest: internal_key(b"z", 2, ValueType::Deletion),
                },
            )],
            table_counts: vec![(
                8,
                TableCounts {
                    entries: 10,
                    deletions: 4,
                    shadowed: 3,
                    largest_seq: 999,
                },
            )],
        };
        assert_eq!(VersionEdit::decode(&e.encode()).unwrap(), e);
        let enc = e.encode();
        for cut in 0..enc.len() {
            let _ = VersionEdit::decode(&enc[..cut]);
        }
        assert!(VersionEdit::decode(&[99]).is_err());
    }
}
