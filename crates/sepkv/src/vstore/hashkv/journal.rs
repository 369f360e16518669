//! Crash consistency (HashKV §3.7): the write journal, which records the
//! segments user writes and GC copies allocate (and, in one mode, their
//! records).
//!
//! The journal is a log framed with the engine's checksummed record format
//! ([`crate::format::record`]); a torn tail ends it cleanly, damage before
//! valid data is `Corruption`.
//!
//! # Write journal (`NNNNNN.hjnl`)
//! The journal records the store's metadata (§3.7 "metadata journaling").
//! By default an `append` or a GC placement that allocates segments writes
//! one entry naming them, with no records, and hands it to the OS before
//! the records go to those segments; the records themselves are found
//! again on open by scanning the segments' tails. With
//! `hashkv_journal_values` every `append` writes one entry, which carries
//! its records too; the records then wait in the write cache. An entry is
//! the flush unit of §3.7 with its metadata: the segments the append
//! allocated and, for each record, its place and bytes:
//!
//! ```text
//! write := 0x01 nalloc:varint alloc* nrec:varint place* bytes
//! alloc := group:varint seg:varint kind:u8 units:varint cap:varint
//! place := seg:varint off:varint len:varint        (bytes: the records, concatenated)
//! ```
//! (An allocation-only entry is a `write` with `nrec` 0.)
//!
//! GC copies a group's live records to the group's end, where user writes go
//! too (see [`super::gc`]). With `hashkv_journal_values` the copies wait in
//! the write cache like user records, and their entry carries metadata
//! only — the bytes are in the segments the GC is collecting, which stay
//! until the copies are synced:
//!
//! ```text
//! copy  := 0x04 nalloc:varint alloc* nrec:varint (place src_seg:varint src_off:varint)*
//! ```
//! Replay on open (from the position the segment table records) re-attaches
//! allocated segments and makes sure every record is in its segment file
//! (idempotently: bytes already there are skipped; a missing copy is read
//! again from its source). A checkpoint — flush the cache, sync the written
//! segments, persist the table with a new journal position — lets old
//! journal files be deleted ("marking the flush free"). Appends switch to
//! the next journal when the checkpoint begins, and the store's worker
//! finishes it in the background (see the store's thread-safety notes);
//! until then open replays the retired journal and the new one, in number
//! order, and a preallocated, empty spare journal may lie beyond them (all
//! zeros: no entries). A journal carrying values is preallocated to the
//! length at which it is checkpointed, and `sync` syncs only it — and the
//! retired one while a checkpoint is in flight: one or two `fsync`s
//! whatever the number of groups written. A journal of allocations is
//! preallocated to 64 KiB (and grows beyond when it must); it is
//! checkpointed by the bytes appended to segments since the last
//! checkpoint, and `sync` syncs the written segments as well.
//!
//! # GC journal (`hashkv-gc.jnl`, read only)
//! Earlier versions wrote GC copies to segments outside their group and
//! recorded the GC's intent in a GC journal:
//!
//! ```text
//! begin := 0x02 gc_id:varint ngroups:varint (group:varint nold:varint old_id*
//!                                            nnew:varint (id:varint kind:u8 units:varint cap:varint len:varint)*)*
//! done  := 0x03 gc_id:varint
//! ```
//! Open still adopts the new segments of a `begin` without `done` into the
//! group, after its old segments (`old ++ new ++ later`), when the old ones
//! are still listed, and then removes the file.
//!
//! Decoding refuses segment ids (of allocations and GC output) above
//! [`MAX_SEG_ID`] and capacities, lengths and offsets above
//! [`MAX_SEG_BYTES`]: such an entry is damage, and replaying it would
//! overflow the counters derived from it.

use super::segment::{Alloc, Seg, SegKind, MAX_SEG_BYTES, MAX_SEG_ID};
use crate::format::coding::{get_varint32, get_varint64, put_varint32, put_varint64};
use std::path::{Path, PathBuf};

/// Path of write-journal file `n`.
pub fn journal_path(dir: &Path, n: u64) -> PathBuf {
    dir.join(format!("{n:06}.hjnl"))
}

/// Parses a write-journal file name.
pub fn parse_journal_name(name: &str) -> Option<u64> {
    name.strip_suffix(".hjnl")?.parse().ok()
}

/// Name of the GC journal.
pub const GC_JOURNAL: &str = "hashkv-gc.jnl";

const WRITE: u8 = 1;
const BEGIN: u8 = 2;
const DONE: u8 = 3;
const COPY: u8 = 4;

/// Where one record of a write entry goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Place {
    /// Segment id.
    pub seg: u64,
    /// Offset in the segment.
    pub off: u64,
    /// Record length.
    pub len: u32,
}

