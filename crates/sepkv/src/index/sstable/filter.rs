//! The table's bloom filter over user keys.
//!
//! One filter covers the whole table. Each distinct user key is hashed once
//! with XXH3-64; the `k` probe positions are derived by double hashing
//! (`h1 + i * h2`, with `h1` the hash and `h2` the hash rotated by 32 bits,
//! forced odd), reduced modulo the number of bits `m`. With `b` bits per key,
//! `k = round(b * ln 2)` clamped to `[1, 30]`, which minimises the
//! false-positive rate `(1 - e^(-k/b))^k` (about 0.8 % for `b = 10`).
//!
//! Encoding (frozen, format version 1): the bit array, bit `j` being bit
//! `j % 8` of byte `j / 8`, followed by one byte holding `k`. The array has at
//! least 64 bits.
//!
//! Invariant: a key added to the builder is always reported as possibly
//! present (no false negatives). A parsed [`BloomFilter`] is immutable and
//! `Send + Sync`.

use xxhash_rust::xxh3::xxh3_64;

/// Smallest bit array, so that tiny tables do not get a useless filter.
const MIN_BITS: u64 = 64;
/// Largest number of probes.
const MAX_PROBES: usize = 30;

fn probes_for(bits_per_key: usize) -> usize {
    ((bits_per_key as f64) * std::f64::consts::LN_2)
        .round()
        .clamp(1.0, MAX_PROBES as f64) as usize
}

/// Yields the `k` bit positions of `hash` in an array of `m` bits.
fn positions(hash: u64, k: usize, m: u64) -> impl Iterator<Item = u64> {
    let delta = hash.rotate_left(32) | 1;
    (0..k as u64).map(move |i| hash.wrapping_add(i.wrapping_mul(delta)) % m)
}

/// The hash a filter keeps of `user_key` (XXH3-64).
pub(crate) fn key_hash(user_key: &[u8]) -> u64 {
    xxh3_64(user_key)
}

/// Collects key hashes while a table is written.
#[derive(Debug)]
pub(crate) struct FilterBuilder {
    bits_per_key: usize,
    hashes: Vec<u64>,
}

impl FilterBuilder {
    /// A builder spending `bits_per_key` bits per distinct key (must be > 0).
    pub(crate) fn new(bits_per_key: usize) -> Self {
        debug_assert!(bits_per_key > 0);
        FilterBuilder {
            bits_per_key,
            hashes: Vec::new(),
        }
    }

    /// Adds a user key. Consecutive repeats (versions of one key) are stored
    /// once.
    pub(crate) fn add_key(&mut self, user_key: &[u8]) {
        let h = key_hash(user_key);
        if self.hashes.last() != Some(&h) {
            self.hashes.push(h);
        }
    }

    /// Size in bytes of the filter `finish` would produce now.
    pub(crate) fn estimated_size(&self) -> usize {
        self.bit_count().div_ceil(8) as usize + 1
    }

    fn bit_count(&self) -> u64 {
        (self.hashes.len() as u64)
            .saturating_mul(self.bits_per_key as u64)
            .max(MIN_BITS)
    }

    /// Encodes the filter.
    pub(crate) fn finish(&self) -> Vec<u8> {
        let bytes = self.bit_count().div_ceil(8);
        let m = bytes * 8;
        let k = probes_for(self.bits_per_key);
        let mut out = vec![0u8; bytes as usize + 1];
        for &h in &self.hashes {
            for bit in positions(h, k, m) {
                out[(bit / 8) as usize] |= 1 << (bit % 8);
            }
        }
        out[bytes as usize] = k as u8;
        out
    }
}

/// Whether every one of the `k` bits of `hash` is set in `bits`.
fn probe(bits: &[u8], k: usize, hash: u64) -> bool {
    let m = bits.len() as u64 * 8;
    positions(hash, k, m).all(|bit| {
        bits.get((bit / 8) as usize)
            .is_some_and(|b| b & (1 << (bit % 8)) != 0)
    })
}

