//! Waiting for a lock a background thread holds briefly, without giving
//! the core away.
//!
//! `parking_lot`'s mutex, when contended, spins a few times and then calls
//! `sched_yield` before it parks. With every core busy (GC and compaction
//! beside the writers, as on a two-core machine under an update-heavy
//! load), a yield hands the core to another runnable thread for its whole
//! time slice: in the update experiment, writers waiting for a lock GC held
//! for a fraction of a millisecond lost 1–4 ms in a yield several times a
//! phase, which is the whole p99.99 budget. Parking instead (a mutex that
//! never yields) made the median wait longer: a parked thread is woken by
//! the scheduler tens of microseconds after the unlock. So a writer about
//! to take a lock that GC holds for short stretches first spins on it, on
//! its own core, for up to [`LOCK_SPIN`], and only then locks as usual.

use parking_lot::Mutex;
use std::time::{Duration, Instant};

/// Longest spin before a writer locks as usual: about the holds it is
/// meant for (a GC step's append of one 64 KiB piece to the value log, a
/// relocation group under the writer lock). Longer holds (a file roll's
/// syncs, a wait for a flush) cost a waiter this much spinning first.
pub(crate) const LOCK_SPIN: Duration = Duration::from_micros(300);

/// True when the process may run on more than one core: on one, a spinner
/// only keeps the holder from running.
fn several_cores() -> bool {
    static SEVERAL: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *SEVERAL.get_or_init(|| std::thread::available_parallelism().is_ok_and(|n| n.get() > 1))
}

/// Returns once `m` looks free or [`LOCK_SPIN`] has passed (at once on a
/// single core); the caller then locks it (the lock may have been taken
/// again meanwhile: this only decides how the caller waits, never what it
/// may do).
pub(crate) fn until_unlocked<T: ?Sized>(m: &Mutex<T>) {
    if !m.is_locked() || !several_cores() {
        return;
    }
    let start = Instant::now();
    while m.is_locked() {
        for _ in 0..64 {
            std::hint::spin_loop();
        }
        if start.elapsed() >= LOCK_SPIN {
            return;
        }
    }
}
