//! The commit pipeline: group commit.
//!
//! Concurrent writers queue up; the first of a group leads it. While a
//! leader writes its group, newly arriving writers join the next *open*
//! group (their batch is appended to the group's batch); the writer that
//! opened it becomes its leader as soon as the previous leader is done. A
//! leader writes the whole group as one batch — one value-store append, one
//! WAL record, at most one sync (if any member asked for one) — then hands
//! each member the last sequence number of its own entries. This is the
//! writer queue of LevelDB (`DBImpl::Write`, `BuildBatchGroup`), without
//! its mutex being released during the WAL write: here the queue lock is
//! never held across I/O at all, and the engine's writer lock covers the
//! leader's whole write (append to publish), which is what GC's
//! `wait_in_flight_writes` relies on.
//!
//! Sequence numbers are published in group order, and within a group in
//! member order, so every reader sees a prefix of the commit order.
//!
//! A writer alone in its group (every write of a single writer thread)
//! writes its own batch: the group holds the opener's batch by reference
//! and copies it only when another writer joins, so a write that is not
//! grouped pays for no copy of its batch and no allocation in the queue.
//!
//! Each member waits on a slot of its own ([`Slot`]): the leader puts the
//! member's result there and wakes that thread alone (or the member, still
//! yielding its core, sees it first). With one condition
//! variable for all of them, a finished group's members woke one after
//! another, each taking the queue lock in turn before the next was woken
//! (`notify_all` moves the sleepers onto the lock's queue); with slots,
//! synced groups of 8 writers ran 5–30 % faster on two cores.
//!
//! Thread-safety: [`CommitQueue`] is shared by every writer of a `Db`.

use crate::batch::WriteBatch;
use crate::error::{Error, Result};
use crate::seqno::SeqNum;
use parking_lot::{Condvar, Mutex, MutexGuard};
use std::borrow::Cow;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::Thread;
use std::time::{Duration, Instant};

/// Largest encoded group a writer joins (bytes); a batch alone may be
/// larger. Bounds the latency a small write pays for a large group.
pub(crate) const GROUP_BYTES: usize = 1 << 20;

/// A group handed to its leader.
pub(crate) struct Group<'a> {
    /// The members' batches, concatenated in member order: the leader's
    /// own batch, borrowed, when no other writer joined.
    pub batch: Cow<'a, WriteBatch>,
    /// Entries of the first member (the leader).
    first: u32,
    /// Entries of each member after the first, in order.
    joined: Vec<u32>,
    /// Some member asked for `sync`.
    pub sync: bool,
}

impl Group<'_> {
    /// Number of members.
    pub(crate) fn len(&self) -> usize {
        1 + self.joined.len()
    }

    /// Entries of each member, in order.
    pub(crate) fn members(&self) -> impl Iterator<Item = u32> + '_ {
        std::iter::once(self.first).chain(self.joined.iter().copied())
    }
}

/// The group a writer opened and others may join, until its opener takes
/// it. The opener's batch stays with the opener (see the module docs).
struct OpenGroup {
    /// The batches of the members after the opener, concatenated; `None`
    /// while the opener is alone.
    joined_batch: Option<WriteBatch>,
    /// Entries of each member after the opener, in order.
    joined: Vec<u32>,
    /// Encoded bytes of every member's batch, the opener's included.
    bytes: usize,
    sync: bool,
    /// Slots of the members after the first (the leader), in order.
    slots: Vec<Arc<Slot>>,
}

/// Where a member waits for its result.
struct Slot {
    thread: Thread,
    result: OnceLock<Result<SeqNum>>,
}

impl Slot {
    fn new() -> Arc<Self> {
        Arc::new(Slot {
            thread: std::thread::current(),
            result: OnceLock::new(),
        })
    }

    /// Hands the member its result and wakes it.
    fn fill(&self, r: Result<SeqNum>) {
        // Only the leader fills a slot, once.
        let _ = self.result.set(r);
        self.thread.unpark();
    }

    /// Waits for the result: yields the core and looks again for up to
    /// [`SLOT_YIELD_WAIT`] (an unsynced group is written in a few
    /// microseconds, a synced one in about an fsync: both less than a
    /// park and its wake-up cost the group's next round), then parks until
    /// filled.
    fn take(&self) -> Result<SeqNum> {
        let start = Instant::now();
        while self.result.get().is_none() && start.elapsed() < SLOT_YIELD_WAIT {
            std::thread::yield_now();
        }
        loop {
            if let Some(r) = self.result.get() {
                return r.clone();
            }
            // A wake-up that came before the park is kept (`unpark`'s
            // token), and a spurious one only loops.
            std::thread::park();
        }
    }
}

#[derive(Default)]
struct State {
    open: Option<OpenGroup>,
    leader_busy: bool,
    /// Members of the last group written, when it was synced (else 0).
    last_synced: usize,
    /// Groups taken by a leader so far; the last one's number is the
    /// count.
    taken: u64,
}

