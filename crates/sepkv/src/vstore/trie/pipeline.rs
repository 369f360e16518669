//! Pipelined span reads for long range queries: the reads of the next
//! spans are in flight while the scan's cursor returns the values of the
//! current one.
//!
//! Without it a limited scan (`Scan::limit`) resolves its whole range in
//! one [`super::scan::read_many`] batch: every value is read before the
//! first entry is returned, so the device idles while the index is walked
//! and while the caller takes the values, and the reads never overlap that
//! work. The pipeline instead takes the scan's pointers **window** by
//! window (at most half the budget of values each, and at most
//! `Options::scan_batch_bytes`), plans each window with the span rule of
//! [`super::scan`] (so a table is read at most once per window, in
//! disjoint pieces), orders the window's reads by the first request each
//! serves, and hands them to the prefetch pool as the budget allows. The
//! cursor takes each value as soon as its read is done.
//!
//! # The memory budget
//! The budget (`Options::trie_scan_pipeline`, bytes) bounds what the
//! pipeline holds at once: each read counts its whole span from when it is
//! handed to a reader until it is done, and then the values it extracted
//! until the cursor takes them. A read starts only when it fits in what is
//! left of the budget, or when nothing is in flight at all (so a record
//! larger than the budget is still read, alone). Reads are at most a
//! quarter of the budget and windows half of it, so the read the cursor
//! waits for always fits once the reads before it are done: the values
//! held then are from the current window only. The figure
//! `scan_pipeline_peak_bytes` records the most the pipelines of a store
//! held. Each reader thread also keeps one span-sized scratch buffer
//! between reads, outside the budget.
//!
//! # Threads and cancellation
//! Reads run on the store's prefetch pool while value reads reach the
//! device and the pool has threads; otherwise (page cache, or
//! `prefetch_threads` = 0) the cursor makes them itself when it needs
//! them, window by window. A pool thread never waits on the cursor, so
//! scans sharing the pool cannot block one another. Dropping the pipeline
//! (the scan dropped half-way, or its limit reached) marks it cancelled:
//! reads still queued in the pool do nothing, and the drop waits for the
//! reads already running (`scan_pipeline_reads_running` counts them).
//!
//! # Direct span reads
//! With `Options::trie_scan_direct` (the default) and while value reads
//! reach the device, the pipeline's span reads of at least
//! [`super::scan::DIRECT_MIN_SPAN`] (64 KiB) bypass the page cache: each
//! span is widened to [`crate::fs::DIRECT_IO_ALIGN`] boundaries and read
//! with `O_DIRECT` (a second, direct-read handle of the table) straight
//! into the reader thread's aligned buffer, and the records are checked
//! and copied out of it as from a buffered read. Buffered reads under a
//! small memory cgroup pay for filling the page cache and reclaiming it
//! (pages added, charged and reclaimed in the kernel on the reader
//! threads), and the device then saw two to three reads in flight however
//! many the pipeline had issued; direct reads keep ten to twenty in
//! flight, as many as the budget allows (figures in
//! `docs/design/ktstore.md`). Reads served from the page cache (the
//! read-time estimate says so), single-record reads, shorter spans and
//! scans without a pipeline stay buffered: a direct read would go to the
//! device for bytes that are in memory, and a short span would read up to
//! 8 KiB of alignment more for nothing (100-entry scans returned 0.92× and
//! 1.00× the buffered rate with every span direct, 1.16× with spans
//! under 64 KiB buffered). A file system without direct reads (in memory, or
//! `O_DIRECT` refused at open) reads buffered; a direct read that fails
//! where the buffered read of the same span then works turns direct reads
//! off for the store (`span_direct_off`). Each reader thread keeps one
//! aligned buffer (the longest span it read, plus two alignment units)
//! outside the budget, as it keeps the buffered span buffer.
//!
//! Results are exactly those of [`super::scan::read_many`] per pointer: a
//! span is only a cheaper way to fetch the same bytes, every record is
//! checked like a point read, and a failed read is reported for its
//! request alone (the scan then reads that one again as a point read,
//! which tells a lost pointer from damage).

