//! A generator of YCSB core workloads (A–F), following YCSB 0.17.0's
//! `CoreWorkload` and its generators:
//!
//! - keys are `user` + the decimal FNV-64 hash of the record number
//!   (`Utils.fnvhash64`, `orderedinserts=false`, no zero padding);
//! - `zipfian` requests use `ScrambledZipfianGenerator`: a Zipfian
//!   generator with constant 0.99 over 10^10 items and the precomputed
//!   zeta 26.469..., whose result is FNV-64 hashed modulo the item count
//!   (record count + twice the expected inserts + 1);
//! - `latest` requests (workload D) use `SkewedLatestGenerator`: the last
//!   acknowledged insert minus a Zipfian draw over the record count;
//! - a drawn record number above the last acknowledged insert is redrawn
//!   (`nextKeynum`);
//! - scan lengths are uniform in `1..=max_scan_length` (100);
//! - inserts write `field_count * field_length` bytes (10 × 100), updates
//!   one field (`writeallfields=false`: `field_length` bytes), and a
//!   read-modify-write is a read followed by a one-field update.
//!
//! The operation mixes are those of YCSB's workload files: A 50 % read /
//! 50 % update, B 95/5, C 100 % read, D 95 % read / 5 % insert (latest),
//! E 95 % scan / 5 % insert, F 50 % read / 50 % read-modify-write.
//! YCSB draws from `ThreadLocalRandom`; this generator draws from a seeded
//! generator, so it reproduces the distributions, not YCSB's exact streams.

use rand::Rng;
use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};

/// YCSB's Zipfian constant.
pub const ZIPFIAN_CONSTANT: f64 = 0.99;
/// `ScrambledZipfianGenerator.ZETAN`: zeta(10^10 + 1, 0.99), precomputed.
pub const SCRAMBLED_ZETAN: f64 = 26.469_028_201_783_02;
/// `ScrambledZipfianGenerator.ITEM_COUNT` in YCSB 0.17.0.
pub const SCRAMBLED_ITEM_COUNT: u64 = 10_000_000_000;

/// YCSB's `Utils.fnvhash64`: FNV-1a over the 8 little-endian bytes of
/// `val`, returned as `Math.abs` of the signed result.
pub fn fnv_hash64(val: i64) -> i64 {
    let mut hash: i64 = 0xCBF2_9CE4_8422_2325_u64 as i64;
    let mut v = val;
    for _ in 0..8 {
        let octet = v & 0xff;
        v >>= 8;
        hash ^= octet;
        hash = hash.wrapping_mul(1_099_511_628_211);
    }
    hash.wrapping_abs()
}

/// Writes YCSB's key for record `keynum` into `out`: `user` followed by the
/// decimal FNV-64 hash of `keynum`.
pub fn key_name(keynum: u64, out: &mut Vec<u8>) {
    out.clear();
    // Writing to a Vec cannot fail.
    let _ = write!(out, "user{}", fnv_hash64(keynum as i64));
}

fn zeta(st: u64, n: u64, theta: f64, initial: f64) -> f64 {
    let mut sum = initial;
    for i in st..n {
        sum += 1.0 / ((i + 1) as f64).powf(theta);
    }
    sum
}

/// YCSB's `ZipfianGenerator` (Gray et al., SIGMOD 1994): item `base` is the
/// most popular, `base + 1` the next, and so on.
#[derive(Debug, Clone)]
pub struct Zipfian {
    items: u64,
    base: u64,
    theta: f64,
    zeta2theta: f64,
    alpha: f64,
    zetan: f64,
    eta: f64,
    count_for_zeta: u64,
}

impl Zipfian {
    /// Items `min..=max` with constant `theta`; computes zeta (O(items)).
    pub fn new(min: u64, max: u64, theta: f64) -> Self {
        let items = max - min + 1;
        Self::with_zetan(min, max, theta, zeta(0, items, theta, 0.0))
    }

