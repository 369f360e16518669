//! The garbage table: how many bytes of each value file (a value-log file,
//! a segment group, a TrieTable) are known to be garbage, in a form the
//! manifest can carry across restarts.
//!
//! Compaction learns that a value became garbage when it drops the last
//! pointer to it ([`super::ValueStore::note_garbage`]). Titan and BlobDB
//! keep such discardable-byte counts per blob file in their manifest; so
//! does sepkv: the engine records the table ([`super::ValueStore::garbage_table`])
//! in every manifest edit it writes, taken under the manifest lock, and hands
//! the last one back at open ([`super::ValueStore::restore_garbage_table`]).
//! Because a compaction's edit carries the counts its own drops added, a
//! crash either keeps both (the edit is durable) or neither (the compaction
//! runs again and notes them again), so nothing is counted twice.
//!
//! ```text
//! table   := version:u8=1 nsections:varint section*
//! section := nentries:varint (id:varint garbage_bytes:varint)*
//! ```
//! A layout decides what its sections and ids are: the value log has one
//! section keyed by file and region (`file << 26 | region`); HashKV one
//! keyed by group index, one for its cold data log's regions, and one for
//! the cold log's garbage its GC inferred from superseded tags (a table
//! without it restores none); the trie layout one keyed by table id. The
//! manifest record around it is checksummed.

use crate::format::coding::{get_varint64, put_varint64};

/// Largest id or byte count an entry may hold (2^48, as elsewhere in the
/// persisted state): larger is damage.
const MAX: u64 = 1 << 48;

/// Encodes `sections` of `(id, garbage bytes)` pairs; entries with no
/// garbage are left out.
pub fn encode(sections: &[Vec<(u64, u64)>]) -> Vec<u8> {
    let mut v = vec![1u8];
    put_varint64(&mut v, sections.len() as u64);
    for s in sections {
        let n = s.iter().filter(|e| e.1 > 0).count();
        put_varint64(&mut v, n as u64);
        for &(id, g) in s.iter().filter(|e| e.1 > 0) {
            put_varint64(&mut v, id);
            put_varint64(&mut v, g);
        }
    }
    v
}

/// Decodes a table; `None` when malformed (unknown version, counts that
/// the bytes cannot hold, values past 2^48, trailing bytes).
pub fn decode(b: &[u8]) -> Option<Vec<Vec<(u64, u64)>>> {
    let (&version, mut src) = b.split_first()?;
    if version != 1 {
        return None;
    }
    let n = get_varint64(&mut src)?;
    // Every section takes at least one byte, every entry two.
    if n > src.len() as u64 {
        return None;
    }
    let mut out = Vec::with_capacity(n as usize);
    for _ in 0..n {
        let m = get_varint64(&mut src)?;
        if m > src.len() as u64 / 2 {
            return None;
        }
        let mut s = Vec::with_capacity(m as usize);
        for _ in 0..m {
            let id = get_varint64(&mut src)?;
            let g = get_varint64(&mut src)?;
            if id > MAX || g > MAX {
                return None;
            }
            s.push((id, g));
        }
        out.push(s);
    }
    src.is_empty().then_some(out)
}

