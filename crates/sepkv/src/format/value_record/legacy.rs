//! The record codecs of database format 1 for the value log and HashKV
//! segments, kept only to read the files a format-1 database wrote
//! (`docs/format.md`, "Files in the older record codecs"). No store writes
//! them: new records, GC copies of old ones included, are in the shared
//! codec of the parent module. Both decode into the shared [`Record`],
//! with their kinds mapped to the shared [`Kind`] of the same meaning.
//!
//! ```text
//! value log (format 1), 20 header bytes:
//! record := crc:u32le  meta:u32le  value_len:u32le  seq:u64le  key  value
//!   crc   masked CRC-32C of bytes 4..20 ++ key ++ value
//!   meta  bits 0..24 key length, bits 24..31 kind, bit 31 end of batch
//!   kind  0 value | 1 inline | 2 tombstone | 3 relocation | 4 gc copy
//!
//! HashKV segment (format 1), 21 header bytes:
//! record := crc:u32le  kind:u8  key_len:u32le  value_len:u32le  seq:u64le  key  value
//!   crc   masked CRC-32C of bytes 4..21 ++ key ++ value
//!   kind  1 value | 2 tag
//! ```
//! Frozen: these are the bytes format-1 databases hold.

use super::{DecodeError, Kind, Record, FLAG_BATCH_END};
use crate::format::checksum::{crc_parts, unmask};

/// Bytes of a format-1 value-log record header.
pub const VLOG_HEADER_LEN: usize = 20;
/// Bytes of a format-1 HashKV segment record header.
pub const HASHKV_HEADER_LEN: usize = 21;

const KEY_BITS: u32 = 0x00ff_ffff;
const VLOG_BATCH_END: u32 = 1 << 31;

fn word(buf: &[u8], i: usize) -> Option<u32> {
    Some(u32::from_le_bytes(buf.get(i..i + 4)?.try_into().ok()?))
}

fn vlog_kind(bits: u32) -> Option<Kind> {
    Some(match bits {
        0 => Kind::Value,
        1 => Kind::Inline,
        2 => Kind::Tombstone,
        3 => Kind::Relocation,
        4 => Kind::GcCopy,
        _ => return None,
    })
}

/// Total length a format-1 value-log header at the start of `buf`
/// announces; `None` when `buf` is shorter than a header.
pub fn vlog_announced_len(buf: &[u8]) -> Option<usize> {
    if buf.len() < VLOG_HEADER_LEN {
        return None;
    }
    let k = (word(buf, 4)? & KEY_BITS) as usize;
    let v = word(buf, 8)? as usize;
    VLOG_HEADER_LEN.checked_add(k)?.checked_add(v)
}

/// Total length a format-1 HashKV header at the start of `buf` announces;
/// `None` when `buf` is shorter than a header.
pub fn hashkv_announced_len(buf: &[u8]) -> Option<usize> {
    if buf.len() < HASHKV_HEADER_LEN {
        return None;
    }
    let k = word(buf, 5)? as usize;
    let v = word(buf, 9)? as usize;
    HASHKV_HEADER_LEN.checked_add(k)?.checked_add(v)
}

/// Checks the common frame of both codecs: length, zero header, CRC.
/// Returns the record's total length.
fn frame(
    buf: &[u8],
    header: usize,
    len: impl Fn(&[u8]) -> Option<usize>,
) -> Result<usize, DecodeError> {
    if buf.len() < header {
        return Err(DecodeError::Truncated);
    }
    if buf[..header].iter().all(|&b| b == 0) {
        return Err(DecodeError::Zero);
    }
    let total = len(buf).ok_or(DecodeError::Checksum)?;
    if buf.len() < total {
        return Err(DecodeError::Truncated);
    }
    let stored = unmask(word(buf, 0).ok_or(DecodeError::Truncated)?);
    if crc_parts(&[&buf[4..total]]) != stored {
        return Err(DecodeError::Checksum);
    }
    Ok(total)
}

/// Decodes and checks a format-1 value-log record at the start of `buf`.
/// The end-of-batch bit comes back as [`FLAG_BATCH_END`].
///
/// # Errors
/// `Truncated`, `Zero`, or `Checksum` (mismatch or a kind outside 0–4).
pub fn decode_vlog(buf: &[u8]) -> Result<Record<'_>, DecodeError> {
    let len = frame(buf, VLOG_HEADER_LEN, vlog_announced_len)?;
    let meta = word(buf, 4).ok_or(DecodeError::Truncated)?;
    let klen = (meta & KEY_BITS) as usize;
    let kind = vlog_kind((meta >> 24) & 0x7f).ok_or(DecodeError::Checksum)?;
    Ok(Record {
        kind,
        flags: if meta & VLOG_BATCH_END != 0 {
            FLAG_BATCH_END
        } else {
            0
        },
        key: &buf[VLOG_HEADER_LEN..VLOG_HEADER_LEN + klen],
        seq: u64::from_le_bytes(buf[12..20].try_into().map_err(|_| DecodeError::Truncated)?),
        value: &buf[VLOG_HEADER_LEN + klen..len],
        len,
    })
}

/// Decodes and checks a format-1 HashKV segment record at the start of
/// `buf`. Kind 1 comes back as [`Kind::Value`], 2 as [`Kind::Tag`].
///
/// # Errors
/// `Truncated`, `Zero`, or `Checksum` (mismatch or an unknown kind).
pub fn decode_hashkv(buf: &[u8]) -> Result<Record<'_>, DecodeError> {
    let len = frame(buf, HASHKV_HEADER_LEN, hashkv_announced_len)?;
    let kind = match buf[4] {
        1 => Kind::Value,
        2 => Kind::Tag,
        _ => return Err(DecodeError::Checksum),
    };
    let klen = word(buf, 5).ok_or(DecodeError::Truncated)? as usize;
    Ok(Record {
        kind,
        flags: 0,
        key: &buf[HASHKV_HEADER_LEN..HASHKV_HEADER_LEN + klen],
        seq: u64::from_le_bytes(buf[13..21].try_into().map_err(|_| DecodeError::Truncated)?),
        value: &buf[HASHKV_HEADER_LEN + klen..len],
        len,
    })
}