/// A decoded bloom filter.
#[derive(Debug)]
pub(crate) struct BloomFilter {
    bits: Vec<u8>,
    k: usize,
}

impl BloomFilter {
    /// Decodes a filter block; the error is the reason of the corruption.
    pub(crate) fn parse(mut data: Vec<u8>) -> Result<BloomFilter, String> {
        let k = Self::check(&data)?;
        data.pop();
        Ok(BloomFilter { bits: data, k })
    }

    /// Checks the encoded filter `data` (bits, then the probe count) and
    /// returns its probe count; the error is the reason of the corruption.
    pub(crate) fn check(data: &[u8]) -> Result<usize, String> {
        let Some((&k, bits)) = data.split_last() else {
            return Err("empty bloom filter block".to_string());
        };
        let k = k as usize;
        if !(1..=MAX_PROBES).contains(&k) {
            return Err(format!("bloom filter probe count {k} out of range"));
        }
        if (bits.len() as u64) * 8 < MIN_BITS {
            return Err(format!("bloom filter of {} bytes is too small", bits.len()));
        }
        Ok(k)
    }

    /// [`BloomFilter::may_contain_hash`] on an encoded filter that passed
    /// [`BloomFilter::check`], without decoding it.
    pub(crate) fn encoded_may_contain_hash(data: &[u8], hash: u64) -> bool {
        match data.split_last() {
            Some((&k, bits)) => probe(bits, k as usize, hash),
            None => true,
        }
    }

    /// False when `user_key` is certainly not in the table.
    pub(crate) fn may_contain(&self, user_key: &[u8]) -> bool {
        self.may_contain_hash(key_hash(user_key))
    }

    /// [`BloomFilter::may_contain`] for a key whose [`key_hash`] is known,
    /// so that a lookup probing many filters hashes its key once.
    pub(crate) fn may_contain_hash(&self, hash: u64) -> bool {
        probe(&self.bits, self.k, hash)
    }

    /// Bytes held.
    pub(crate) fn size(&self) -> usize {
        self.bits.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(i: u64) -> Vec<u8> {
        format!("user-key-{i:08}").into_bytes()
    }

    #[test]
    fn probe_count_follows_bits_per_key() {
        assert_eq!(probes_for(1), 1);
        assert_eq!(probes_for(10), 7);
        assert_eq!(probes_for(64), 30);
    }

    #[test]
    fn no_false_negatives_and_low_false_positive_rate() {
        let n = 20_000;
        let mut b = FilterBuilder::new(10);
        for i in 0..n {
            b.add_key(&key(i));
            b.add_key(&key(i)); // a second version of the same key
        }
        let encoded = b.finish();
        assert_eq!(encoded.len(), b.estimated_size());
        assert_eq!(encoded.len(), (n * 10 / 8) as usize + 1);
        let f = BloomFilter::parse(encoded).unwrap();
        for i in 0..n {
            assert!(f.may_contain(&key(i)), "false negative for key {i}");
        }
        let probes = 50_000;
        let fp = (n..n + probes).filter(|&i| f.may_contain(&key(i))).count();
        let rate = fp as f64 / probes as f64;
        // Theory for 10 bits/key and k = 7: about 0.82 %.
        assert!(rate < 0.02, "false-positive rate {rate}");
    }

    #[test]
    fn empty_filter_rejects_everything_it_can() {
        let f = BloomFilter::parse(FilterBuilder::new(10).finish()).unwrap();
        assert!(!f.may_contain(b"anything"));
    }

    #[test]
    fn parse_rejects_malformed() {
        assert!(BloomFilter::parse(vec![]).is_err());
        assert!(BloomFilter::parse(vec![0; 9]).is_err()); // k = 0
        assert!(BloomFilter::parse(vec![31; 9]).is_err()); // k = 31
        assert!(BloomFilter::parse(vec![7; 5]).is_err()); // too few bits
        assert!(BloomFilter::parse(vec![7; 9]).is_ok());
    }
}
