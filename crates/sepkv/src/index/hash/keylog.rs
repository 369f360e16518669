//! The bands seen as the log of the key-only LSM-tree (FlashKey §V-A3).
//!
//! The key-only LSM-tree has no write-ahead log of its own: like an LSM
//! index in log mode it records, with each flush, the bands position up to
//! which its SSTables hold every key operation, and recovery replays the
//! bands after that position — every put as an insert of the key (with an
//! empty value), every delete token as a delete. Replaying a put of a key
//! already present is harmless, so replay is idempotent. The hash table and
//! the key tree each replay from their own checkpoint, so after a crash
//! both hold exactly the operations that survived in the bands; GC keeps
//! the bands after either checkpoint (`IndexLog::set_key_checkpoint`).

use crate::error::Result;
use crate::format::value_record::Kind;
use crate::index::key::ValueType;
use crate::vstore::index_log::IndexLog;
use crate::vstore::{
    GcOutcome, IndexReader, IndexRelocator, ReplaySink, SpaceStats, ValuePointer, ValueRecord,
    ValueStore,
};
use std::sync::Arc;

/// The key tree's view of the bands.
pub struct KeyLog {
    bands: Arc<dyn IndexLog>,
    /// Replay starts here.
    from: (u64, u64),
}

/// Encodes the key tree's checkpoint: `1 band:u64le offset:u64le`.
fn encode(pos: (u64, u64)) -> Vec<u8> {
    let mut v = vec![1u8];
    v.extend_from_slice(&pos.0.to_le_bytes());
    v.extend_from_slice(&pos.1.to_le_bytes());
    v
}

/// Decodes a checkpoint; `None` when malformed.
pub fn decode(b: &[u8]) -> Option<(u64, u64)> {
    if b.len() != 17 || b[0] != 1 {
        return None;
    }
    let w = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
    let pos = (w(1), w(9));
    (pos.0 <= 1 << 48 && pos.1 <= 1 << 48).then_some(pos)
}

impl KeyLog {
    /// The view, given the checkpoint the key tree persisted (`None`: from
    /// the first band). Tells the bands where the key tree replays from.
    ///
    /// # Errors
    /// `Corruption` for a malformed checkpoint.
    pub fn open(
        bands: Arc<dyn IndexLog>,
        state: Option<&[u8]>,
        manifest: &std::path::Path,
    ) -> Result<KeyLog> {
        let from = match state {
            Some(s) => decode(s)
                .ok_or_else(|| crate::Error::corruption(manifest, 0, "bad key-tree checkpoint"))?,
            None => (0, 0),
        };
        bands.set_key_checkpoint(from);
        Ok(KeyLog { bands, from })
    }
}