thread_local! {
    /// The number of the last group this thread wrote or was a member of.
    static LAST_GROUP: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// The queue of writers. See the module docs.
#[derive(Default)]
pub(crate) struct CommitQueue {
    state: Mutex<State>,
    /// The open group's opener waits here for the leader before it, and
    /// writers that found the open group full for it to be taken.
    cv: Condvar,
    groups: AtomicU64,
    synced_groups: AtomicU64,
    batches: AtomicU64,
}

impl CommitQueue {
    /// Groups written so far.
    pub(crate) fn groups(&self) -> u64 {
        self.groups.load(Ordering::Relaxed)
    }

    /// Groups written so far that asked for a sync.
    pub(crate) fn synced_groups(&self) -> u64 {
        self.synced_groups.load(Ordering::Relaxed)
    }

    /// Batches committed so far (members of every group).
    pub(crate) fn batches(&self) -> u64 {
        self.batches.load(Ordering::Relaxed)
    }

    /// Commits `batch` as part of a group and returns the sequence number of
    /// its last entry. `lead` writes a whole group and returns one result
    /// per member; it runs in the thread of the group's first writer, with
    /// no queue lock held.
    pub(crate) fn commit(
        &self,
        batch: &WriteBatch,
        sync: bool,
        lead: impl FnOnce(&Group<'_>) -> Vec<Result<SeqNum>>,
    ) -> Result<SeqNum> {
        let mut st = self.state.lock();
        while let Some(open) = st.open.as_mut() {
            if open.bytes + batch.approximate_size() > GROUP_BYTES {
                // Full: wait until its leader takes it, then open the next.
                self.cv.wait(&mut st);
                continue;
            }
            match open.joined_batch.as_mut() {
                Some(b) => b.append(batch),
                None => open.joined_batch = Some(batch.clone()),
            }
            open.joined.push(batch.len() as u32);
            open.bytes += batch.approximate_size();
            open.sync |= sync;
            let slot = Slot::new();
            open.slots.push(slot.clone());
            let number = st.taken + 1;
            drop(st);
            LAST_GROUP.with(|l| l.set(number));
            return slot.take();
        }
        st.open = Some(OpenGroup {
            joined_batch: None,
            joined: Vec::new(),
            bytes: batch.approximate_size(),
            sync,
            slots: Vec::new(),
        });
        self.wait_until(&mut st, |st| !st.leader_busy);
        if st.last_synced > 1 {
            // This opener is one of the synced group's members when it
            // wrote that group or was in it.
            let was_member = LAST_GROUP.with(|l| l.get()) == st.taken;
            let coming = st.last_synced - usize::from(was_member);
            self.gather(&mut st, coming);
        }
        let open = st.open.take().expect("only its opener takes a group");
        st.leader_busy = true;
        st.taken += 1;
        LAST_GROUP.with(|l| l.set(st.taken));
        drop(st);
        // Writers waiting for room may open the next group now.
        self.cv.notify_all();
        let OpenGroup {
            joined_batch,
            joined,
            sync,
            slots,
            ..
        } = open;
        let group = Group {
            batch: match joined_batch {
                None => Cow::Borrowed(batch),
                Some(rest) => {
                    let mut all = batch.clone();
                    all.append(&rest);
                    Cow::Owned(all)
                }
            },
            first: batch.len() as u32,
            joined,
            sync,
        };
        let n = group.len();
        self.groups.fetch_add(1, Ordering::Relaxed);
        self.batches.fetch_add(n as u64, Ordering::Relaxed);
        if group.sync {
            self.synced_groups.fetch_add(1, Ordering::Relaxed);
        }
        let mut results = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| lead(&group)))
            .unwrap_or_else(|_| vec![Err(Error::Poisoned("the write path panicked".into())); n]);
        if results.len() != n {
            results = vec![Err(Error::Poisoned("group commit lost a result".into())); n];
        }
        let mut st = self.state.lock();
        st.leader_busy = false;
        st.last_synced = if group.sync { n } else { 0 };
        drop(st);
        // The next group's opener first: it has an fsync to start.
        self.cv.notify_all();
        let mut results = results.into_iter();
        let mine = results.next().expect("one result per member");
        for (slot, r) in slots.iter().zip(results) {
            slot.fill(r);
        }
        mine
    }

    /// Lets the members of a synced group that just finished join the open
    /// group before its leader takes it. They were blocked in the fsync
    /// and are waking up now; without the wait the writers split into two
    /// cohorts that take turns, each group holding about half of them, and
    /// every fsync serves half the writers it could. The leader yields its
    /// core until the `coming` members (that group's, less this leader if
    /// it was one of them) have joined, for at most [`GATHER_WAIT`], and
    /// gives up once [`GATHER_IDLE`] passes without a new member: a writer
    /// that does not come straight back costs the group that much.
    fn gather(&self, st: &mut MutexGuard<'_, State>, coming: usize) {
        let members = |st: &State| st.open.as_ref().map_or(0, |o| 1 + o.joined.len());
        let start = Instant::now();
        let mut seen = members(st);
        let target = seen + coming;
        let mut last_new = start;
        while seen < target && start.elapsed() < GATHER_WAIT && last_new.elapsed() < GATHER_IDLE {
            MutexGuard::unlocked(st, std::thread::yield_now);
            let now = members(st);
            if now > seen {
                last_new = Instant::now();
            }
            seen = now;
        }
    }

    /// Waits, the queue lock held between looks, until `done` holds. An
    /// unsynced group is written in a few microseconds, less than a
    /// thread's sleep and wake-up on the condition variable costs, so a
    /// waiter first gives up its core and looks again for up to
    /// [`YIELD_WAIT`] (RocksDB's adaptive yield of its write thread), and
    /// only then sleeps until notified.
    fn wait_until(&self, st: &mut MutexGuard<'_, State>, done: impl Fn(&State) -> bool) {
        if done(st) {
            return;
        }
        let start = Instant::now();
        while start.elapsed() < YIELD_WAIT {
            MutexGuard::unlocked(st, std::thread::yield_now);
            if done(st) {
                return;
            }
        }
        while !done(st) {
            self.cv.wait(st);
        }
    }
}