fn put_seg(v: &mut Vec<u8>, id: u64, s: &Seg) {
    put_varint64(v, id);
    v.push(s.kind.byte());
    put_varint32(v, s.units);
    put_varint64(v, s.cap);
}

/// Reads a byte count (segment capacity, length or offset) within
/// [`MAX_SEG_BYTES`]: larger ones are damage, and would overflow as the
/// store adds to them.
fn get_bytes_count(src: &mut &[u8]) -> Option<u64> {
    get_varint64(src).filter(|&n| n <= MAX_SEG_BYTES)
}

fn get_seg(src: &mut &[u8], group: u32) -> Option<(u64, Seg)> {
    // Ids above the bound would overflow the next id derived from them.
    let id = get_varint64(src).filter(|&id| id <= MAX_SEG_ID)?;
    let (&k, r) = src.split_first()?;
    *src = r;
    Some((
        id,
        Seg {
            group,
            kind: SegKind::from_byte(k)?,
            units: get_varint32(src)?,
            cap: get_bytes_count(src)?,
            len: 0,
        },
    ))
}

fn put_allocs(v: &mut Vec<u8>, allocs: &[Alloc]) {
    put_varint64(v, allocs.len() as u64);
    for a in allocs {
        put_varint32(v, a.seg.group);
        put_seg(v, a.id, &a.seg);
    }
}

fn put_place(v: &mut Vec<u8>, p: &Place) {
    put_varint64(v, p.seg);
    put_varint64(v, p.off);
    put_varint32(v, p.len);
}

fn get_allocs(src: &mut &[u8]) -> Option<Vec<Alloc>> {
    let n = get_varint64(src)?;
    let mut allocs = Vec::new();
    for _ in 0..n {
        let group = get_varint32(src)?;
        let (id, seg) = get_seg(src, group)?;
        allocs.push(Alloc { id, seg });
    }
    Some(allocs)
}

fn get_place(src: &mut &[u8]) -> Option<Place> {
    Some(Place {
        seg: get_varint64(src)?,
        off: get_bytes_count(src)?,
        len: get_varint32(src)?,
    })
}

/// Encodes a write entry; `data` is the records' bytes in `places` order.
pub fn encode_write(allocs: &[Alloc], places: &[Place], data: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(16 + allocs.len() * 12 + places.len() * 12 + data.len());
    v.push(WRITE);
    put_allocs(&mut v, allocs);
    put_varint64(&mut v, places.len() as u64);
    for p in places {
        put_place(&mut v, p);
    }
    v.extend_from_slice(data);
    v
}

/// Encodes a copy entry: record `i` placed at `places[i]` is a copy of the
/// `places[i].len` bytes at `sources[i]` = `(segment, offset)`.
pub fn encode_copy(allocs: &[Alloc], places: &[Place], sources: &[(u64, u64)]) -> Vec<u8> {
    debug_assert_eq!(places.len(), sources.len());
    let mut v = Vec::with_capacity(16 + allocs.len() * 12 + places.len() * 20);
    v.push(COPY);
    put_allocs(&mut v, allocs);
    put_varint64(&mut v, places.len() as u64);
    for (p, &(seg, off)) in places.iter().zip(sources) {
        put_place(&mut v, p);
        put_varint64(&mut v, seg);
        put_varint64(&mut v, off);
    }
    v
}

/// A decoded write entry.
#[derive(Debug)]
pub struct WriteEntry<'a> {
    /// Segments allocated.
    pub allocs: Vec<Alloc>,
    /// Records placed, with their bytes.
    pub records: Vec<(Place, &'a [u8])>,
}

/// A decoded copy entry.
#[derive(Debug, PartialEq, Eq)]
pub struct CopyEntry {
    /// Segments allocated.
    pub allocs: Vec<Alloc>,
    /// Records placed, with the `(segment, offset)` each is a copy of.
    pub copies: Vec<(Place, (u64, u64))>,
}

/// One group of a GC intent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupIntent {
    /// The group.
    pub group: u32,
    /// Its segments when the GC sealed it.
    pub old: Vec<u64>,
    /// Segments the GC wrote, with their lengths.
    pub new: Vec<(u64, Seg)>,
}

/// A decoded journal entry.
#[derive(Debug)]
pub enum Entry<'a> {
    /// A write entry.
    Write(WriteEntry<'a>),
    /// A GC copy entry.
    Copy(CopyEntry),
    /// A GC intent.
    Begin(u64, Vec<GroupIntent>),
    /// A GC marked free.
    Done(u64),
}

