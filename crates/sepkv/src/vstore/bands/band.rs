//! The on-disk format of one logical band (FlashKey §V-A2).
//!
//! Each band is one file `NNNNNN.band`, named by the band's sequence number
//! (bands are numbered in the order they are opened, and a number is never
//! reused):
//!
//! ```text
//! band    := header  entry*  [trailer]
//! header  := "SKVBAND1"  band:u64le  crc:u32le                 (20 bytes)
//! entry   := value record (format::value_record) whose value is
//!            prev_band:u64le  prev_off:u64le  prev_len:u32le  payload
//! trailer := "SKVBEND1"  entries:u32le  data_end:u64le  max_seq:u64le  crc:u32le  (32 bytes)
//! ```
//! - `crc` fields are masked CRC-32C of the bytes before them in the header
//!   or trailer.
//! - An entry is the shared value record (its header holds the checksum,
//!   kind, key and value lengths and the sequence number) plus the band's
//!   own 20-byte header field: the address of the key's previous version
//!   (`prev_band` 0 = none), which snapshot reads follow back (as in
//!   FASTER's hybrid log). The payload is the value, the encoded pointer of
//!   a relocation, or empty for a delete token.
//! - Record flag bit [`BATCH_END`] marks the last entry of a write batch:
//!   recovery keeps a band's entries up to the last complete batch, so a
//!   batch is applied all or nothing. A batch never spans two bands.
//! - The trailer is written when the band is closed (full); a band without
//!   one was the open band at a crash, and its valid end is found by
//!   scanning its entries.

use crate::format::checksum::{crc, mask, unmask};
use crate::format::value_record::{self, Kind};
use crate::vstore::ValuePointer;

/// Bytes of the band header.
pub const HEADER_LEN: u64 = 20;
/// Bytes of the closed-band trailer.
pub const TRAILER_LEN: usize = 32;
/// Bytes of the band's own entry field (previous-version address).
pub const PREV_LEN: usize = 20;
/// Bytes an entry takes beyond its key and payload: the value record's
/// header and the previous-version address (42). The bands' live bytes,
/// and so their space bound and GC's room, count them.
pub const ENTRY_OVERHEAD: usize = value_record::HEADER_LEN + PREV_LEN;
/// Record flag: last entry of a write batch (the shared codec's
/// [`value_record::FLAG_BATCH_END`]).
pub const BATCH_END: u8 = value_record::FLAG_BATCH_END;
pub use crate::vstore::index_log::AUX_TOMBSTONE;

const HEADER_MAGIC: &[u8; 8] = b"SKVBAND1";
const TRAILER_MAGIC: &[u8; 8] = b"SKVBEND1";

/// The band header for band `band`.
pub fn encode_header(band: u64) -> Vec<u8> {
    let mut v = Vec::with_capacity(HEADER_LEN as usize);
    v.extend_from_slice(HEADER_MAGIC);
    v.extend_from_slice(&band.to_le_bytes());
    let c = mask(crc(&v));
    v.extend_from_slice(&c.to_le_bytes());
    v
}

/// The band number a header names; `None` when it is not a valid header.
pub fn decode_header(b: &[u8]) -> Option<u64> {
    if b.len() < HEADER_LEN as usize || &b[..8] != HEADER_MAGIC {
        return None;
    }
    let stored = unmask(u32::from_le_bytes(b[16..20].try_into().ok()?));
    (crc(&b[..16]) == stored).then(|| u64::from_le_bytes(b[8..16].try_into().expect("8 bytes")))
}

/// What a closed band's trailer records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Trailer {
    /// Entries in the band.
    pub entries: u32,
    /// Offset where the entries end (the trailer's offset).
    pub data_end: u64,
    /// Largest sequence number of an entry in the band.
    pub max_seq: u64,
}