/// How long a writer waiting in the queue yields its core before it
/// sleeps (see [`CommitQueue::wait_until`]).
const YIELD_WAIT: Duration = Duration::from_micros(100);

/// How long a group's member yields its core before it parks (see
/// [`Slot::take`]): a few fsyncs of a flash device without power-loss
/// protection (about 100–150 µs each here). A member that parked is woken
/// by the scheduler tens of microseconds after its slot is filled, and the
/// next group waits for it (see [`CommitQueue::gather`]): with 100 µs,
/// most members of a synced group had parked by the time its fsync ended,
/// and synced `fillrandom` ran 6–25 % slower at 2, 4 and 8 threads on two
/// cores. A yielding member leaves its core to any other runnable thread.
const SLOT_YIELD_WAIT: Duration = Duration::from_micros(400);

/// Longest a leader waits for the members of the synced group before it to
/// join its own (see [`CommitQueue::gather`]); a fraction of an fsync.
const GATHER_WAIT: Duration = Duration::from_micros(50);

/// Longest a gathering leader waits for the next member.
const GATHER_IDLE: Duration = Duration::from_micros(15);

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::{Arc, Barrier};

    fn batch(i: u32) -> WriteBatch {
        let mut b = WriteBatch::new();
        for j in 0..=i % 3 {
            b.put(format!("k{i}-{j}").as_bytes(), b"v").unwrap();
        }
        b
    }

    /// Every writer gets the sequence numbers of its own entries, groups
    /// form while a leader is busy, and sequence numbers never repeat.
    #[test]
    fn members_get_their_own_sequence_numbers() {
        let q = Arc::new(CommitQueue::default());
        let last = Arc::new(AtomicU64::new(0));
        let groups = Arc::new(AtomicU64::new(0));
        let threads = 8;
        let start = Arc::new(Barrier::new(threads));
        let hs: Vec<_> = (0..threads as u32)
            .map(|t| {
                let (q, last, groups, start) =
                    (q.clone(), last.clone(), groups.clone(), start.clone());
                std::thread::spawn(move || {
                    start.wait();
                    let mut seen = Vec::new();
                    for i in 0..200 {
                        let b = batch(t * 1000 + i);
                        let n = b.len() as u64;
                        let end = q
                            .commit(&b, i % 7 == 0, |g| {
                                groups.fetch_add(1, Ordering::Relaxed);
                                let mut s = last.load(Ordering::Relaxed);
                                assert_eq!(g.batch.len() as u32, g.members().sum::<u32>());
                                let r = g
                                    .members()
                                    .map(|m| {
                                        s += m as u64;
                                        Ok(s)
                                    })
                                    .collect();
                                last.store(s, Ordering::Relaxed);
                                r
                            })
                            .unwrap();
                        seen.push((end + 1 - n, end));
                    }
                    seen
                })
            })
            .collect();
        let mut all: Vec<(u64, u64)> = hs.into_iter().flat_map(|h| h.join().unwrap()).collect();
        all.sort_unstable();
        let mut next = 1;
        for (a, b) in &all {
            assert_eq!(*a, next, "a gap or an overlap in sequence numbers");
            next = b + 1;
        }
        assert_eq!(next - 1, last.load(Ordering::Relaxed));
        assert!(groups.load(Ordering::Relaxed) <= all.len() as u64);
    }

    #[test]
    fn a_failed_group_fails_every_member() {
        let q = CommitQueue::default();
        let r = q.commit(&batch(1), false, |g| {
            vec![Err(Error::Poisoned("disk full".into())); g.len()]
        });
        assert!(matches!(r, Err(Error::Poisoned(_))));
        let r = q.commit(&batch(2), false, |_| panic!("bug"));
        assert!(matches!(r, Err(Error::Poisoned(_))));
        // The queue still works.
        assert_eq!(q.commit(&batch(3), true, |_| vec![Ok(7)]).unwrap(), 7);
    }
}