/// The `Corruption` error for a garbage table that does not decode.
pub fn corrupt(dir: &std::path::Path) -> crate::Error {
    crate::Error::corruption(dir.join("MANIFEST"), 0, "bad value-store garbage table")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::{FileSystem, IoStats, MemFs};
    use crate::vstore::{HashKvStore, TrieStore, ValuePointer, ValueRecord, ValueStore, VlogStore};
    use std::path::Path;
    use std::sync::Arc;

    /// Appends 3 × 40 values of 500 bytes over 40 keys, notes the first two
    /// rounds as garbage, reopens the store from `reopen` and checks that
    /// the restored table reports the same garbage per file and in total.
    fn survives_reopen(open: &dyn Fn(Arc<dyn FileSystem>) -> Box<dyn ValueStore>) {
        let fs: Arc<dyn FileSystem> = Arc::new(MemFs::new());
        fs.create_dir_all(Path::new("/db")).unwrap();
        let store = open(fs.clone());
        let value = vec![7u8; 500];
        let keys: Vec<Vec<u8>> = (0..40).map(|i| format!("key{i:04}").into_bytes()).collect();
        let mut old: Vec<ValuePointer> = Vec::new();
        for round in 0..3u64 {
            let recs: Vec<ValueRecord<'_>> = keys
                .iter()
                .enumerate()
                .map(|(i, k)| ValueRecord {
                    key: k,
                    seq: round * 100 + i as u64 + 1,
                    value: &value,
                })
                .collect();
            let ptrs = store.append(&recs).unwrap();
            if round < 2 {
                old.extend(ptrs);
            }
        }
        store.sync().unwrap();
        for p in &old {
            store.note_garbage(p);
        }
        let before = store.space();
        let noted: u64 = old.iter().map(|p| p.length as u64).sum();
        assert_eq!(before.garbage_bytes, noted, "{}", store.name());
        let table = store.garbage_table().expect("the layout keeps a table");
        drop(store);

        let fresh = open(fs.clone());
        assert_eq!(fresh.space().garbage_bytes, 0, "estimates start at zero");
        fresh.restore_garbage_table(&table).unwrap();
        assert_eq!(
            fresh.space().garbage_bytes,
            before.garbage_bytes,
            "{}",
            fresh.name()
        );
        assert_eq!(
            fresh.space().live_bytes,
            before.live_bytes,
            "{}",
            fresh.name()
        );
        assert_eq!(fresh.garbage_table(), Some(table), "{}", fresh.name());
        // Damage is refused, not taken for zero.
        assert!(matches!(
            fresh.restore_garbage_table(&[9, 9]),
            Err(crate::Error::Corruption { .. })
        ));
    }

    #[test]
    fn vlog_garbage_survives_reopen() {
        survives_reopen(&|fs| {
            Box::new(
                VlogStore::open(
                    Path::new("/db"),
                    fs,
                    Arc::new(IoStats::default()),
                    crate::vstore::vlog::VlogOptions::new(16 << 10, 1 << 20),
                    None,
                )
                .unwrap(),
            )
        });
    }

    #[test]
    fn hashkv_garbage_survives_reopen() {
        survives_reopen(&|fs| {
            let o = crate::Options {
                value_threshold: 1,
                value_capacity: Some(8 << 20),
                hashkv_main_segment_size: 256 << 10,
                hashkv_log_segment_size: 64 << 10,
                ..crate::Options::default()
            };
            Box::new(
                HashKvStore::open(
                    Path::new("/db"),
                    fs,
                    Arc::new(IoStats::default()),
                    crate::vstore::hashkv::HashKvOptions::from_options(&o),
                    None,
                )
                .unwrap(),
            )
        });
    }

    #[test]
    fn trie_garbage_survives_reopen() {
        survives_reopen(&|fs| {
            Box::new(
                TrieStore::open(
                    Path::new("/db"),
                    fs,
                    Arc::new(IoStats::default()),
                    crate::vstore::trie::TrieOptions {
                        value_threshold: 1,
                        table_size: 8 << 10,
                        roll_size: 8 << 10,
                        split_skew: 0.5,
                        fixed_levels: None,
                        sort_sealed: true,
                        prefetch_threads: 0,
                        max_open_writers: 500,
                        capacity: None,
                        spans: Default::default(),
                        scan_pipeline: 0,
                        scan_direct: false,
                        mapped_appends: false,
                    },
                )
                .unwrap(),
            )
        });
    }

    #[test]
    fn roundtrip_drops_zero_entries() {
        let t = vec![vec![(1, 100), (2, 0), (7, 1 << 40)], vec![], vec![(0, 5)]];
        let b = encode(&t);
        let d = decode(&b).unwrap();
        assert_eq!(d, vec![vec![(1, 100), (7, 1 << 40)], vec![], vec![(0, 5)]]);
    }

    #[test]
    fn rejects_damage() {
        let b = encode(&[vec![(1, 100), (3, 9)]]);
        assert!(decode(&b[..b.len() - 1]).is_none(), "truncated");
        let mut extra = b.clone();
        extra.push(0);
        assert!(decode(&extra).is_none(), "trailing byte");
        let mut v2 = b.clone();
        v2[0] = 2;
        assert!(decode(&v2).is_none(), "unknown version");
        assert!(decode(&[]).is_none());
        // A count far beyond the bytes left.
        let mut huge = vec![1u8];
        put_varint64(&mut huge, 1);
        put_varint64(&mut huge, u64::MAX >> 1);
        assert!(decode(&huge).is_none());
        let big = encode(&[vec![(1, MAX + 1)]]);
        assert!(decode(&big).is_none(), "byte count past 2^48");
    }
}