/// Encodes a trailer.
pub fn encode_trailer(t: &Trailer) -> Vec<u8> {
    let mut v = Vec::with_capacity(TRAILER_LEN);
    v.extend_from_slice(TRAILER_MAGIC);
    v.extend_from_slice(&t.entries.to_le_bytes());
    v.extend_from_slice(&t.data_end.to_le_bytes());
    v.extend_from_slice(&t.max_seq.to_le_bytes());
    let c = mask(crc(&v));
    v.extend_from_slice(&c.to_le_bytes());
    v
}

/// Decodes a trailer read from offset `at`; `None` unless intact and
/// consistent with its position.
pub fn decode_trailer(b: &[u8], at: u64) -> Option<Trailer> {
    if b.len() != TRAILER_LEN || &b[..8] != TRAILER_MAGIC {
        return None;
    }
    let stored = unmask(u32::from_le_bytes(b[28..32].try_into().ok()?));
    if crc(&b[..28]) != stored {
        return None;
    }
    let t = Trailer {
        entries: u32::from_le_bytes(b[8..12].try_into().ok()?),
        data_end: u64::from_le_bytes(b[12..20].try_into().ok()?),
        max_seq: u64::from_le_bytes(b[20..28].try_into().ok()?),
    };
    (t.data_end == at).then_some(t)
}

/// The address of the previous version, as stored in an entry.
pub fn encode_prev(dst: &mut Vec<u8>, prev: Option<&ValuePointer>) {
    let (b, o, l) = prev.map_or((0, 0, 0), |p| (p.file_id, p.offset, p.length));
    dst.extend_from_slice(&b.to_le_bytes());
    dst.extend_from_slice(&o.to_le_bytes());
    dst.extend_from_slice(&l.to_le_bytes());
}

/// Appends one entry to `dst`.
pub fn encode_entry(
    dst: &mut Vec<u8>,
    kind: Kind,
    flags: u8,
    key: &[u8],
    seq: u64,
    prev: Option<&ValuePointer>,
    payload: &[u8],
) {
    let mut v = Vec::with_capacity(PREV_LEN + payload.len());
    encode_prev(&mut v, prev);
    v.extend_from_slice(payload);
    value_record::encode(dst, kind, flags, key, seq, &v);
}

/// Bytes an entry takes.
pub fn entry_len(key: &[u8], payload: &[u8]) -> usize {
    ENTRY_OVERHEAD + key.len() + payload.len()
}

/// A decoded band entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry<'a> {
    /// What the entry is.
    pub kind: Kind,
    /// Flag bits ([`BATCH_END`]).
    pub flags: u8,
    /// The user key.
    pub key: &'a [u8],
    /// Sequence number of the write.
    pub seq: u64,
    /// Address of the key's previous version (its `aux` is 0: the kind of
    /// the previous entry is known only by reading it).
    pub prev: Option<ValuePointer>,
    /// Value, encoded pointer, or empty.
    pub payload: &'a [u8],
    /// Total bytes of the entry.
    pub len: usize,
}

impl Entry<'_> {
    /// The address of this entry at `offset` of band `band`, as the index
    /// holds it: a tombstone's address carries [`AUX_TOMBSTONE`].
    pub fn pointer(&self, band: u64, offset: u64) -> ValuePointer {
        ValuePointer {
            file_id: band,
            offset,
            length: self.len as u32,
            aux: if self.kind == Kind::Tombstone {
                AUX_TOMBSTONE
            } else {
                0
            },
        }
    }
}

/// Decodes the entry at the start of `buf`.
///
/// # Errors
/// The codec's [`value_record::DecodeError`]; an entry too short for the
/// band's field counts as damaged.
pub fn decode_entry(buf: &[u8]) -> Result<Entry<'_>, value_record::DecodeError> {
    let r = value_record::decode(buf)?;
    if r.value.len() < PREV_LEN {
        return Err(value_record::DecodeError::Checksum);
    }
    let pb = u64::from_le_bytes(r.value[0..8].try_into().expect("8 bytes"));
    let po = u64::from_le_bytes(r.value[8..16].try_into().expect("8 bytes"));
    let pl = u32::from_le_bytes(r.value[16..20].try_into().expect("4 bytes"));
    Ok(Entry {
        kind: r.kind,
        flags: r.flags,
        key: r.key,
        seq: r.seq,
        prev: (pb != 0).then_some(ValuePointer {
            file_id: pb,
            offset: po,
            length: pl,
            aux: 0,
        }),
        payload: &r.value[PREV_LEN..],
        len: r.len,
    })
}

