//! Records inside segments: values and cold-data tags (HashKV §3.2, §3.4).
//!
//! ```text
//! record := crc:u32le  kind:u8  key_len:u32le  value_len:u32le  seq:u64le  key  value
//!   crc    masked CRC-32C of every byte after it (rest of header, key, value)
//!   kind   1 = value: `value` is the user value
//!          2 = tag:   the pair's value was moved to the cold data log by GC;
//!                     `value` is the encoded cold-log ValuePointer
//! ```
//! 21 header bytes. The key and metadata travel with the value so that GC
//! can scan a segment group without the index (§3.2). Frozen: format
//! version 1.

use crate::format::checksum::{crc_parts, mask, unmask};

/// Bytes of a record header.
pub const HEADER_LEN: usize = 21;

/// What a record holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A user value.
    Value,
    /// A tag left by GC for a pair whose value now lives in the cold log.
    Tag,
}

impl Kind {
    fn byte(self) -> u8 {
        match self {
            Kind::Value => 1,
            Kind::Tag => 2,
        }
    }
}

/// Length of the record for `key` and `value`.
pub fn record_len(key: &[u8], value: &[u8]) -> usize {
    HEADER_LEN + key.len() + value.len()
}

/// Appends the record to `dst`.
pub fn encode(dst: &mut Vec<u8>, kind: Kind, key: &[u8], seq: u64, value: &[u8]) {
    let mut head = [0u8; HEADER_LEN - 4];
    head[0] = kind.byte();
    head[1..5].copy_from_slice(&(key.len() as u32).to_le_bytes());
    head[5..9].copy_from_slice(&(value.len() as u32).to_le_bytes());
    head[9..17].copy_from_slice(&seq.to_le_bytes());
    let c = mask(crc_parts(&[&head, key, value]));
    dst.extend_from_slice(&c.to_le_bytes());
    dst.extend_from_slice(&head);
    dst.extend_from_slice(key);
    dst.extend_from_slice(value);
}

/// A decoded record borrowing its bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Record<'a> {
    /// Value or tag.
    pub kind: Kind,
    /// The user key.
    pub key: &'a [u8],
    /// Sequence number of the write that stored the value.
    pub seq: u64,
    /// The value (for a tag: the encoded cold-log pointer).
    pub value: &'a [u8],
    /// Total record length in bytes.
    pub len: usize,
}

/// Why a record could not be decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecodeError {
    /// Fewer bytes than the header or the lengths announce.
    Truncated,
    /// All-zero header (never-written space).
    Zero,
    /// Checksum mismatch or an unknown kind.
    Checksum,
}

/// Total length announced by the header at the start of `buf`.
pub fn announced_len(buf: &[u8]) -> Option<usize> {
    if buf.len() < HEADER_LEN {
        return None;
    }
    let k = u32::from_le_bytes(buf[5..9].try_into().ok()?) as usize;
    let v = u32::from_le_bytes(buf[9..13].try_into().ok()?) as usize;
    HEADER_LEN.checked_add(k)?.checked_add(v)
}

/// Decodes the record at the start of `buf`.
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
    let klen = u32::from_le_bytes(buf[5..9].try_into().expect("4 bytes")) as usize;
    let key = &buf[HEADER_LEN..HEADER_LEN + klen];
    let value = &buf[HEADER_LEN + klen..len];
    if crc_parts(&[&buf[4..HEADER_LEN], key, value]) != stored {
        return Err(DecodeError::Checksum);
    }
    let kind = match buf[4] {
        1 => Kind::Value,
        2 => Kind::Tag,
        _ => return Err(DecodeError::Checksum),
    };
    let seq = u64::from_le_bytes(buf[13..21].try_into().expect("8 bytes"));
    Ok(Record {
        kind,
        key,
        seq,
        value,
        len,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrip_and_damage() {
        let mut b = Vec::new();
        encode(&mut b, Kind::Value, b"key", 7, b"value");
        assert_eq!(b.len(), record_len(b"key", b"value"));
        let r = decode(&b).unwrap();
        assert_eq!(
            (r.kind, r.key, r.seq, r.value, r.len),
            (Kind::Value, &b"key"[..], 7, &b"value"[..], b.len())
        );
        for i in 0..b.len() {
            let mut d = b.clone();
            d[i] ^= 0x10;
            assert!(decode(&d).is_err(), "flip at {i} undetected");
        }
        assert_eq!(decode(&b[..b.len() - 1]), Err(DecodeError::Truncated));
        assert_eq!(decode(&[0u8; 40]), Err(DecodeError::Zero));
        let mut t = Vec::new();
        encode(&mut t, Kind::Tag, b"k", 1, b"ptr");
        assert_eq!(decode(&t).unwrap().kind, Kind::Tag);
        assert_eq!(announced_len(&t), Some(t.len()));
    }
}
