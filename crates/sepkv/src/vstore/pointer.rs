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

    /// Decodes a pointer that must span all of `src`; `None` when malformed
    /// (trailing bytes, or a record that would end past `u64::MAX`).
    pub fn decode(mut src: &[u8]) -> Option<ValuePointer> {
        let p = ValuePointer {
            file_id: get_varint64(&mut src)?,
            offset: get_varint64(&mut src)?,
            length: get_varint32(&mut src)?,
            aux: get_varint64(&mut src)?,
        };
        p.offset.checked_add(p.length as u64)?;
        src.is_empty().then_some(p)
    }

    /// The byte offset just past the record (`offset + length`, saturating:
    /// a pointer read from damaged bytes never overflows a range check).
    pub fn end(&self) -> u64 {
        self.offset.saturating_add(self.length as u64)
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
    fn overflowing_record_end_rejected() {
        let p = ValuePointer {
            offset: u64::MAX - 2,
            length: 3,
            ..Default::default()
        };
        assert_eq!(ValuePointer::decode(&p.encode()), None);
        assert_eq!(p.end(), u64::MAX);
        let ok = ValuePointer { length: 2, ..p };
        assert_eq!(ValuePointer::decode(&ok.encode()), Some(ok));
    }

    #[test]
    fn trailing_bytes_rejected() {
        let mut e = ValuePointer::default().encode();
        e.push(0);
        assert_eq!(ValuePointer::decode(&e), None);
    }
}
