//! Counters that many threads bump on every operation.
//!
//! A plain `AtomicU64` that every reader adds to moves one cache line
//! between the cores on every add. A [`ShardedCounter`] keeps one line per
//! shard, and a thread always adds to the same shard (picked once per
//! thread, round robin), so threads on different cores rarely share a line;
//! reading it sums the shards. It suits counters read seldom (statistics)
//! and added to often.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// Shards per counter: a power of two at least the cores sepkv expects to
/// share one database.
const SHARDS: usize = 16;

/// One cache line (128 bytes covers adjacent-line prefetching).
#[derive(Debug, Default)]
#[repr(align(128))]
struct Line(AtomicU64);

/// A `u64` counter sharded by thread. Relaxed: a sum taken while others
/// add may miss their latest adds, as a relaxed `AtomicU64` would.
#[derive(Debug, Default)]
pub struct ShardedCounter {
    shards: [Line; SHARDS],
}

static NEXT_SHARD: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    static SHARD: Cell<usize> = const { Cell::new(usize::MAX) };
}

/// The calling thread's shard.
fn shard() -> usize {
    SHARD.with(|s| {
        let mut i = s.get();
        if i == usize::MAX {
            i = NEXT_SHARD.fetch_add(1, Ordering::Relaxed) % SHARDS;
            s.set(i);
        }
        i
    })
}

impl ShardedCounter {
    /// Adds `n`.
    pub fn add(&self, n: u64) {
        self.shards[shard()].0.fetch_add(n, Ordering::Relaxed);
    }

    /// The sum of every add so far.
    pub fn get(&self) -> u64 {
        self.shards
            .iter()
            .fold(0u64, |a, l| a.wrapping_add(l.0.load(Ordering::Relaxed)))
    }
}

#[cfg(test)]
mod tests {
    use super::ShardedCounter;
    use std::sync::Arc;

    #[test]
    fn adds_from_many_threads_all_count() {
        let c = Arc::new(ShardedCounter::default());
        let threads: Vec<_> = (0..24)
            .map(|t| {
                let c = c.clone();
                std::thread::spawn(move || {
                    for i in 0..1000u64 {
                        c.add(i + t);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let want: u64 = (0..24u64)
            .map(|t| (0..1000u64).map(|i| i + t).sum::<u64>())
            .sum();
        assert_eq!(c.get(), want);
    }
}
