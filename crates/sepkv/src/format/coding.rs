//! Little-endian fixed-width integers, LEB128 varints and length-prefixed
//! byte strings.
//!
//! Decoders take a cursor (`&mut &[u8]`) and return `None` on truncated or
//! overlong input; callers turn that into a `Corruption` error naming file and
//! offset. Decoders never panic on any input.

/// Appends `v` as 4 little-endian bytes.
pub fn put_fixed32(dst: &mut Vec<u8>, v: u32) {
    dst.extend_from_slice(&v.to_le_bytes());
}

/// Appends `v` as 8 little-endian bytes.
pub fn put_fixed64(dst: &mut Vec<u8>, v: u64) {
    dst.extend_from_slice(&v.to_le_bytes());
}

/// Appends `v` as a varint (1–5 bytes).
pub fn put_varint32(dst: &mut Vec<u8>, v: u32) {
    put_varint64(dst, v as u64)
}

/// Appends `v` as a varint (1–10 bytes).
pub fn put_varint64(dst: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        dst.push((v as u8) | 0x80);
        v >>= 7;
    }
    dst.push(v as u8);
}

/// Appends a varint length followed by the bytes.
pub fn put_length_prefixed(dst: &mut Vec<u8>, data: &[u8]) {
    put_varint64(dst, data.len() as u64);
    dst.extend_from_slice(data);
}

/// Number of bytes `v` takes as a varint.
pub fn varint_len(mut v: u64) -> usize {
    let mut n = 1;
    while v >= 0x80 {
        v >>= 7;
        n += 1;
    }
    n
}

/// Reads 4 little-endian bytes from the front of `src`.
pub fn get_fixed32(src: &mut &[u8]) -> Option<u32> {
    let (head, rest) = src.split_first_chunk::<4>()?;
    *src = rest;
    Some(u32::from_le_bytes(*head))
}

/// Reads 8 little-endian bytes from the front of `src`.
pub fn get_fixed64(src: &mut &[u8]) -> Option<u64> {
    let (head, rest) = src.split_first_chunk::<8>()?;
    *src = rest;
    Some(u64::from_le_bytes(*head))
}

/// Reads a varint of at most 64 bits.
#[inline]
pub fn get_varint64(src: &mut &[u8]) -> Option<u64> {
    if let Some(&b) = src.first() {
        if b < 0x80 {
            *src = &src[1..];
            return Some(b as u64);
        }
    }
    let mut v: u64 = 0;
    for (i, &b) in src.iter().enumerate().take(10) {
        let bits = (b & 0x7f) as u64;
        if i == 9 && bits > 1 {
            return None;
        }
        v |= bits << (7 * i);
        if b & 0x80 == 0 {
            *src = &src[i + 1..];
            return Some(v);
        }
    }
    None
}

/// Reads a varint of at most 32 bits.
#[inline]
pub fn get_varint32(src: &mut &[u8]) -> Option<u32> {
    let mut probe = *src;
    let v = get_varint64(&mut probe)?;
    let v = u32::try_from(v).ok()?;
    *src = probe;
    Some(v)
}

/// Reads a varint length and that many bytes.
pub fn get_length_prefixed<'a>(src: &mut &'a [u8]) -> Option<&'a [u8]> {
    let mut probe = *src;
    let len = usize::try_from(get_varint64(&mut probe)?).ok()?;
    if probe.len() < len {
        return None;
    }
    let (data, rest) = probe.split_at(len);
    *src = rest;
    Some(data)
}

/// Reads `n` raw bytes.
pub fn get_bytes<'a>(src: &mut &'a [u8], n: usize) -> Option<&'a [u8]> {
    if src.len() < n {
        return None;
    }
    let (data, rest) = src.split_at(n);
    *src = rest;
    Some(data)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn varint_roundtrip(v in any::<u64>()) {
            let mut b = Vec::new();
            put_varint64(&mut b, v);
            prop_assert_eq!(b.len(), varint_len(v));
            let mut s = &b[..];
            prop_assert_eq!(get_varint64(&mut s), Some(v));
            prop_assert!(s.is_empty());
        }

        #[test]
        fn decoders_never_panic(data in proptest::collection::vec(any::<u8>(), 0..32)) {
            let mut s = &data[..];
            let _ = get_varint64(&mut s);
            let mut s = &data[..];
            let _ = get_varint32(&mut s);
            let mut s = &data[..];
            let _ = get_length_prefixed(&mut s);
            let mut s = &data[..];
            let _ = get_fixed64(&mut s);
        }
    }

    #[test]
    fn truncated_varint_is_none() {
        let mut s: &[u8] = &[0x80, 0x80];
        assert_eq!(get_varint64(&mut s), None);
        let mut s: &[u8] = &[0xff; 11];
        assert_eq!(get_varint64(&mut s), None);
    }
}