use super::scan::{self, Read};
use super::{Counters, Reader};
use crate::error::{Error, Result};
use crate::vstore::prefetch::Prefetcher;
use crate::vstore::{ReadPipeline, ValuePointer};
use parking_lot::{Condvar, Mutex};
use std::collections::{BTreeSet, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Default memory budget of one scan's pipeline (bytes,
/// `Options::trie_scan_pipeline`).
pub const DEFAULT_BUDGET: u64 = 32 << 20;

/// One planned read and the requests it serves.
struct Job {
    /// `(request number, key, pointer)` of each request served.
    members: Vec<(u64, Vec<u8>, ValuePointer)>,
    /// `(table, start, end)` of a span read; `None`: a point read of the
    /// one member.
    span: Option<(u64, u64, u64)>,
    /// Bytes the read holds while it runs.
    cost: u64,
}

/// What the cursor and the readers share.
struct State {
    /// The result of request `base + i` at `i`, once its read is done.
    slots: VecDeque<Option<Result<Option<Vec<u8>>>>>,
    /// Request number of `slots[0]`.
    base: u64,
    /// Bytes held: spans of reads not done, values not yet taken.
    held: u64,
    /// Reads handed to readers and not done (queued or running).
    in_flight: usize,
    /// Reads running now.
    running: usize,
    /// Set on drop: queued reads do nothing.
    cancelled: bool,
}

struct Shared {
    state: Mutex<State>,
    done: Condvar,
}

/// A scan's pipeline over a [`super::TrieStore`] (see the module docs).
pub struct Pipeline {
    shared: Arc<Shared>,
    reader: Arc<Reader>,
    /// The pool the reads run on; `None`: the cursor reads.
    pool: Option<Arc<Prefetcher>>,
    counters: Arc<Counters>,
    budget: u64,
    floor: f64,
    bound: u64,
    /// Spans are read with direct I/O.
    direct: bool,
    /// Planned reads not yet handed to a reader, in order.
    queue: VecDeque<Job>,
    /// Requests handed in so far.
    pushed: u64,
    /// The next request whose value the cursor takes.
    next: u64,
}

impl Pipeline {
    /// A pipeline with `budget` bytes (at least 64 KiB), reading on `pool`
    /// (or on the cursor's thread), planning spans with `rules` at the
    /// device's floor, or the page cache's when `from_memory`; spans are
    /// read with direct I/O when `direct` and not `from_memory`.
    pub(super) fn new(
        reader: Arc<Reader>,
        pool: Option<Arc<Prefetcher>>,
        counters: Arc<Counters>,
        budget: u64,
        rules: &scan::SpanRules,
        from_memory: bool,
        direct: bool,
    ) -> Self {
        let budget = budget.max(64 << 10);
        let floor = if from_memory {
            rules.density_memory
        } else {
            rules.density
        };
        let longest = if pool.is_some() {
            rules.parallel
        } else {
            rules.max
        };
        Pipeline {
            shared: Arc::new(Shared {
                state: Mutex::new(State {
                    slots: VecDeque::new(),
                    base: 0,
                    held: 0,
                    in_flight: 0,
                    running: 0,
                    cancelled: false,
                }),
                done: Condvar::new(),
            }),
            reader,
            pool,
            counters,
            budget,
            floor,
            bound: longest.min(budget / 4),
            direct: direct && !from_memory,
            queue: VecDeque::new(),
            pushed: 0,
            next: 0,
        }
    }

    /// Hands queued reads to readers while they fit in the budget (or
    /// while nothing is in flight).
    fn issue(&mut self) {
        while let Some(job) = self.queue.front() {
            {
                let mut st = self.shared.state.lock();
                if st.cancelled || (st.in_flight > 0 && st.held + job.cost > self.budget) {
                    return;
                }
                st.held += job.cost;
                st.in_flight += 1;
                self.counters
                    .pipeline_peak
                    .fetch_max(st.held, Ordering::Relaxed);
            }
            let Some(job) = self.queue.pop_front() else {
                return;
            };
            let work = read_job(
                self.shared.clone(),
                self.reader.clone(),
                self.counters.clone(),
                job,
                self.direct,
            );
            match &self.pool {
                Some(pool) => {
                    if let Err(work) = pool.submit(work) {
                        work();
                    }
                }
                None => work(),
            }
        }
    }
}

/// The work of one read, for a reader thread (or the cursor).
fn read_job(
    shared: Arc<Shared>,
    reader: Arc<Reader>,
    counters: Arc<Counters>,
    job: Job,
    direct: bool,
) -> Box<dyn FnOnce() + Send + 'static> {
    Box::new(move || {
        {
            let mut st = shared.state.lock();
            if st.cancelled {
                st.in_flight -= 1;
                st.held -= job.cost;
                shared.done.notify_all();
                return;
            }
            st.running += 1;
        }
        counters.pipeline_running.fetch_add(1, Ordering::Relaxed);
        let reqs: Vec<(Vec<u8>, ValuePointer)> = job
            .members
            .iter()
            .map(|(_, k, p)| (k.clone(), *p))
            .collect();
        let read = match job.span {
            Some((table, start, end)) => Read::Span {
                table,
                start,
                end,
                members: (0..reqs.len()).collect(),
            },
            None => Read::Single(0),
        };
        let served = scan::run(&reader, &reqs, &read, direct);
        counters.pipeline_running.fetch_sub(1, Ordering::Relaxed);
        let mut st = shared.state.lock();
        st.running -= 1;
        st.in_flight -= 1;
        st.held -= job.cost;
        if !st.cancelled {
            for (i, r) in served {
                let Some(n) = job
                    .members
                    .get(i)
                    .and_then(|(n, _, _)| n.checked_sub(st.base))
                else {
                    continue;
                };
                if let Ok(Some(v)) = &r {
                    st.held += v.len() as u64;
                }
                if let Some(slot) = st.slots.get_mut(n as usize) {
                    *slot = Some(r);
                }
            }
            counters.pipeline_peak.fetch_max(st.held, Ordering::Relaxed);
        }
        shared.done.notify_all();
    })
}