/// The bytes a format-1 build wrote for a value-log record: for tests and
/// fuzzing seeds that need old files. No store calls it.
#[doc(hidden)]
pub fn vlog_v1_bytes(kind: Kind, batch_end: bool, key: &[u8], seq: u64, value: &[u8]) -> Vec<u8> {
    let bits: u32 = match kind {
        Kind::Value => 0,
        Kind::Inline => 1,
        Kind::Tombstone => 2,
        Kind::Relocation => 3,
        Kind::GcCopy | Kind::Tag => 4,
    };
    let meta =
        (key.len() as u32 & KEY_BITS) | (bits << 24) | if batch_end { VLOG_BATCH_END } else { 0 };
    let mut b = vec![0u8; 4];
    b.extend_from_slice(&meta.to_le_bytes());
    b.extend_from_slice(&(value.len() as u32).to_le_bytes());
    b.extend_from_slice(&seq.to_le_bytes());
    b.extend_from_slice(key);
    b.extend_from_slice(value);
    seal(b)
}

/// The bytes a format-1 build wrote for a HashKV segment record (`tag`:
/// kind 2, else 1): for tests and fuzzing seeds. No store calls it.
#[doc(hidden)]
pub fn hashkv_v1_bytes(tag: bool, key: &[u8], seq: u64, value: &[u8]) -> Vec<u8> {
    let mut b = vec![0u8; 4];
    b.push(if tag { 2 } else { 1 });
    b.extend_from_slice(&(key.len() as u32).to_le_bytes());
    b.extend_from_slice(&(value.len() as u32).to_le_bytes());
    b.extend_from_slice(&seq.to_le_bytes());
    b.extend_from_slice(key);
    b.extend_from_slice(value);
    seal(b)
}

fn seal(mut b: Vec<u8>) -> Vec<u8> {
    let c = crate::format::checksum::mask(crc_parts(&[&b[4..]]));
    b[..4].copy_from_slice(&c.to_le_bytes());
    b
}

#[cfg(test)]
mod tests {
    use super::super::Codec;
    use super::*;

    fn damage_is_caught(codec: Codec, b: &[u8]) {
        for i in 0..b.len() {
            let mut d = b.to_vec();
            d[i] ^= 0x10;
            assert!(codec.decode(&d).is_err(), "flip at {i} undetected");
        }
        assert_eq!(codec.decode(&b[..b.len() - 1]), Err(DecodeError::Truncated));
        assert_eq!(codec.decode(&[0u8; 40]), Err(DecodeError::Zero));
        assert_eq!(codec.decode(&[7u8; 3]), Err(DecodeError::Truncated));
        assert_eq!(codec.announced_len(b), Some(b.len()));
    }

    #[test]
    fn vlog_records_decode_into_the_shared_kinds() {
        for (kind, end) in [
            (Kind::Value, false),
            (Kind::Inline, true),
            (Kind::Tombstone, false),
            (Kind::Relocation, true),
            (Kind::GcCopy, false),
        ] {
            let b = vlog_v1_bytes(kind, end, b"key", 7, b"value");
            let r = Codec::VlogV1.decode(&b).unwrap();
            assert_eq!(
                (r.kind, r.flags, r.key, r.seq, r.value, r.len),
                (kind, u8::from(end), &b"key"[..], 7, &b"value"[..], b.len())
            );
            damage_is_caught(Codec::VlogV1, &b);
        }
        // Kind 5 does not exist in format 1.
        let mut b = vlog_v1_bytes(Kind::Value, false, b"k", 1, b"v");
        b[7] = 5;
        assert_eq!(decode_vlog(&seal(b)), Err(DecodeError::Checksum));
    }

    #[test]
    fn hashkv_records_decode_into_the_shared_kinds() {
        for tag in [false, true] {
            let b = hashkv_v1_bytes(tag, b"key", 9, b"ptr");
            let r = Codec::HashKvV1.decode(&b).unwrap();
            let kind = if tag { Kind::Tag } else { Kind::Value };
            assert_eq!(
                (r.kind, r.flags, r.key, r.seq, r.value, r.len),
                (kind, 0, &b"key"[..], 9, &b"ptr"[..], b.len())
            );
            damage_is_caught(Codec::HashKvV1, &b);
        }
        let mut b = hashkv_v1_bytes(false, b"k", 1, b"v");
        b[4] = 3;
        assert_eq!(decode_hashkv(&seal(b)), Err(DecodeError::Checksum));
    }

    #[test]
    fn an_old_record_reencoded_keeps_its_fields() {
        let b = vlog_v1_bytes(Kind::GcCopy, true, b"key", 42, b"value");
        let old = decode_vlog(&b).unwrap();
        let new = super::super::reencode(&old);
        let r = super::super::decode(&new).unwrap();
        assert_eq!(
            (r.kind, r.flags, r.key, r.seq, r.value),
            (old.kind, old.flags, old.key, old.seq, old.value)
        );
        // The older bytes do not decode as the shared codec.
        assert!(super::super::decode(&b).is_err());
    }

    proptest::proptest! {
        #[test]
        fn legacy_decoders_never_panic(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..100)) {
            let _ = decode_vlog(&bytes);
            let _ = decode_hashkv(&bytes);
            let _ = vlog_announced_len(&bytes);
            let _ = hashkv_announced_len(&bytes);
        }
    }
}