    /// Items `min..=max` with constant `theta` and a precomputed zeta.
    pub fn with_zetan(min: u64, max: u64, theta: f64, zetan: f64) -> Self {
        let items = max - min + 1;
        let zeta2theta = zeta(0, 2, theta, 0.0);
        Zipfian {
            items,
            base: min,
            theta,
            zeta2theta,
            alpha: 1.0 / (1.0 - theta),
            zetan,
            eta: (1.0 - (2.0 / items as f64).powf(1.0 - theta)) / (1.0 - zeta2theta / zetan),
            count_for_zeta: items,
        }
    }

    /// The next item for a distribution over `item_count` items, from the
    /// uniform draw `u` in `[0, 1)`. Like YCSB, a larger `item_count` than
    /// before extends zeta incrementally (and keeps YCSB's `eta`, which
    /// uses the original item count); a smaller one is ignored.
    pub fn next_long(&mut self, item_count: u64, u: f64) -> u64 {
        if item_count > self.count_for_zeta {
            self.zetan = zeta(self.count_for_zeta, item_count, self.theta, self.zetan);
            self.count_for_zeta = item_count;
            self.eta = (1.0 - (2.0 / self.items as f64).powf(1.0 - self.theta))
                / (1.0 - self.zeta2theta / self.zetan);
        }
        let uz = u * self.zetan;
        if uz < 1.0 {
            return self.base;
        }
        if uz < 1.0 + 0.5f64.powf(self.theta) {
            return self.base + 1;
        }
        self.base + (item_count as f64 * (self.eta * u - self.eta + 1.0).powf(self.alpha)) as u64
    }

    /// The next item over the constructor's item range.
    pub fn next(&mut self, rng: &mut impl Rng) -> u64 {
        let items = self.items;
        self.next_long(items, rng.gen::<f64>())
    }
}

/// YCSB's `ScrambledZipfianGenerator` with constant 0.99: popular items
/// scattered over `min..=max` by FNV-64 hashing.
#[derive(Debug, Clone)]
pub struct ScrambledZipfian {
    gen: Zipfian,
    min: u64,
    item_count: u64,
}

impl ScrambledZipfian {
    /// Items `min..=max`.
    pub fn new(min: u64, max: u64) -> Self {
        ScrambledZipfian {
            gen: Zipfian::with_zetan(0, SCRAMBLED_ITEM_COUNT, ZIPFIAN_CONSTANT, SCRAMBLED_ZETAN),
            min,
            item_count: max - min + 1,
        }
    }

    /// The next item.
    pub fn next(&mut self, rng: &mut impl Rng) -> u64 {
        let r = self.gen.next(rng);
        self.min + (fnv_hash64(r as i64).unsigned_abs() % self.item_count)
    }
}

/// YCSB's `SkewedLatestGenerator`: recent inserts are the most popular.
#[derive(Debug, Clone)]
pub struct SkewedLatest {
    zipf: Zipfian,
}

impl SkewedLatest {
    /// For a key space whose last acknowledged insert is `last` (YCSB
    /// builds the Zipfian over `last` items).
    pub fn new(last: u64) -> Self {
        SkewedLatest {
            zipf: Zipfian::new(0, last.max(1) - 1, ZIPFIAN_CONSTANT),
        }
    }

    /// The next item given the current last acknowledged insert `last`.
    pub fn next(&mut self, last: u64, rng: &mut impl Rng) -> u64 {
        last.saturating_sub(self.zipf.next_long(last, rng.gen::<f64>()))
    }
}

/// The request distribution of a workload (`requestdistribution`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestDistribution {
    /// Scrambled Zipfian.
    Zipfian,
    /// Skewed towards the latest inserts.
    Latest,
    /// Uniform over the records.
    Uniform,
}

/// Operation proportions and distributions of one YCSB core workload.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WorkloadSpec {
    /// The workload's letter (`a`..=`f`).
    pub letter: char,
    /// Fraction of reads.
    pub read: f64,
    /// Fraction of updates.
    pub update: f64,
    /// Fraction of inserts.
    pub insert: f64,
    /// Fraction of scans.
    pub scan: f64,
    /// Fraction of read-modify-writes.
    pub read_modify_write: f64,
    /// Key choice.
    pub distribution: RequestDistribution,
    /// Longest scan (entries); lengths are uniform in `1..=max`.
    pub max_scan_length: u64,
}

