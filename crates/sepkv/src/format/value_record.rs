//! The value-record codec: how a separated value is stored in a value
//! store, whatever the layout (`docs/format.md`, "Shared value-record codec").
//!
//! Every value-store record carries `(checksum, kind, key, sequence number,
//! value)`: the checksum lets a read tell damage from data (WiscKey
//! §3.3.3), the key lets a read check that the record belongs to the key
//! it looked up, and key and sequence number let GC and recovery work from
//! the record alone.
//!
//! ```text
//! record := crc:u32le  kind:u8  flags:u8  key_len:u32le  value_len:u32le  seq:u64le  key  value
//!   crc        masked CRC-32C of every byte after it (rest of header, key, value)
//!   kind       what the record is (see [`Kind`]); never 0, so an all-zero
//!              header (preallocated or hole-punched space) never decodes
//!   flags      bits the layout defines (0 where it defines none); bit 0
//!              ([`FLAG_BATCH_END`]) marks the last record of a write batch
//!              in the stores that keep batches (value log, bands)
//!   key_len    key length in bytes
//!   value_len  value length in bytes
//!   seq        sequence number of the write that stored the record
//! ```
//! 22 header bytes. A layout adds only its own header fields, in `flags`.
//! Frozen: database format version 2 (format 1 had it too, for TrieTables
//! and bands only). Do not change without bumping the format version
//! recorded in the database.
//!
//! Writers: the value log and HashKV's cold data log (`vstore::vlog`,
//! [`FLAG_BATCH_END`] on each append's last record), HashKV segments
//! (`vstore::hashkv`: kinds [`Kind::Value`] and [`Kind::Tag`], flags 0),
//! TrieTables (`vstore::trie`, flags 0) and logical bands
//! (`vstore::bands`, [`FLAG_BATCH_END`]). Files of those first two a
//! format-1 database wrote hold the older codecs of [`legacy`]; a store
//! reads each file with the [`Codec`] its number gives, and writes only
//! this one.

pub mod legacy;

use super::checksum::{crc_parts, mask, unmask};

/// Bytes of a record header.
pub const HEADER_LEN: usize = 22;

/// Flag bit: the record is the last of its write batch (value log and
/// bands; recovery applies whole batches only).
pub const FLAG_BATCH_END: u8 = 1;

/// Which codec a file's records are in: this one, or one of the two a
/// format-1 database used for its value log and HashKV segments. A store
/// knows it from the file's number (see `docs/format.md`, "Files in the
/// older record codecs"); nothing in the bytes tells them apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Codec {
    /// The shared codec of this module (every file a format-2 build writes).
    Shared,
    /// The format-1 value-log record ([`legacy::decode_vlog`]).
    VlogV1,
    /// The format-1 HashKV segment record ([`legacy::decode_hashkv`]).
    HashKvV1,
}

impl Codec {
    /// Bytes of a record header in this codec.
    pub fn header_len(self) -> usize {
        match self {
            Codec::Shared => HEADER_LEN,
            Codec::VlogV1 => legacy::VLOG_HEADER_LEN,
            Codec::HashKvV1 => legacy::HASHKV_HEADER_LEN,
        }
    }

    /// Decodes and checks the record at the start of `buf`, as
    /// [`decode`] does for the shared codec; an older record's kind comes
    /// back as the shared [`Kind`] of the same meaning, and the value
    /// log's end-of-batch bit as [`FLAG_BATCH_END`].
    ///
    /// # Errors
    /// [`DecodeError`] says why the bytes are not a record.
    pub fn decode(self, buf: &[u8]) -> Result<Record<'_>, DecodeError> {
        match self {
            Codec::Shared => decode(buf),
            Codec::VlogV1 => legacy::decode_vlog(buf),
            Codec::HashKvV1 => legacy::decode_hashkv(buf),
        }
    }

    /// Total length the header at the start of `buf` announces; `None`
    /// when `buf` is shorter than a header or the length overflows.
    pub fn announced_len(self, buf: &[u8]) -> Option<usize> {
        match self {
            Codec::Shared => announced_len(buf),
            Codec::VlogV1 => legacy::vlog_announced_len(buf),
            Codec::HashKvV1 => legacy::hashkv_announced_len(buf),
        }
    }
}

/// The record `r` encoded in the shared codec (a GC copy of a record read
/// from a file in an older codec keeps its kind, flags, key, sequence
/// number and value).
pub fn reencode(r: &Record<'_>) -> Vec<u8> {
    let mut out = Vec::with_capacity(record_len(r.key, r.value));
    encode(&mut out, r.kind, r.flags, r.key, r.seq, r.value);
    out
}