/// Walks the entries of `buf` (which starts at band offset `base`) up to
/// the last complete batch; calls `f(offset, entry)` for each entry of a
/// complete batch and returns `(end of the last complete batch, entries,
/// largest sequence number)`.
pub fn scan_batches(buf: &[u8], base: u64, mut f: impl FnMut(u64, &Entry<'_>)) -> (u64, u32, u64) {
    let mut pos = 0usize;
    let mut pending: Vec<(u64, Entry<'_>)> = Vec::new();
    let (mut end, mut n, mut max_seq) = (base, 0u32, 0u64);
    while pos < buf.len() {
        let Ok(e) = decode_entry(&buf[pos..]) else {
            break;
        };
        pending.push((base + pos as u64, e));
        pos += e.len;
        if e.flags & BATCH_END != 0 {
            for (at, e) in pending.drain(..) {
                n += 1;
                max_seq = max_seq.max(e.seq);
                f(at, &e);
            }
            end = base + pos as u64;
        }
    }
    (end, n, max_seq)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_and_trailer_roundtrip_and_reject_damage() {
        let h = encode_header(42);
        assert_eq!(decode_header(&h), Some(42));
        for i in 0..h.len() {
            let mut d = h.clone();
            d[i] ^= 0x10;
            assert_eq!(decode_header(&d), None, "flip at {i}");
        }
        let t = Trailer {
            entries: 7,
            data_end: 900,
            max_seq: 12,
        };
        let b = encode_trailer(&t);
        assert_eq!(decode_trailer(&b, 900), Some(t));
        assert_eq!(decode_trailer(&b, 901), None, "trailer at the wrong place");
        for i in 0..b.len() {
            let mut d = b.clone();
            d[i] ^= 0x01;
            assert_eq!(decode_trailer(&d, 900), None, "flip at {i}");
        }
    }

    #[test]
    fn entries_carry_prev_and_scan_stops_at_incomplete_batch() {
        let p = ValuePointer {
            file_id: 3,
            offset: 77,
            length: 50,
            aux: 0,
        };
        let mut b = Vec::new();
        encode_entry(&mut b, Kind::Value, 0, b"a", 1, None, b"x");
        encode_entry(&mut b, Kind::Value, BATCH_END, b"b", 2, Some(&p), b"yy");
        let batch1 = b.len();
        assert_eq!(batch1, entry_len(b"a", b"x") + entry_len(b"b", b"yy"));
        encode_entry(&mut b, Kind::Tombstone, 0, b"c", 3, None, b"");
        let e = decode_entry(&b[entry_len(b"a", b"x")..]).unwrap();
        assert_eq!(
            (e.key, e.seq, e.prev, e.payload),
            (&b"b"[..], 2, Some(p), &b"yy"[..])
        );
        let mut seen = Vec::new();
        let (end, n, max) = scan_batches(&b, 20, |at, e| seen.push((at, e.seq)));
        assert_eq!((end, n, max), (20 + batch1 as u64, 2, 2));
        assert_eq!(seen, vec![(20, 1), (20 + entry_len(b"a", b"x") as u64, 2)]);
        // Every cut inside the first batch loses all of it.
        for cut in 0..batch1 {
            assert_eq!(scan_batches(&b[..cut], 20, |_, _| {}).1, 0);
        }
    }

    #[test]
    fn decoders_never_panic_on_junk() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for len in 0..200 {
            let bytes: Vec<u8> = (0..len)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x as u8
                })
                .collect();
            let _ = decode_entry(&bytes);
            let _ = decode_header(&bytes);
            let _ = decode_trailer(&bytes, 0);
            let _ = scan_batches(&bytes, 0, |_, _| {});
        }
    }
}