impl WorkloadSpec {
    /// The core workload `letter` (`a`..=`f`, either case).
    pub fn core(letter: char) -> Option<Self> {
        let (read, update, insert, scan, rmw, distribution) = match letter.to_ascii_lowercase() {
            'a' => (0.5, 0.5, 0.0, 0.0, 0.0, RequestDistribution::Zipfian),
            'b' => (0.95, 0.05, 0.0, 0.0, 0.0, RequestDistribution::Zipfian),
            'c' => (1.0, 0.0, 0.0, 0.0, 0.0, RequestDistribution::Zipfian),
            'd' => (0.95, 0.0, 0.05, 0.0, 0.0, RequestDistribution::Latest),
            'e' => (0.0, 0.0, 0.05, 0.95, 0.0, RequestDistribution::Zipfian),
            'f' => (0.5, 0.0, 0.0, 0.0, 0.5, RequestDistribution::Zipfian),
            _ => return None,
        };
        Some(WorkloadSpec {
            letter: letter.to_ascii_lowercase(),
            read,
            update,
            insert,
            scan,
            read_modify_write: rmw,
            distribution,
            max_scan_length: 100,
        })
    }
}

/// One YCSB operation on record numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum YcsbOp {
    /// Read all fields of a record.
    Read(u64),
    /// Overwrite one field of a record.
    Update(u64),
    /// Insert a new record with all fields.
    Insert(u64),
    /// Scan `len` records starting at a record's key.
    Scan(u64, u64),
    /// Read a record, then update one field of it.
    ReadModifyWrite(u64),
}

/// The insert key sequence shared by the threads of one run
/// (`AcknowledgedCounterGenerator`): new record numbers, and the highest
/// acknowledged one, above which requests are redrawn.
#[derive(Debug)]
pub struct InsertSequence {
    next: AtomicU64,
    limit: AtomicU64,
}

impl InsertSequence {
    /// For a database holding records `0..record_count`.
    pub fn new(record_count: u64) -> Self {
        InsertSequence {
            next: AtomicU64::new(record_count),
            limit: AtomicU64::new(record_count.saturating_sub(1)),
        }
    }

    /// A new record number to insert.
    pub fn next_insert(&self) -> u64 {
        self.next.fetch_add(1, Ordering::Relaxed)
    }

    /// Marks `keynum` inserted (readable).
    pub fn acknowledge(&self, keynum: u64) {
        self.limit.fetch_max(keynum, Ordering::AcqRel);
    }

    /// The highest acknowledged record number.
    pub fn last(&self) -> u64 {
        self.limit.load(Ordering::Acquire)
    }

    /// Record numbers handed out so far (the record count after the run).
    pub fn issued(&self) -> u64 {
        self.next.load(Ordering::Relaxed)
    }
}

enum KeyChooser {
    Zipfian(ScrambledZipfian),
    Latest(SkewedLatest),
    Uniform(u64),
}

/// Draws the operations of one YCSB client thread.
pub struct YcsbGenerator<'a> {
    spec: WorkloadSpec,
    chooser: KeyChooser,
    seq: &'a InsertSequence,
    weights: [(f64, u8); 5],
}

impl<'a> YcsbGenerator<'a> {
    /// A generator for `spec` over a database of `record_count` records
    /// (before this run) that will run `op_count` operations in total
    /// (over all threads; it sizes the Zipfian key space as YCSB does).
    pub fn new(
        spec: WorkloadSpec,
        record_count: u64,
        op_count: u64,
        seq: &'a InsertSequence,
    ) -> Self {
        let chooser = match spec.distribution {
            RequestDistribution::Zipfian => {
                let expected_new = (op_count as f64 * spec.insert * 2.0) as u64;
                KeyChooser::Zipfian(ScrambledZipfian::new(0, record_count + expected_new))
            }
            RequestDistribution::Latest => KeyChooser::Latest(SkewedLatest::new(seq.last())),
            RequestDistribution::Uniform => KeyChooser::Uniform(record_count.max(1)),
        };
        YcsbGenerator {
            spec,
            chooser,
            seq,
            weights: [
                (spec.read, 0),
                (spec.update, 1),
                (spec.insert, 2),
                (spec.scan, 3),
                (spec.read_modify_write, 4),
            ],
        }
    }