/// What a record is. The numbering is frozen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    /// A separated value written by a user.
    Value = 1,
    /// A live value garbage collection copied.
    GcCopy = 2,
    /// A small value kept inline in the index (stores that serve as the
    /// write-ahead log).
    Inline = 3,
    /// A delete (stores that serve as the write-ahead log).
    Tombstone = 4,
    /// A pointer installed by GC; the value is the encoded pointer (stores
    /// that serve as the write-ahead log).
    Relocation = 5,
    /// A tag left where a value moved elsewhere; the value is the encoded
    /// pointer to it (HashKV: a value GC moved to the cold data log).
    Tag = 6,
}

impl Kind {
    fn from_byte(b: u8) -> Option<Kind> {
        Some(match b {
            1 => Kind::Value,
            2 => Kind::GcCopy,
            3 => Kind::Inline,
            4 => Kind::Tombstone,
            5 => Kind::Relocation,
            6 => Kind::Tag,
            _ => return None,
        })
    }

    /// True for records a value pointer may address.
    pub fn holds_value(self) -> bool {
        matches!(self, Kind::Value | Kind::GcCopy)
    }
}

/// Length in bytes of the record for `key` and `value`.
pub fn record_len(key: &[u8], value: &[u8]) -> usize {
    HEADER_LEN + key.len() + value.len()
}

/// Appends the record to `dst`.
///
/// # Panics
/// In debug builds, when the key or value is longer than `u32::MAX` bytes
/// (the engine's limits are far below).
pub fn encode(dst: &mut Vec<u8>, kind: Kind, flags: u8, key: &[u8], seq: u64, value: &[u8]) {
    debug_assert!(key.len() <= u32::MAX as usize && value.len() <= u32::MAX as usize);
    let mut head = [0u8; HEADER_LEN - 4];
    head[0] = kind as u8;
    head[1] = flags;
    head[2..6].copy_from_slice(&(key.len() as u32).to_le_bytes());
    head[6..10].copy_from_slice(&(value.len() as u32).to_le_bytes());
    head[10..18].copy_from_slice(&seq.to_le_bytes());
    let c = mask(crc_parts(&[&head, key, value]));
    dst.reserve(HEADER_LEN + key.len() + value.len());
    dst.extend_from_slice(&c.to_le_bytes());
    dst.extend_from_slice(&head);
    dst.extend_from_slice(key);
    dst.extend_from_slice(value);
}

/// A decoded record borrowing its bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Record<'a> {
    /// What the record is.
    pub kind: Kind,
    /// The layout's flag bits.
    pub flags: u8,
    /// The user key.
    pub key: &'a [u8],
    /// Sequence number of the write that stored it.
    pub seq: u64,
    /// The value.
    pub value: &'a [u8],
    /// Total record length in bytes.
    pub len: usize,
}

/// Why a record could not be decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecodeError {
    /// Fewer bytes than the header or the lengths it announces.
    Truncated,
    /// An all-zero header (never-written or hole-punched space).
    Zero,
    /// Checksum mismatch or an unknown kind.
    Checksum,
}

/// Total length the header at the start of `buf` announces; `None` when
/// `buf` is shorter than a header.
pub fn announced_len(buf: &[u8]) -> Option<usize> {
    if buf.len() < HEADER_LEN {
        return None;
    }
    let k = u32::from_le_bytes(buf[6..10].try_into().ok()?) as usize;
    let v = u32::from_le_bytes(buf[10..14].try_into().ok()?) as usize;
    HEADER_LEN.checked_add(k)?.checked_add(v)
}

/// Decodes and checks the record at the start of `buf`.
///
/// # Errors
/// [`DecodeError`] says why the bytes are not a record.
pub fn decode(buf: &[u8]) -> Result<Record<'_>, DecodeError> {
    if buf.len() < HEADER_LEN {
        return Err(DecodeError::Truncated);
    }
    if buf[..HEADER_LEN].iter().all(|&b| b == 0) {
        return Err(DecodeError::Zero);
    }
    let stored = unmask(u32::from_le_bytes(buf[0..4].try_into().expect("4 bytes")));
    let len = announced_len(buf).ok_or(DecodeError::Checksum)?;
    if buf.len() < len {
        return Err(DecodeError::Truncated);
    }
    let klen = u32::from_le_bytes(buf[6..10].try_into().expect("4 bytes")) as usize;
    let key = &buf[HEADER_LEN..HEADER_LEN + klen];
    let value = &buf[HEADER_LEN + klen..len];
    if crc_parts(&[&buf[4..HEADER_LEN], key, value]) != stored {
        return Err(DecodeError::Checksum);
    }
    let kind = Kind::from_byte(buf[4]).ok_or(DecodeError::Checksum)?;
    Ok(Record {
        kind,
        flags: buf[5],
        key,
        seq: u64::from_le_bytes(buf[14..22].try_into().expect("8 bytes")),
        value,
        len,
    })
}

