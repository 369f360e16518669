//! Whether the blocks of mapped tables are worth reading in place
//! ([`Options::mmap_reads`](crate::Options::mmap_reads)).
//!
//! Reading a block in place from a mapping costs nothing beyond its checksum
//! when its pages are in memory, and one device read per 4 KiB page when they
//! are not: a 4 KiB block usually spans two pages, read one after the other
//! by two faults, and a scan gets no read-ahead. A system call reads the
//! block in one request, with read-ahead for a scan, but copies it even from
//! memory. Asking the kernel first (`mincore`) costs about as much as the
//! copy it would save. So the gauge learns from the reads themselves: a
//! mapped read that takes as long as a device read
//! ([`SLOW_READ_NANOS`]) counts as a miss, and while misses are common
//! ([`MISS_SHARE_LIMIT`] of recent mapped reads) blocks are read with system
//! calls, every [`PROBE_EVERY`]th one still in place, so that the gauge sees
//! when the data is back in memory.
//!
//! One gauge serves all tables of a database (it lives beside the block
//! cache). When mapped reads are fast, reading it is one shared load and
//! nothing is written, so readers on many threads do not contend on it.

use std::sync::atomic::{AtomicU32, Ordering};

/// A mapped read of one block that takes at least this long (ns) counted as
/// served by the device, not by memory: a device read of 4 KiB takes 50 µs
/// or more here, a checksum over a block in memory about a microsecond.
pub(crate) const SLOW_READ_NANOS: u64 = 20_000;

/// Scale of the miss share (1.0).
const ONE: u32 = 1 << 10;

/// Weight of the newest read in the miss share: 1/16.
const SHIFT: u32 = 4;

/// Share of recent mapped reads that missed (of [`ONE`]) at or above which
/// blocks are read with system calls.
pub(crate) const MISS_SHARE_LIMIT: u32 = ONE / 4;

/// While reading with system calls, every this-many-th read still goes
/// through the mapping. A probe that reaches the device costs about twice a
/// system-call read (two page faults for a 4 KiB block), so at 1 in 16 the
/// device-bound runs lost 5–10 % of their point reads; at 1 in 64 the cost is
/// a few percent, and reads return to the mapping within about 1,500 reads
/// once the data is in memory again.
pub(crate) const PROBE_EVERY: u32 = 64;

/// See the module documentation.
#[derive(Debug, Default)]
pub(crate) struct MapGauge {
    /// Exponentially weighted share of mapped reads that missed, of [`ONE`].
    miss_share: AtomicU32,
    /// Reads decided while the share is at or above the limit.
    decided: AtomicU32,
}

impl MapGauge {
    /// True when the next block should be read in place from the mapping.
    pub(crate) fn read_in_place(&self) -> bool {
        if self.miss_share.load(Ordering::Relaxed) < MISS_SHARE_LIMIT {
            return true;
        }
        self.decided
            .fetch_add(1, Ordering::Relaxed)
            .is_multiple_of(PROBE_EVERY)
    }

    /// True while at least a quarter of recent mapped reads reached the
    /// device (the share at or above [`MISS_SHARE_LIMIT`]); reads nothing
    /// else and counts nothing.
    pub(crate) fn reaching_device(&self) -> bool {
        self.miss_share.load(Ordering::Relaxed) >= MISS_SHARE_LIMIT
    }

    /// Records that a mapped read took `nanos`. Concurrent updates may lose
    /// one another's step: the share is an estimate.
    pub(crate) fn record(&self, nanos: u64) {
        let old = self.miss_share.load(Ordering::Relaxed);
        let hit = if nanos >= SLOW_READ_NANOS { ONE } else { 0 };
        let new = old - (old >> SHIFT) + (hit >> SHIFT);
        // A fast read with nothing to decay writes nothing: the common case
        // shares the cache line read-only.
        if new != old {
            self.miss_share.store(new, Ordering::Relaxed);
        }
    }

    /// The current miss share, of 1024 (tests).
    #[cfg(test)]
    fn miss_share(&self) -> u32 {
        self.miss_share.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reads `n` blocks whose mapped reads take `nanos`; returns how many
    /// were read in place.
    fn run(g: &MapGauge, n: usize, nanos: u64) -> usize {
        let mut in_place = 0;
        for _ in 0..n {
            if g.read_in_place() {
                in_place += 1;
                g.record(nanos);
            }
        }
        in_place
    }

    #[test]
    fn reads_from_memory_stay_in_place() {
        let g = MapGauge::default();
        assert_eq!(run(&g, 10_000, 800), 10_000);
        assert_eq!(g.miss_share(), 0);
        // An occasional slow read (a preempted thread) changes nothing.
        for _ in 0..20 {
            g.record(5_000_000);
            assert_eq!(run(&g, 50, 800), 50);
        }
    }

    #[test]
    fn reads_from_the_device_switch_to_system_calls_and_back() {
        let g = MapGauge::default();
        // Device-bound: after a few misses almost every read uses a system
        // call; the probes keep going.
        let in_place = run(&g, 16_000, 90_000);
        assert!(in_place < 16_000 / PROBE_EVERY as usize + 20, "{in_place}");
        assert!(in_place >= 16_000 / PROBE_EVERY as usize, "{in_place}");
        assert!(g.miss_share() >= MISS_SHARE_LIMIT);
        // The data is back in memory: the probes see it, and within about
        // 1,500 reads every read is in place again.
        run(&g, 2_000, 800);
        assert!(g.miss_share() < MISS_SHARE_LIMIT, "{}", g.miss_share());
        assert_eq!(run(&g, 1_000, 800), 1_000);
    }

    #[test]
    fn a_mix_mostly_in_memory_stays_in_place() {
        // One read in ten from the device: a share of about 10 %.
        let g = MapGauge::default();
        let mut in_place = 0;
        for i in 0..10_000 {
            if g.read_in_place() {
                in_place += 1;
                g.record(if i % 10 == 0 { 90_000 } else { 800 });
            }
        }
        assert_eq!(in_place, 10_000);
    }
}