impl ValueStore for KeyLog {
    fn name(&self) -> &'static str {
        "bands-keys"
    }

    fn separates(&self, _len: usize) -> bool {
        false
    }

    fn append(&self, _records: &[ValueRecord<'_>]) -> Result<Vec<ValuePointer>> {
        Err(crate::Error::InvalidArgument(
            "the key tree stores no values".into(),
        ))
    }

    fn sync(&self) -> Result<()> {
        self.bands.sync()
    }

    fn read(&self, _key: &[u8], _ptr: &ValuePointer) -> Result<Option<Vec<u8>>> {
        Ok(None)
    }

    fn contains(&self, _ptr: &ValuePointer) -> bool {
        true
    }

    fn log_position(&self) -> Option<(u64, u64)> {
        self.bands.log_position()
    }

    fn state_with_checkpoint(&self, pos: (u64, u64)) -> Vec<u8> {
        encode(pos)
    }

    fn checkpoint_committed(&self, pos: (u64, u64)) {
        self.bands.set_key_checkpoint(pos);
    }

    fn replay(&self, f: &mut ReplaySink<'_>) -> Result<()> {
        self.bands
            .replay_entries(Some(self.from), &mut |_, e| match e.kind {
                Kind::Value => f(e.seq, ValueType::Value, e.key, b""),
                Kind::Tombstone => f(e.seq, ValueType::Deletion, e.key, b""),
                _ => Ok(()),
            })
    }

    fn space(&self) -> SpaceStats {
        SpaceStats::default()
    }

    fn gc_step(&self, _i: &dyn IndexReader, _r: &dyn IndexRelocator) -> Result<GcOutcome> {
        Ok(GcOutcome::default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::{FileSystem, IoStats, MemFs};
    use crate::vstore::index_log::{open_bands, BandOptions};
    use crate::vstore::LogEntry;
    use std::path::Path;

    #[test]
    fn replays_key_operations_from_its_checkpoint_and_holds_back_gc() {
        let fs: Arc<dyn FileSystem> = Arc::new(MemFs::new());
        let dir = Path::new("/db");
        fs.create_dir_all(dir).unwrap();
        let bands = open_bands(
            dir,
            fs,
            Arc::new(IoStats::default()),
            BandOptions {
                band_entries: 2,
                key_index: true,
                ..Default::default()
            },
            None,
        )
        .unwrap();
        let log = |seq: u64, vtype, key: &'static [u8]| {
            bands
                .log_linked(
                    &[LogEntry {
                        vtype,
                        separate: true,
                        key,
                        seq,
                        value: b"v",
                    }],
                    Some(&[None]),
                )
                .unwrap()
        };
        log(1, ValueType::Value, b"a");
        log(2, ValueType::Value, b"b");
        let mid = bands.log_position().unwrap();
        log(3, ValueType::Deletion, b"a");
        log(4, ValueType::Value, b"c");
        let kl = KeyLog::open(bands.clone(), Some(&encode(mid)), Path::new("M")).unwrap();
        let mut got = Vec::new();
        kl.replay(&mut |s, t, k, v| {
            got.push((s, t, k.to_vec(), v.to_vec()));
            Ok(())
        })
        .unwrap();
        assert_eq!(
            got,
            vec![
                (3, ValueType::Deletion, b"a".to_vec(), vec![]),
                (4, ValueType::Value, b"c".to_vec(), vec![]),
            ]
        );
        assert_eq!(decode(&kl.state_with_checkpoint((7, 9))), Some((7, 9)));
        assert_eq!(decode(&[1, 2, 3]), None);
        assert!(KeyLog::open(bands.clone(), Some(&[9; 17]), Path::new("M")).is_err());
        // The hash table's checkpoint is past every band, the key tree's is
        // not: GC may collect only the bands before the key tree's.
        bands.note_invalid(
            &ValuePointer {
                file_id: 2,
                offset: 20,
                length: 10,
                aux: 0,
            },
            4,
        );
        let end = bands.log_position().unwrap();
        bands.checkpoint_committed(end);
        struct Nothing;
        impl IndexReader for Nothing {
            fn current_pointer(&self, _k: &[u8]) -> Result<Option<ValuePointer>> {
                Ok(None)
            }
            fn oldest_visible_seq(&self) -> u64 {
                100
            }
            fn last_sequence(&self) -> u64 {
                100
            }
            fn wait_in_flight_writes(&self) -> Result<()> {
                Ok(())
            }
        }
        impl IndexRelocator for Nothing {
            fn relocate(&self, m: &[crate::vstore::Relocation]) -> Result<(Vec<bool>, u64)> {
                Ok((vec![false; m.len()], 100))
            }
            fn persist_state(&self, _s: &[u8]) -> Result<()> {
                Ok(())
            }
            fn make_durable(&self, _s: u64) -> Result<()> {
                Ok(())
            }
        }
        assert_eq!(mid.0, 2, "two bands of two entries before `mid`");
        let out = bands.gc_step(&Nothing, &Nothing).unwrap();
        assert!(!out.did_work, "band 2 is after the key tree's checkpoint");
        kl.checkpoint_committed(end);
        let out = bands.gc_step(&Nothing, &Nothing).unwrap();
        assert!(out.did_work, "{out:?}");
    }
}