    fn next_keynum(&mut self, rng: &mut impl Rng) -> u64 {
        loop {
            let last = self.seq.last();
            let k = match &mut self.chooser {
                KeyChooser::Zipfian(z) => z.next(rng),
                KeyChooser::Latest(l) => l.next(last, rng),
                KeyChooser::Uniform(n) => rng.gen_range(0..*n),
            };
            if k <= last {
                return k;
            }
        }
    }

    /// The next operation (`DiscreteGenerator` over the proportions in
    /// YCSB's order: read, update, insert, scan, read-modify-write).
    pub fn next_op(&mut self, rng: &mut impl Rng) -> YcsbOp {
        let sum: f64 = self.weights.iter().map(|w| w.0).sum();
        let mut val = rng.gen::<f64>();
        let mut op = 0;
        for &(w, o) in &self.weights {
            if w <= 0.0 {
                continue;
            }
            op = o;
            if val < w / sum {
                break;
            }
            val -= w / sum;
        }
        match op {
            0 => YcsbOp::Read(self.next_keynum(rng)),
            1 => YcsbOp::Update(self.next_keynum(rng)),
            2 => YcsbOp::Insert(self.seq.next_insert()),
            3 => {
                let k = self.next_keynum(rng);
                YcsbOp::Scan(k, rng.gen_range(1..=self.spec.max_scan_length))
            }
            _ => YcsbOp::ReadModifyWrite(self.next_keynum(rng)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn fnv_matches_ycsb_keys() {
        // The first keys of YCSB 0.17.0's load phase.
        let mut k = Vec::new();
        key_name(0, &mut k);
        assert_eq!(k, b"user6284781860667377211");
        key_name(1, &mut k);
        assert_eq!(k, b"user8517097267634966620");
        key_name(100_000, &mut k);
        assert_eq!(k, b"user2382277743992889674");
    }

    #[test]
    fn scrambled_zipfian_top_share() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(1);
        let mut z = ScrambledZipfian::new(0, 100_000);
        let mut counts = std::collections::HashMap::new();
        let n = 200_000;
        for _ in 0..n {
            *counts.entry(z.next(&mut rng)).or_insert(0u32) += 1;
        }
        let top = *counts.values().max().unwrap() as f64 / n as f64;
        assert!((top - 1.0 / SCRAMBLED_ZETAN).abs() < 0.004, "{top}");
    }

    #[test]
    fn latest_prefers_recent() {
        let seq = InsertSequence::new(1000);
        let spec = WorkloadSpec::core('d').unwrap();
        let mut g = YcsbGenerator::new(spec, 1000, 10_000, &seq);
        let mut rng = rand::rngs::StdRng::seed_from_u64(2);
        let mut recent = 0;
        let mut reads = 0;
        for _ in 0..10_000 {
            match g.next_op(&mut rng) {
                YcsbOp::Read(k) => {
                    reads += 1;
                    assert!(k <= seq.last());
                    if k + 100 > seq.last() {
                        recent += 1;
                    }
                }
                YcsbOp::Insert(k) => seq.acknowledge(k),
                other => panic!("unexpected {other:?}"),
            }
        }
        assert!(recent as f64 / reads as f64 > 0.5);
    }

    #[test]
    fn op_mix_follows_proportions() {
        let seq = InsertSequence::new(1000);
        let mut g = YcsbGenerator::new(WorkloadSpec::core('e').unwrap(), 1000, 20_000, &seq);
        let mut rng = rand::rngs::StdRng::seed_from_u64(3);
        let mut scans = 0;
        for _ in 0..20_000 {
            match g.next_op(&mut rng) {
                YcsbOp::Scan(k, len) => {
                    assert!((1..=100).contains(&len));
                    assert!(k <= seq.last());
                    scans += 1;
                }
                YcsbOp::Insert(k) => seq.acknowledge(k),
                other => panic!("unexpected {other:?}"),
            }
        }
        let share = scans as f64 / 20_000.0;
        assert!((share - 0.95).abs() < 0.01, "{share}");
    }
}
