//! Block handles and the fixed-size footer that closes every table.
//!
//! A [`BlockHandle`] locates a block: its offset and the size of its contents
//! (the 5-byte trailer follows and is not counted). The [`Footer`] is the
//! last [`FOOTER_LEN`] bytes of the file and is the entry point of a reader:
//! it holds the handles of the metaindex and index blocks, the format
//! version, a masked CRC-32C of the bytes before it, and the magic number.
//!
//! Decoding checks, in order: the magic (else "not a sepkv table"), the
//! checksum, the format version (else "unsupported version"), and that both
//! handles decode. The last 16 bytes (version, checksum, magic) keep their
//! place in every format version, so a future version is recognised as such.
//! Values here are plain data (`Send + Sync`).

use crate::format::checksum;
use crate::format::coding::{get_fixed32, get_fixed64, get_varint64, put_varint64};

/// Longest encoding of a block handle (two 10-byte varints).
pub(crate) const MAX_HANDLE_LEN: usize = 20;
/// Bytes of the footer.
pub(crate) const FOOTER_LEN: usize = 2 * MAX_HANDLE_LEN + 4 + 4 + 8;
/// The table format version written and read by this code.
pub(crate) const FORMAT_VERSION: u32 = 1;
/// Magic number closing every table; on disk the bytes read `sepkvSST`.
pub(crate) const TABLE_MAGIC: u64 = u64::from_le_bytes(*b"sepkvSST");

/// Location of a block in the table file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct BlockHandle {
    /// Offset of the first byte of the block.
    pub(crate) offset: u64,
    /// Size of the block contents, without the trailer.
    pub(crate) size: u64,
}

impl BlockHandle {
    /// Appends the varint encoding.
    pub(crate) fn encode_to(&self, dst: &mut Vec<u8>) {
        put_varint64(dst, self.offset);
        put_varint64(dst, self.size);
    }

    /// The encoding as a new vector.
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(MAX_HANDLE_LEN);
        self.encode_to(&mut v);
        v
    }

    /// Decodes a handle from the front of `src`.
    pub(crate) fn decode_from(src: &mut &[u8]) -> Option<BlockHandle> {
        let offset = get_varint64(src)?;
        let size = get_varint64(src)?;
        Some(BlockHandle { offset, size })
    }

    /// Decodes a value that must be exactly one handle.
    pub(crate) fn decode_exact(mut src: &[u8]) -> Option<BlockHandle> {
        let h = Self::decode_from(&mut src)?;
        src.is_empty().then_some(h)
    }
}

/// The decoded footer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Footer {
    /// The metaindex block (meta block name → handle).
    pub(crate) metaindex: BlockHandle,
    /// The index block (separator key → data block handle).
    pub(crate) index: BlockHandle,
}

impl Footer {
    /// Encodes the footer.
    pub(crate) fn encode(&self) -> [u8; FOOTER_LEN] {
        let mut v = Vec::with_capacity(FOOTER_LEN);
        self.metaindex.encode_to(&mut v);
        self.index.encode_to(&mut v);
        v.resize(2 * MAX_HANDLE_LEN, 0);
        v.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
        let crc = checksum::mask(checksum::crc(&v));
        v.extend_from_slice(&crc.to_le_bytes());
        v.extend_from_slice(&TABLE_MAGIC.to_le_bytes());
        let mut out = [0u8; FOOTER_LEN];
        out.copy_from_slice(&v);
        out
    }

    /// Decodes a footer; the error is the reason of the corruption.
    pub(crate) fn decode(bytes: &[u8]) -> Result<Footer, String> {
        if bytes.len() != FOOTER_LEN {
            return Err(format!(
                "footer is {} bytes, expected {FOOTER_LEN}",
                bytes.len()
            ));
        }
        let (covered, tail) = bytes.split_at(2 * MAX_HANDLE_LEN + 4);
        let (mut handles, mut version) = covered.split_at(2 * MAX_HANDLE_LEN);
        let mut tail = tail;
        let stored_crc = get_fixed32(&mut tail).unwrap_or(0);
        let magic = get_fixed64(&mut tail).unwrap_or(0);
        if magic != TABLE_MAGIC {
            return Err(format!("not a sepkv table: bad magic number {magic:#018x}"));
        }
        let actual = checksum::crc(covered);
        if checksum::unmask(stored_crc) != actual {
            return Err("footer checksum mismatch".to_string());
        }
        let version = get_fixed32(&mut version).unwrap_or(0);
        if version != FORMAT_VERSION {
            return Err(format!(
                "unsupported table format version {version} (this build reads version {FORMAT_VERSION})"
            ));
        }
        let metaindex = BlockHandle::decode_from(&mut handles)
            .ok_or_else(|| "malformed metaindex handle in footer".to_string())?;
        let index = BlockHandle::decode_from(&mut handles)
            .ok_or_else(|| "malformed index handle in footer".to_string())?;
        Ok(Footer { metaindex, index })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Footer {
        Footer {
            metaindex: BlockHandle {
                offset: 123_456,
                size: 42,
            },
            index: BlockHandle {
                offset: u64::MAX,
                size: u64::MAX,
            },
        }
    }

    #[test]
    fn roundtrip() {
        let f = sample();
        let bytes = f.encode();
        assert_eq!(&bytes[FOOTER_LEN - 8..], b"sepkvSST");
        assert_eq!(Footer::decode(&bytes), Ok(f));
        let h = BlockHandle {
            offset: 7,
            size: 300,
        };
        assert_eq!(BlockHandle::decode_exact(&h.encode()), Some(h));
        let mut long = h.encode();
        long.push(0);
        assert_eq!(BlockHandle::decode_exact(&long), None);
    }

    #[test]
    fn every_bit_flip_is_detected() {
        let bytes = sample().encode();
        for i in 0..FOOTER_LEN * 8 {
            let mut b = bytes;
            b[i / 8] ^= 1 << (i % 8);
            assert!(Footer::decode(&b).is_err(), "flip of bit {i} undetected");
        }
    }

    #[test]
    fn reasons_name_the_problem() {
        let mut b = sample().encode();
        b[FOOTER_LEN - 1] ^= 0xff;
        assert!(Footer::decode(&b)
            .unwrap_err()
            .contains("not a sepkv table"));
        // A well-formed footer of another version.
        let mut v = sample().encode()[..2 * MAX_HANDLE_LEN].to_vec();
        v.extend_from_slice(&2u32.to_le_bytes());
        let crc = checksum::mask(checksum::crc(&v));
        v.extend_from_slice(&crc.to_le_bytes());
        v.extend_from_slice(&TABLE_MAGIC.to_le_bytes());
        assert!(Footer::decode(&v).unwrap_err().contains("unsupported"));
        assert!(Footer::decode(&v[1..]).is_err());
    }
}
