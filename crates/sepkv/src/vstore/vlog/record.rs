//! Value-log records (WiscKey §3.3.2, with the checksum §3.3.3 suggests).
//!
//! ```text
//! record := crc:u32le  meta:u32le  value_len:u32le  seq:u64le  key  value
//!   crc   masked CRC-32C of every byte after it (header rest, key, value)
//!   meta  bits 0..24 key length, bits 24..28 kind, bit 31 end of batch
//! kind  := 0 value        a separated value written by a user
//!        | 1 inline       a small value kept inline in the index  \
//!        | 2 tombstone    a delete                                  > only when the
//!        | 3 relocation   value = encoded pointer installed by GC  /  vLog is the log
//!        | 4 gc copy      a live value GC copied to the head
//! ```
//! 20 header bytes. The last record of each append carries the end-of-batch
//! bit; recovery applies whole batches only. Frozen: format version 1.

use crate::format::checksum::{crc_parts, mask, unmask};

/// Bytes of a record header.
pub const HEADER_LEN: usize = 20;

/// What a record is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    /// A separated value written by a user.
    Value = 0,
    /// A small value kept inline in the index (log mode only).
    Inline = 1,
    /// A delete (log mode only).
    Tombstone = 2,
    /// A pointer installed by GC; the value is the encoded pointer (log
    /// mode only).
    Relocation = 3,
    /// A live value GC copied to the head.
    GcCopy = 4,
}

impl Kind {
    fn from_bits(b: u32) -> Option<Kind> {
        Some(match b {
            0 => Kind::Value,
            1 => Kind::Inline,
            2 => Kind::Tombstone,
            3 => Kind::Relocation,
            4 => Kind::GcCopy,
            _ => return None,
        })
    }

    /// True for records a value pointer may address.
    pub fn holds_value(self) -> bool {
        matches!(self, Kind::Value | Kind::GcCopy)
    }
}

const KEY_BITS: u32 = 0x00ff_ffff;
const BATCH_END: u32 = 1 << 31;

/// Length of the record for `key` and `value`.
pub fn record_len(key: &[u8], value: &[u8]) -> usize {
    HEADER_LEN + key.len() + value.len()
}

/// Appends the record to `dst`.
pub fn encode(dst: &mut Vec<u8>, kind: Kind, batch_end: bool, key: &[u8], seq: u64, value: &[u8]) {
    debug_assert!(key.len() as u32 <= KEY_BITS);
    let meta = (key.len() as u32 & KEY_BITS)
        | ((kind as u32) << 24)
        | if batch_end { BATCH_END } else { 0 };
    let mut head = [0u8; HEADER_LEN - 4];
    head[0..4].copy_from_slice(&meta.to_le_bytes());
    head[4..8].copy_from_slice(&(value.len() as u32).to_le_bytes());
    head[8..16].copy_from_slice(&seq.to_le_bytes());
    let c = mask(crc_parts(&[&head, key, value]));
    dst.extend_from_slice(&c.to_le_bytes());
    dst.extend_from_slice(&head);
    dst.extend_from_slice(key);
    dst.extend_from_slice(value);
}

/// A decoded record borrowing its bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Record<'a> {
    /// The user key.
    pub key: &'a [u8],
    /// Sequence number of the write that stored it.
    pub seq: u64,
    /// The value.
    pub value: &'a [u8],
    /// Total record length in bytes.
    pub len: usize,
    /// What the record is.
    pub kind: Kind,
    /// True for the last record of a batch.
    pub batch_end: bool,
}

/// Why a record could not be decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecodeError {
    /// Fewer bytes than the header or the lengths announce.
    Truncated,
    /// All zero bytes (preallocated or punched space).
    Zero,
    /// Checksum mismatch.
    Checksum,
}

/// Decodes the record at the start of `buf`.
pub fn decode(buf: &[u8]) -> Result<Record<'_>, DecodeError> {
    if buf.len() < HEADER_LEN {
        return Err(DecodeError::Truncated);
    }
    if buf[..HEADER_LEN].iter().all(|&b| b == 0) {
        return Err(DecodeError::Zero);
    }
    let word = |i: usize| u32::from_le_bytes(buf[i..i + 4].try_into().expect("4 bytes"));
    let stored = unmask(word(0));
    let meta = word(4);
    let klen = (meta & KEY_BITS) as usize;
    let vlen = word(8) as usize;
    let seq = u64::from_le_bytes(buf[12..20].try_into().expect("8 bytes"));
    let len = HEADER_LEN
        .checked_add(klen)
        .and_then(|x| x.checked_add(vlen))
        .ok_or(DecodeError::Checksum)?;
    if buf.len() < len {
        return Err(DecodeError::Truncated);
    }
    let key = &buf[HEADER_LEN..HEADER_LEN + klen];
    let value = &buf[HEADER_LEN + klen..len];
    if crc_parts(&[&buf[4..HEADER_LEN], key, value]) != stored {
        return Err(DecodeError::Checksum);
    }
    let kind = Kind::from_bits((meta >> 24) & 0x7f).ok_or(DecodeError::Checksum)?;
    Ok(Record {
        key,
        seq,
        value,
        len,
        kind,
        batch_end: meta & BATCH_END != 0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrip_and_damage() {
        let mut b = Vec::new();
        encode(&mut b, Kind::Tombstone, true, b"key", 7, b"value");
        assert_eq!(b.len(), record_len(b"key", b"value"));
        let r = decode(&b).unwrap();
        assert_eq!(
            (r.key, r.seq, r.value, r.len),
            (&b"key"[..], 7, &b"value"[..], b.len())
        );
        for i in 0..b.len() {
            let mut d = b.clone();
            d[i] ^= 0x10;
            assert!(decode(&d).is_err(), "flip at {i} undetected");
        }
        assert_eq!(decode(&b[..b.len() - 1]), Err(DecodeError::Truncated));
        assert_eq!(decode(&[0u8; 40]), Err(DecodeError::Zero));
    }
}
