//! CRC-32C checksums, masked before they are stored.
//!
//! A CRC of data that itself contains CRCs is weak, so stored checksums are
//! rotated and offset (the masking LevelDB introduced); [`unmask`] undoes it.

const MASK_DELTA: u32 = 0xa282_ead8;

/// CRC-32C of `data`.
pub fn crc(data: &[u8]) -> u32 {
    crc32c::crc32c(data)
}

/// CRC-32C of the concatenation of `parts`.
pub fn crc_parts(parts: &[&[u8]]) -> u32 {
    parts.iter().fold(0, |c, p| crc32c::crc32c_append(c, p))
}

/// Masks a CRC for storage.
pub fn mask(crc: u32) -> u32 {
    crc.rotate_right(15).wrapping_add(MASK_DELTA)
}

/// Inverse of [`mask`].
pub fn unmask(masked: u32) -> u32 {
    masked.wrapping_sub(MASK_DELTA).rotate_left(15)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mask_roundtrip_and_differs() {
        let c = crc(b"hello");
        assert_ne!(mask(c), c);
        assert_eq!(unmask(mask(c)), c);
        assert_eq!(crc_parts(&[b"he", b"llo"]), c);
    }
}
