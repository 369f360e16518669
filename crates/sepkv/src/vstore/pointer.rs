//! The value pointer stored in the index for a separated value.
//!
//! ```text
//! pointer := varint64 file_id  varint64 offset  varint32 length  varint64 aux
//! ```
//! `file_id` names the value-store file (or segment / band / TrieTable),
//! `offset` is the byte offset of the record in it, `length` the record's
//! length in bytes, and `aux` a layout-specific word (0 when unused).
//! Frozen: format version 1.

use crate::format::coding::{get_varint32, get_varint64, put_varint32, put_varint64};

/// Where a separated value lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct ValuePointer {
    /// Value-store file, segment, band or table id.
    pub file_id: u64,
    /// Byte offset of the record.
    pub offset: u64,
    /// Length of the record in bytes.
    pub length: u32,
    /// Layout-specific word.
    pub aux: u64,
}

impl ValuePointer {
    /// Appends the encoding to `dst`.
    pub fn encode_to(&self, dst: &mut Vec<u8>) {
        put_varint64(dst, self.file_id);
        put_varint64(dst, self.offset);
        put_varint32(dst, self.length);
        put_varint64(dst, self.aux);
    }

    /// The encoding as a new vector.
    pub fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(16);
        self.encode_to(&mut v);
        v
    }

    /// Whether the record `[offset, offset + length)` ends at or before
    /// `len` bytes. False when the end overflows: the pointer was read from
    /// disk and may be damaged.
    pub fn ends_within(&self, len: u64) -> bool {
        self.offset
            .checked_add(self.length as u64)
            .is_some_and(|end| end <= len)
    }

    /// Decodes a pointer that must span all of `src`; `None` when malformed.
    pub fn decode(mut src: &[u8]) -> Option<ValuePointer> {
        let p = ValuePointer {
            file_id: get_varint64(&mut src)?,
            offset: get_varint64(&mut src)?,
            length: get_varint32(&mut src)?,
            aux: get_varint64(&mut src)?,
        };
        src.is_empty().then_some(p)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn roundtrip(f in any::<u64>(), o in any::<u64>(), l in any::<u32>(), a in any::<u64>()) {
            let p = ValuePointer { file_id: f, offset: o, length: l, aux: a };
            prop_assert_eq!(ValuePointer::decode(&p.encode()), Some(p));
        }
    }

    #[test]
    fn ends_within_never_overflows() {
        let p = ValuePointer {
            file_id: 1,
            offset: u64::MAX - 3,
            length: 10,
            aux: 0,
        };
        assert!(!p.ends_within(u64::MAX));
        let p = ValuePointer { offset: 5, ..p };
        assert!(p.ends_within(15) && !p.ends_within(14));
    }

    #[test]
    fn trailing_bytes_rejected() {
        let mut e = ValuePointer::default().encode();
        e.push(0);
        assert_eq!(ValuePointer::decode(&e), None);
    }
}