/// Encodes a GC intent.
pub fn encode_begin(gc_id: u64, groups: &[GroupIntent]) -> Vec<u8> {
    let mut v = vec![BEGIN];
    put_varint64(&mut v, gc_id);
    put_varint64(&mut v, groups.len() as u64);
    for g in groups {
        put_varint32(&mut v, g.group);
        put_varint64(&mut v, g.old.len() as u64);
        for &o in &g.old {
            put_varint64(&mut v, o);
        }
        put_varint64(&mut v, g.new.len() as u64);
        for (id, s) in &g.new {
            put_seg(&mut v, *id, s);
            put_varint64(&mut v, s.len);
        }
    }
    v
}

/// Encodes a GC's completion.
pub fn encode_done(gc_id: u64) -> Vec<u8> {
    let mut v = vec![DONE];
    put_varint64(&mut v, gc_id);
    v
}

/// Decodes a journal entry; `None` when malformed.
pub fn decode(payload: &[u8]) -> Option<Entry<'_>> {
    let (&kind, mut src) = payload.split_first()?;
    match kind {
        WRITE => {
            let allocs = get_allocs(&mut src)?;
            let n = get_varint64(&mut src)?;
            let mut places = Vec::new();
            for _ in 0..n {
                places.push(get_place(&mut src)?);
            }
            let mut records = Vec::with_capacity(places.len());
            for p in places {
                let (b, r) = src.split_at_checked(p.len as usize)?;
                src = r;
                records.push((p, b));
            }
            src.is_empty()
                .then_some(Entry::Write(WriteEntry { allocs, records }))
        }
        BEGIN => {
            let id = get_varint64(&mut src)?;
            let n = get_varint64(&mut src)?;
            let mut groups = Vec::new();
            for _ in 0..n {
                let group = get_varint32(&mut src)?;
                let nold = get_varint64(&mut src)?;
                let mut old = Vec::new();
                for _ in 0..nold {
                    old.push(get_varint64(&mut src)?);
                }
                let nnew = get_varint64(&mut src)?;
                let mut new = Vec::new();
                for _ in 0..nnew {
                    let (sid, mut s) = get_seg(&mut src, group)?;
                    s.len = get_bytes_count(&mut src)?;
                    new.push((sid, s));
                }
                groups.push(GroupIntent { group, old, new });
            }
            src.is_empty().then_some(Entry::Begin(id, groups))
        }
        DONE => {
            let id = get_varint64(&mut src)?;
            src.is_empty().then_some(Entry::Done(id))
        }
        COPY => {
            let allocs = get_allocs(&mut src)?;
            let n = get_varint64(&mut src)?;
            let mut copies = Vec::new();
            for _ in 0..n {
                let p = get_place(&mut src)?;
                let from = (get_varint64(&mut src)?, get_varint64(&mut src)?);
                copies.push((p, from));
            }
            src.is_empty()
                .then_some(Entry::Copy(CopyEntry { allocs, copies }))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_roundtrip() {
        let seg = Seg {
            group: 4,
            kind: SegKind::Log,
            units: 2,
            cap: 2048,
            len: 0,
        };
        let allocs = vec![Alloc {
            id: 9,
            seg: seg.clone(),
        }];
        let places = vec![
            Place {
                seg: 9,
                off: 0,
                len: 3,
            },
            Place {
                seg: 9,
                off: 3,
                len: 2,
            },
        ];
        let e = encode_write(&allocs, &places, b"abcde");
        match decode(&e).unwrap() {
            Entry::Write(w) => {
                assert_eq!(w.allocs, allocs);
                assert_eq!(w.records[1], (places[1], &b"de"[..]));
            }
            _ => panic!(),
        }
        let gi = GroupIntent {
            group: 4,
            old: vec![1, 2],
            new: vec![(
                10,
                Seg {
                    len: 77,
                    ..seg.clone()
                },
            )],
        };
        match decode(&encode_begin(5, std::slice::from_ref(&gi))).unwrap() {
            Entry::Begin(5, g) => assert_eq!(g, vec![gi]),
            _ => panic!(),
        }
        assert!(matches!(decode(&encode_done(5)), Some(Entry::Done(5))));
        assert!(decode(&e[..e.len() - 1]).is_none());
        let c = encode_copy(&allocs, &places, &[(3, 100), (3, 103)]);
        match decode(&c).unwrap() {
            Entry::Copy(ce) => assert_eq!(
                ce,
                CopyEntry {
                    allocs: allocs.clone(),
                    copies: vec![(places[0], (3, 100)), (places[1], (3, 103))],
                }
            ),
            _ => panic!(),
        }
        assert!(decode(&c[..c.len() - 1]).is_none());
        // Ids and offsets near 2^64 are damage.
        let far = Alloc {
            id: u64::MAX - 1,
            seg: seg.clone(),
        };
        assert!(decode(&encode_write(&[far], &[], b"")).is_none());
        let far = Place {
            seg: 9,
            off: u64::MAX - 5,
            len: 3,
        };
        assert!(decode(&encode_write(&[], &[far], b"abc")).is_none());
    }
}
