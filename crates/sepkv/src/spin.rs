//! A mutex for locks that writers and a background thread share: it spins
//! on the waiter's own core for a while, then parks, and never yields.
//!
//! `parking_lot`'s mutex, when contended, spins a few times and then calls
//! `sched_yield` several times before it parks. With every core busy (GC and
//! compaction beside the writers, as on a two-core machine under an
//! update-heavy load), a yield hands the core to another runnable thread for
//! the rest of that thread's time slice. The background threads ask for a
//! long slice ([`crate::sched::BACKGROUND_SLICE`]), and under EEVDF a
//! yield moves the yielder's deadline back by a slice of its own, so a
//! writer that yielded to the GC thread waited out GC's slice: a trace of
//! the update experiment (`perf record -e sched:sched_switch --call-graph
//! dwarf`) found writers off the CPU for 2–5 ms in `sched_yield` inside the
//! lock's slow path 14 times in three phases — most of the waits over 2 ms
//! that make the p99.99 write latency.
//!
//! A parked waiter, by contrast, is woken by the unlock, and a woken writer
//! (default slice) preempts a background thread at once. Parking at once
//! makes the short waits longer, though (the wake-up costs tens of
//! microseconds), and most holds are short: a GC step's append of one
//! 64 KiB piece, a relocation group under the writer lock. So a waiter first
//! spins on its own core for up to [`LOCK_SPIN`], then parks. At most one
//! thread fewer than the cores spins at a time, over all these locks (none
//! on a single core), so that a lock's holder keeps a core to finish on,
//! and background threads (GC, flush and compaction) never spin: they
//! park at once, leaving the cores to user threads.
//!
//! An unlock that finds a waiter parked wakes it to compete for the lock
//! (spinning again), and once in a while — when `parking_lot_core`'s fair
//! timeout, about every 0.5 ms, says so — hands the lock over instead,
//! still held. A GC thread that installs one relocation group after
//! another takes the lock again at once, each time; without the handover
//! a woken writer could lose that race for the whole step (a first
//! version that neither handed over nor spun after a wake-up made the
//! update experiment's p99.99 1.4× worse).
//!
//! Used for the locks writers share with GC and little else: the writer
//! lock, the value log's append lock and HashKV's segment writers. Not for
//! locks many readers take (HashKV's state): with more threads than cores,
//! their spinning cost readers 7 % of their throughput in
//! `readwhilewriting` with four readers, for no gain in write latency.
//!
//! [`SpinMutex`] has `parking_lot`'s API (it is a `lock_api` mutex), so
//! guards can be unlocked for a while (`SpinMutexGuard::unlocked`) as
//! elsewhere.

use parking_lot::lock_api;
use parking_lot_core::{ParkResult, ParkToken, UnparkResult, UnparkToken};
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// Longest spin before a waiter parks: about the holds it is meant for (a
/// GC step's append of one 64 KiB piece to the value log, a relocation
/// group under the writer lock). Longer holds (a file roll's syncs, a wait
/// for a flush) cost a waiter this much spinning first.
pub(crate) const LOCK_SPIN: Duration = Duration::from_micros(300);

/// A mutex that spins up to [`LOCK_SPIN`], then parks (module docs).
pub(crate) type SpinMutex<T> = lock_api::Mutex<RawSpinMutex, T>;
/// The guard of a [`SpinMutex`].
pub(crate) type SpinMutexGuard<'a, T> = lock_api::MutexGuard<'a, RawSpinMutex, T>;

/// Threads spinning in a [`SpinMutex`] now, all locks together.
static SPINNING: AtomicUsize = AtomicUsize::new(0);

/// How many threads may spin at once: one fewer than the cores the process
/// may run on, so that a lock's holder always has a core to finish on (on
/// a single core, none: a spinner there only keeps the holder from
/// running). Past that, a waiter parks at once.
fn spin_slots() -> usize {
    static SLOTS: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *SLOTS.get_or_init(|| std::thread::available_parallelism().map_or(0, |n| n.get() - 1))
}