/// How a run of records ended (see [`valid_prefix`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunEnd {
    /// Every byte belonged to a complete, intact record.
    Clean,
    /// The bytes from this offset on are not records: a record cut short,
    /// zeros, or a record whose checksum fails.
    Torn(usize),
}

/// Walks the records at the start of `buf`, calling `f(offset, record)` for
/// each intact one; returns the end of the last intact record and how the
/// run ended. Used to find the valid length of an append-only file after a
/// crash: everything from the first record that does not decode on is a
/// torn tail.
pub fn valid_prefix(buf: &[u8], mut f: impl FnMut(usize, &Record<'_>)) -> (usize, RunEnd) {
    let mut pos = 0;
    while pos < buf.len() {
        match decode(&buf[pos..]) {
            Ok(r) => {
                f(pos, &r);
                pos += r.len;
            }
            Err(_) => return (pos, RunEnd::Torn(pos)),
        }
    }
    (pos, RunEnd::Clean)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn roundtrip_and_every_flipped_bit_is_caught() {
        let mut b = Vec::new();
        encode(&mut b, Kind::Value, 0x80, b"key", 7, b"value");
        assert_eq!(b.len(), record_len(b"key", b"value"));
        assert_eq!(announced_len(&b), Some(b.len()));
        let r = decode(&b).unwrap();
        assert_eq!(
            (r.kind, r.flags, r.key, r.seq, r.value, r.len),
            (Kind::Value, 0x80, &b"key"[..], 7, &b"value"[..], b.len())
        );
        for i in 0..b.len() {
            for bit in 0..8 {
                let mut d = b.clone();
                d[i] ^= 1 << bit;
                // A flip in a length may make the record look truncated;
                // it never decodes as a record.
                assert!(decode(&d).is_err(), "flip of bit {bit} at {i} undetected");
            }
        }
        assert_eq!(decode(&b[..b.len() - 1]), Err(DecodeError::Truncated));
        assert_eq!(decode(&[0u8; 40]), Err(DecodeError::Zero));
        assert_eq!(decode(&[1u8; 3]), Err(DecodeError::Truncated));
    }

    #[test]
    fn every_kind_roundtrips_and_only_values_are_addressable() {
        for k in [
            Kind::Value,
            Kind::GcCopy,
            Kind::Inline,
            Kind::Tombstone,
            Kind::Relocation,
            Kind::Tag,
        ] {
            let mut b = Vec::new();
            encode(&mut b, k, 0, b"k", 1, b"");
            assert_eq!(decode(&b).unwrap().kind, k);
            assert_eq!(k.holds_value(), matches!(k, Kind::Value | Kind::GcCopy));
        }
    }

    #[test]
    fn valid_prefix_stops_at_a_torn_tail() {
        let mut b = Vec::new();
        encode(&mut b, Kind::Value, 0, b"a", 1, b"one");
        let first = b.len();
        encode(&mut b, Kind::Value, 0, b"b", 2, b"two");
        let full = b.len();
        let mut seen = Vec::new();
        assert_eq!(
            valid_prefix(&b, |o, r| seen.push((o, r.seq))),
            (full, RunEnd::Clean)
        );
        assert_eq!(seen, vec![(0, 1), (first, 2)]);
        for cut in first..full {
            assert_eq!(valid_prefix(&b[..cut], |_, _| {}).0, first);
        }
        let mut z = b.clone();
        z.extend_from_slice(&[0u8; 30]);
        assert_eq!(valid_prefix(&z, |_, _| {}), (full, RunEnd::Torn(full)));
    }

    proptest! {
        #[test]
        fn any_record_roundtrips(key in proptest::collection::vec(any::<u8>(), 0..64),
                                 value in proptest::collection::vec(any::<u8>(), 0..300),
                                 seq in any::<u64>(), flags in any::<u8>()) {
            let mut b = Vec::new();
            encode(&mut b, Kind::GcCopy, flags, &key, seq, &value);
            let r = decode(&b).unwrap();
            prop_assert_eq!((r.key, r.value, r.seq, r.flags), (&key[..], &value[..], seq, flags));
        }

        #[test]
        fn decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..100)) {
            let _ = decode(&bytes);
            let _ = valid_prefix(&bytes, |_, _| {});
        }
    }
}
