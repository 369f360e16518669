//! Key and value generation for the db_bench-style workloads: fixed-size
//! decimal keys, deterministic value bytes, seeded random number generators
//! and a memory-free random permutation of record numbers.

use rand::rngs::StdRng;
use rand::{Rng, RngCore, SeedableRng};
use std::io::Write;
use std::sync::Arc;

/// A seeded generator for stream `stream` of a run with seed `seed` (each
/// thread and each purpose gets its own stream).
pub fn rng(seed: u64, stream: u64) -> StdRng {
    StdRng::seed_from_u64(splitmix64(
        seed ^ splitmix64(stream.wrapping_add(0x5851_F42D_4C95_7F2D)),
    ))
}

/// SplitMix64's output function: a bijective 64-bit mixer.
pub fn splitmix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Number of decimal digits of `n` (1 for 0).
pub fn decimal_digits(n: u64) -> usize {
    let mut d = 1;
    let mut n = n / 10;
    while n > 0 {
        d += 1;
        n /= 10;
    }
    d
}

/// Writes the key of record `n` for the db_bench-style workloads into
/// `out`: `n` in decimal, zero-padded to `key_size` bytes (db_bench's
/// `%016d` for 16-byte keys). `key_size` must be at least the digits of the
/// largest record number (checked by the configuration).
pub fn bench_key(n: u64, key_size: usize, out: &mut Vec<u8>) {
    out.clear();
    // Writing to a Vec cannot fail.
    let _ = write!(out, "{n:0key_size$}");
}

/// Deterministic pseudo-random value bytes, served as slices of a shared
/// buffer (like db_bench's `RandomGenerator`), so producing a value costs
/// no allocation and no random number generation.
#[derive(Clone)]
pub struct ValueSource {
    buf: Arc<Vec<u8>>,
    pos: usize,
    big: Vec<u8>,
}

/// Size of the shared value buffer (bytes).
const VALUE_BUFFER: usize = 4 << 20;

impl ValueSource {
    /// A source whose bytes are determined by `seed`.
    pub fn new(seed: u64) -> Self {
        let mut buf = vec![0u8; VALUE_BUFFER];
        rng(seed, u64::MAX).fill_bytes(&mut buf);
        // Printable ASCII, like YCSB's values.
        for b in &mut buf {
            *b = b' ' + (*b % 95);
        }
        ValueSource {
            buf: Arc::new(buf),
            pos: 0,
            big: Vec::new(),
        }
    }

    /// A copy that shares the buffer and starts at a different offset
    /// (one per thread).
    pub fn fork(&self, stream: u64) -> Self {
        ValueSource {
            buf: self.buf.clone(),
            pos: (splitmix64(stream) as usize) % (VALUE_BUFFER / 2),
            big: Vec::new(),
        }
    }

    /// The next `len` value bytes.
    pub fn next(&mut self, len: usize) -> &[u8] {
        if len > VALUE_BUFFER / 2 {
            // Rare huge values: repeat the buffer.
            self.big.clear();
            while self.big.len() < len {
                let take = (len - self.big.len()).min(VALUE_BUFFER);
                self.big.extend_from_slice(&self.buf[..take]);
            }
            return &self.big;
        }
        if self.pos + len > self.buf.len() {
            self.pos = 0;
        }
        let s = &self.buf[self.pos..self.pos + len];
        // Step by an odd amount so successive values differ.
        self.pos += len.max(1) / 2 + 1;
        s
    }
}

/// A pseudo-random permutation of `0..n` that needs no memory: a 4-round
/// Feistel network over the smallest even number of bits covering `n`,
/// with cycle walking for values `>= n`. Every index `0..n` maps to a
/// distinct record number `0..n`.
#[derive(Debug, Clone)]
pub struct Permutation {
    n: u64,
    half_bits: u32,
    keys: [u64; 4],
}

impl Permutation {
    /// The permutation of `0..n` chosen by `seed`.
    pub fn new(n: u64, seed: u64) -> Self {
        let bits = 64 - n.saturating_sub(1).leading_zeros();
        let half_bits = bits.div_ceil(2).max(1);
        let mut r = rng(seed, 0x0FE1_57E1);
        Permutation {
            n,
            half_bits,
            keys: [r.gen(), r.gen(), r.gen(), r.gen()],
        }
    }

    fn round(&self, x: u64) -> u64 {
        let mask = (1u64 << self.half_bits) - 1;
        let (mut l, mut r) = (x >> self.half_bits, x & mask);
        for k in self.keys {
            let f = splitmix64(r ^ k) & mask;
            (l, r) = (r, l ^ f);
        }
        (l << self.half_bits) | r
    }

    /// The record number at position `i` (`i < n`).
    pub fn get(&self, i: u64) -> u64 {
        debug_assert!(i < self.n);
        let mut x = self.round(i);
        while x >= self.n {
            x = self.round(x);
        }
        x
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn permutation_is_bijective() {
        for n in [1u64, 2, 3, 10, 1000, 4097] {
            let p = Permutation::new(n, 7);
            let mut seen = vec![false; n as usize];
            for i in 0..n {
                let x = p.get(i);
                assert!(x < n);
                assert!(!seen[x as usize], "n={n} dup {x}");
                seen[x as usize] = true;
            }
        }
        let p = Permutation::new(1000, 1);
        let q = Permutation::new(1000, 2);
        assert!((0..1000).any(|i| p.get(i) != q.get(i)));
    }

    #[test]
    fn keys_are_padded() {
        let mut k = Vec::new();
        bench_key(42, 16, &mut k);
        assert_eq!(k, b"0000000000000042");
        assert_eq!(decimal_digits(0), 1);
        assert_eq!(decimal_digits(999), 3);
        assert_eq!(decimal_digits(1000), 4);
    }

    #[test]
    fn values_have_requested_size() {
        let mut v = ValueSource::new(1);
        assert_eq!(v.next(100).len(), 100);
        assert_eq!(v.next(0).len(), 0);
        assert_eq!(v.next(VALUE_BUFFER * 2 + 3).len(), VALUE_BUFFER * 2 + 3);
        let a = v.next(10).to_vec();
        let b = v.next(10).to_vec();
        assert_ne!(a, b);
    }
}
