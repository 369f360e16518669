//! Value-log records (WiscKey §3.3.2, with the checksum §3.3.3 suggests).
//!
//! ```text
//! record := crc:u32le  key_len:u32le  value_len:u32le  seq:u64le  key  value
//!   crc   masked CRC-32C of every byte after it (header rest, key, value)
//! ```
//! 20 header bytes. Frozen: format version 1.

use crate::format::checksum::{crc_parts, mask, unmask};

/// Bytes of a record header.
pub const HEADER_LEN: usize = 20;

/// Length of the record for `key` and `value`.
pub fn record_len(key: &[u8], value: &[u8]) -> usize {
    HEADER_LEN + key.len() + value.len()
}

/// Appends the record to `dst`.
pub fn encode(dst: &mut Vec<u8>, key: &[u8], seq: u64, value: &[u8]) {
    let mut head = [0u8; HEADER_LEN - 4];
    head[0..4].copy_from_slice(&(key.len() as u32).to_le_bytes());
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
    let klen = word(4) as usize;
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
    Ok(Record {
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
        encode(&mut b, b"key", 7, b"value");
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