/// A waiter's spin: a slot among [`spin_slots`], given back on drop, and
/// when the spin ends.
struct Spin {
    until: Instant,
}

thread_local! {
    /// The calling thread parks at once instead of spinning
    /// ([`park_without_spinning`]).
    static NO_SPIN: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Makes the calling thread park at once when a [`SpinMutex`] is held,
/// never spinning: for background threads (GC, flush and compaction),
/// whose waits nobody times, so that the spin slots and the cores are left
/// to user threads. Called by [`crate::sched::mark_background`].
pub(crate) fn park_without_spinning() {
    NO_SPIN.with(|c| c.set(true));
}

impl Spin {
    /// A spin of [`LOCK_SPIN`], or `None` when every slot is taken or the
    /// calling thread does not spin.
    fn start() -> Option<Spin> {
        if NO_SPIN.with(|c| c.get()) {
            return None;
        }
        let max = spin_slots();
        let mut n = SPINNING.load(Ordering::Relaxed);
        loop {
            if n >= max {
                return None;
            }
            match SPINNING.compare_exchange_weak(n, n + 1, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => {
                    return Some(Spin {
                        until: Instant::now() + LOCK_SPIN,
                    })
                }
                Err(now) => n = now,
            }
        }
    }
}

impl Drop for Spin {
    fn drop(&mut self) {
        SPINNING.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The lock is held.
const LOCKED: u8 = 1;
/// A thread may be parked on the lock: the unlock must wake one.
const PARKED: u8 = 2;
/// The token of a thread woken with the lock handed to it.
const HANDED_OVER: UnparkToken = UnparkToken(1);

/// The raw lock of [`SpinMutex`]: one byte of state, with waiters parked in
/// `parking_lot_core`'s table under the lock's address.
pub(crate) struct RawSpinMutex {
    state: AtomicU8,
}

// SAFETY: a thread holds the lock only after setting `LOCKED` with an
// acquiring exchange from a state without it, or when the holder's unlock
// left `LOCKED` set and handed it the lock (one thread, woken with
// `HANDED_OVER`). Only the holder clears it (`unlock`, or the unpark
// callback run on its behalf), with release ordering. So at most one thread
// holds the lock at a time.
#[allow(unsafe_code)]
unsafe impl lock_api::RawMutex for RawSpinMutex {
    #[allow(clippy::declare_interior_mutable_const)]
    const INIT: RawSpinMutex = RawSpinMutex {
        state: AtomicU8::new(0),
    };
    type GuardMarker = lock_api::GuardSend;

    #[inline]
    fn lock(&self) {
        if self
            .state
            .compare_exchange_weak(0, LOCKED, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            self.lock_slow();
        }
    }

    #[inline]
    fn try_lock(&self) -> bool {
        let mut s = self.state.load(Ordering::Relaxed);
        loop {
            if s & LOCKED != 0 {
                return false;
            }
            match self.state.compare_exchange_weak(
                s,
                s | LOCKED,
                Ordering::Acquire,
                Ordering::Relaxed,
            ) {
                Ok(_) => return true,
                Err(now) => s = now,
            }
        }
    }

    #[inline]
    unsafe fn unlock(&self) {
        if self
            .state
            .compare_exchange(LOCKED, 0, Ordering::Release, Ordering::Relaxed)
            .is_err()
        {
            self.unlock_slow();
        }
    }

    #[inline]
    fn is_locked(&self) -> bool {
        self.state.load(Ordering::Relaxed) & LOCKED != 0
    }
}

impl RawSpinMutex {
    fn key(&self) -> usize {
        self as *const RawSpinMutex as usize
    }

    #[cold]
    fn lock_slow(&self) {
        let mut spin = Spin::start();
        let mut s = self.state.load(Ordering::Relaxed);
        loop {
            if s & LOCKED == 0 {
                // Free: take it, keeping the parked bit for the others.
                match self.state.compare_exchange_weak(
                    s,
                    s | LOCKED,
                    Ordering::Acquire,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => return,
                    Err(now) => {
                        s = now;
                        continue;
                    }
                }
            }
            if s & PARKED == 0 {
                // Spin while no one is parked (a parked thread is first in
                // line) and the spin lasts.
                if spin.as_ref().is_some_and(|sp| Instant::now() < sp.until) {
                    for _ in 0..64 {
                        std::hint::spin_loop();
                    }
                    s = self.state.load(Ordering::Relaxed);
                    continue;
                }
                if let Err(now) = self.state.compare_exchange_weak(
                    s,
                    s | PARKED,
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                ) {
                    s = now;
                    continue;
                }
            }
            // The slot goes to another waiter while this one is parked.
            drop(spin.take());
            // SAFETY: the key is this lock's address, which no other
            // object uses as a key while the lock lives (the waiter holds a
            // reference to it); the callbacks neither panic nor park.
            #[allow(unsafe_code)]
            let woken = unsafe {
                parking_lot_core::park(
                    self.key(),
                    || self.state.load(Ordering::Relaxed) == LOCKED | PARKED,
                    || {},
                    |_, _| {},
                    ParkToken(0),
                    None,
                )
            };
            if woken == ParkResult::Unparked(HANDED_OVER) {
                // The unlock left the lock held, for this thread; its
                // release store is what this load acquires.
                self.state.load(Ordering::Acquire);
                return;
            }
            // Woken without the lock, or the state changed before parking:
            // compete again, spinning first.
            spin = Spin::start();
            s = self.state.load(Ordering::Relaxed);
        }
    }

    #[cold]
    fn unlock_slow(&self) {
        // Runs with the parking table's bucket locked, so no thread parks
        // or leaves in between. A parked thread is handed the lock, still
        // held: had the lock been let go, the thread that unlocked (a GC
        // thread installing one relocation group after another) would
        // take it again long before the woken one ran, and the waiter
        // would park again and again. The state left says whether more
        // threads wait.
        let release = |r: UnparkResult| {
            let more = if r.have_more_threads { PARKED } else { 0 };
            if r.unparked_threads == 0 {
                self.state.store(more, Ordering::Release);
                return UnparkToken(0);
            }
            if !r.be_fair {
                self.state.store(more, Ordering::Release);
                return UnparkToken(0);
            }
            self.state.store(LOCKED | more, Ordering::Release);
            HANDED_OVER
        };
        // SAFETY: as in `lock_slow`; the callback does not panic or park.
        #[allow(unsafe_code)]
        unsafe {
            parking_lot_core::unpark_one(self.key(), release);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::SpinMutex;
    use std::sync::Arc;

    /// Many threads incrementing under the lock lose no increment, with
    /// holds long enough that waiters run out of spin and park.
    #[test]
    fn excludes_and_wakes_parked_waiters() {
        let m = Arc::new(SpinMutex::new(0u64));
        let threads: Vec<_> = (0..6)
            .map(|t| {
                let m = m.clone();
                std::thread::spawn(move || {
                    for i in 0..2_000u64 {
                        let mut g = m.lock();
                        let v = *g;
                        if (i + t) % 500 == 0 {
                            // Past the spin: the others park.
                            std::thread::sleep(std::time::Duration::from_millis(1));
                        }
                        *g = v + 1;
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(*m.lock(), 12_000);
        assert!(!m.is_locked());
    }

    /// A background thread parks at once; others may take a spin slot,
    /// of which there are fewer than cores.
    #[test]
    fn background_threads_never_spin() {
        std::thread::spawn(|| {
            super::park_without_spinning();
            assert!(super::Spin::start().is_none());
        })
        .join()
        .unwrap();
        let held: Vec<_> = std::iter::from_fn(super::Spin::start).take(1024).collect();
        assert!(held.len() <= super::spin_slots(), "{} spinners", held.len());
    }

    #[test]
    fn try_lock_and_unlocked() {
        let m = SpinMutex::new(1);
        let mut g = m.lock();
        assert!(m.try_lock().is_none());
        super::SpinMutexGuard::unlocked(&mut g, || {
            assert_eq!(*m.try_lock().unwrap(), 1);
        });
        *g += 1;
        drop(g);
        assert_eq!(*m.try_lock().unwrap(), 2);
    }
}