impl ReadPipeline for Pipeline {
    fn window(&self) -> u64 {
        self.budget / 2
    }

    fn push(&mut self, reqs: Vec<(Vec<u8>, ValuePointer)>) {
        if reqs.is_empty() {
            return;
        }
        let first = self.pushed;
        self.pushed += reqs.len() as u64;
        self.shared
            .state
            .lock()
            .slots
            .extend((0..reqs.len()).map(|_| None));
        let ptrs: Vec<(usize, ValuePointer)> =
            reqs.iter().enumerate().map(|(i, (_, p))| (i, *p)).collect();
        let c = &self.counters;
        let tables: BTreeSet<u64> = ptrs.iter().map(|(_, p)| p.file_id).collect();
        c.span_tables
            .fetch_add(tables.len() as u64, Ordering::Relaxed);
        let mut reads = scan::plan(&ptrs, self.floor, self.bound);
        // The cursor needs the reads in the order of the first request
        // each serves.
        reads.sort_by_key(|r| match r {
            Read::Span { members, .. } => members.iter().copied().min().unwrap_or(0),
            Read::Single(i) => *i,
        });
        let mut slots: Vec<Option<(Vec<u8>, ValuePointer)>> = reqs.into_iter().map(Some).collect();
        let mut take = |i: usize| slots[i].take().map(|(k, p)| (first + i as u64, k, p));
        for r in reads {
            let job = match r {
                Read::Single(i) => {
                    c.single_reads.fetch_add(1, Ordering::Relaxed);
                    let Some(m) = take(i) else { continue };
                    let cost = u64::from(m.2.length);
                    Job {
                        members: vec![m],
                        span: None,
                        cost,
                    }
                }
                Read::Span {
                    table,
                    start,
                    end,
                    members,
                } => {
                    c.span_reads.fetch_add(1, Ordering::Relaxed);
                    c.span_bytes.fetch_add(end - start, Ordering::Relaxed);
                    c.span_values
                        .fetch_add(members.len() as u64, Ordering::Relaxed);
                    Job {
                        members: members.into_iter().filter_map(&mut take).collect(),
                        span: Some((table, start, end)),
                        cost: end - start,
                    }
                }
            };
            self.queue.push_back(job);
        }
        self.issue();
    }

    fn next_value(&mut self) -> Option<Result<Option<Vec<u8>>>> {
        if self.next >= self.pushed {
            return None;
        }
        self.issue();
        let mut st = self.shared.state.lock();
        loop {
            if let Some(r) = st.slots.front_mut().and_then(Option::take) {
                st.slots.pop_front();
                st.base += 1;
                if let Ok(Some(v)) = &r {
                    st.held -= v.len() as u64;
                }
                drop(st);
                self.next += 1;
                self.issue();
                return Some(r);
            }
            if st.in_flight == 0 {
                // Nothing in flight, so the read of this request is still
                // queued: it fits now.
                if self.queue.is_empty() {
                    // Every read is done and none served this request
                    // (cannot happen: the plan serves every request).
                    st.slots.pop_front();
                    st.base += 1;
                    self.next += 1;
                    return Some(Err(Error::InvalidArgument(
                        "scan pipeline planned no read for a request".into(),
                    )));
                }
                drop(st);
                self.issue();
                st = self.shared.state.lock();
                continue;
            }
            self.shared.done.wait(&mut st);
        }
    }
}

impl Drop for Pipeline {
    fn drop(&mut self) {
        self.queue.clear();
        let mut st = self.shared.state.lock();
        st.cancelled = true;
        while st.running > 0 {
            self.shared.done.wait(&mut st);
        }
    }
}
