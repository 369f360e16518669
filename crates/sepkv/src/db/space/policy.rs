//! The space-amplification target (`Options::space_amp_target`): how much
//! disk the database may take per live byte, and how GC and writers are
//! paced to keep to it.
//!
//! Users of value-separating stores ask for a bound on space that GC keeps
//! even when it falls behind (RocksDB #9561, Pebble #5005, Badger #1995).
//! sepkv measures the whole database — the index (SSTables, WAL, manifest)
//! and the value store — against the live user bytes (keys and values) the
//! value store holds — its live record bytes times the share of user bytes
//! in the records this process wrote ([`SpaceView::payload_share`]), so
//! that record headers count as overhead — and divides the way from 1.0 to
//! the target `T` into bands:
//!
//! | estimated space amplification | what happens |
//! |---|---|
//! | below `1 + (T − 1) / 2` | background GC runs only by `gc_garbage_ratio` |
//! | from there to `1 + 0.9 (T − 1)` | background GC runs, paced ([`SpacePolicy::gc_pause`]) |
//! | from there to `T` | writers are slowed down (held to a rate; pauses of at most [`MAX_WRITE_DELAY`]) |
//! | `T` and above | writers stop: each is held for one GC step at most — the step running, or one it runs — then writes |
//!
//! At the target a writer waits for the room one step frees, not until the
//! store is back under the target. Running steps until then (up to 64 per
//! write), the `overwrite` benchmark's longest write took 1.4–1.6 s at
//! 300 k × 1000 B and 5–11 s at 1 M, most of the time writers were
//! stalled in the phase; held for one step, 26–122 ms (see
//! `docs/benchmarks.md`). A stop that asks for the index compaction that
//! finds hidden garbage ([`Decision::discover`]) runs that compaction in
//! place of the step.
//!
//! `value_capacity`, when set, has bands of its own, on the share of the
//! room GC can free that is in use ([`crate::vstore::CapacityUse::fill`]):
//! background GC runs back to back from [`CAPACITY_GC_START`], and writers
//! are slowed down from [`CAPACITY_SLOWDOWN_START`]; at 1.0 user appends are
//! refused and the writer runs GC itself. A value store's own soft bound
//! ([`SpaceView::bound`]: the bands' over-provisioning) slows writers from
//! [`BOUND_SLOWDOWN_START`] of its room and runs GC back to back there;
//! past it the store holds each writer for one GC step. The most pressing
//! of the bounds acts.
//!
//! # Slowing writers down
//! A slowed-down writer is held to a rate, not given a fixed pause: the
//! rate at which GC has been freeing space (net of what it copies; see
//! [`SpaceGovernor::gc_ran`]) times a factor that falls from 2 at the
//! slowdown band's start to 1 halfway into it and towards 0 at its end, so
//! writers settle where GC keeps pace with them. The writers' debt is kept
//! on one clock ([`SpaceGovernor::before_write`]); a writer sleeps only
//! once the debt reaches [`WRITE_DELAY_QUANTUM`] (200 µs), and never
//! longer than [`MAX_WRITE_DELAY`] (300 µs), so a write's latency stays
//! under half a millisecond while the rate holds instead of an occasional
//! write running GC for tens of milliseconds (RocksDB's delayed write rate
//! works the same way). Short pauses, more of them: with a quantum of
//! 500 µs and pauses of up to 1 ms, the update experiment's `wisckey`
//! writes had p99 of 0.59–0.60 ms and p99.99 of 2.0–3.9 ms; with these,
//! 0.33–0.45 ms and 1.8–3.5 ms (twelve phases each, interleaved).
//!
//! # Estimating the live bytes
//! The value store knows the garbage compaction reported (the
//! [`crate::vstore::garbage`] table, which survives restarts), but not the
//! garbage whose newer pointer has not met the older one in a compaction
//! yet (the index's own garbage: overwritten pointers in the memtable and
//! the upper levels). Like Scavenger+'s compensated sizes, sepkv estimates
//! it ([`SpaceGovernor::hidden_garbage`]): the value bytes written since the
//! index was last compacted whole, each write's times the share of recent
//! writes that overwrote a separated value (sampled: every write looks its
//! key up until [`SETTLED_SAMPLES`] have, then one in
//! [`OVERWRITE_SAMPLE_EVERY`]; the share is a moving average over
//! [`SHARE_WINDOW`] samples), less the garbage
//! compaction has reported since. The bound is judged against the live
//! bytes *without* it — the conservative figure. When the hidden part is
//! the larger share of what stands between the store and its target, GC
//! alone cannot say what is dead cheaply; the engine then compacts the
//! whole index (which is small: keys and pointers), and compaction reports
//! it ([`Decision::discover`]). Until [`SETTLED_SAMPLES`] writes have
//! been sampled since open, one of them an overwrite, the share is mostly
//! its prior (every write may overwrite), and the estimate counts for
//! nothing: it starts no GC, holds no writer and asks for no index
//! compaction ([`SpaceView::hidden_settled`]). Sampling every write until
//! then lets a short-lived process (a CLI import, a service that
//! restarts) settle it within its first 32 write batches.
//!
//! # Target, reserve and GC thresholds
//! - `space_amp_target` is relative: disk ≤ `T` × live. It applies to every
//!   separated layout; `f64::INFINITY` turns it off.
//! - `value_capacity` is absolute: the value store never spans more than
//!   it (HashKV: main segments plus the reserve, which the cold data log
//!   shares). A write that would pass it runs GC first and fails with
//!   `ValueStoreFull` only when GC cannot free anything. With both set, the
//!   one reached first acts.
//! - `gc_garbage_ratio` `r` starts background GC by the value store's
//!   garbage ratio alone, i.e. at a value-store amplification of
//!   `1 / (1 − r)` (2.0 for the default 0.5). The target's GC band starts
//!   at `1 + (T − 1) / 2`, earlier than that for every `T` below
//!   `2 / (1 − r) − 1` (3.0 for the default): with the defaults the target
//!   drives GC and the ratio is a fallback for `T = ∞`.
//! - A database whose value store holds nothing to collect (no known and
//!   no possibly hidden garbage) is never stopped: live data and the index
//!   alone above the target is a target that cannot be kept, not a reason
//!   to refuse writes.

use crate::vstore::{CapacityUse, SpaceStats};
use parking_lot::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Longest pause a slowed-down writer takes per write.
pub const MAX_WRITE_DELAY: Duration = Duration::from_micros(300);

/// Debt at which a slowed-down writer sleeps (it writes without pausing
/// until then).
pub const WRITE_DELAY_QUANTUM: Duration = Duration::from_micros(200);

/// Most debt the writers carry: a write that costs more than a pause at
/// GC's rate (a large batch) leaves the rest for the writes after it, up
/// to this; past it, debt is forgiven (see [`SpaceGovernor::before_write`]).
const MAX_WRITE_DEBT: Duration = Duration::from_millis(2);

/// Per-write pause at the end of the slowdown band before GC's rate is
/// known (none measured yet).
const FALLBACK_WRITE_DELAY: Duration = Duration::from_micros(100);

/// Capacity fill from which background GC runs back to back.
pub const CAPACITY_GC_START: f64 = 0.5;

/// Capacity fill from which writers are slowed down. Held to GC's rate,
/// they settle about halfway into the band; the lower they settle, the
/// less garbage the value log's tail holds when GC reaches it. From 0.75,
/// the update experiment's `wisckey` copied more (WA 3.8–4.3) and ran at
/// 0.85× the throughput it has from 0.9 (WA 3.4–3.8), with the same tail.
pub const CAPACITY_SLOWDOWN_START: f64 = 0.9;

/// Fill of a store's own space bound ([`SpaceView::bound`]: the bands'
/// over-provisioning) from which writers are slowed down; from the same
/// point the store's own GC trigger runs background GC (the bands' from
/// `1 + 0.9 OP`), and it runs back to back inside the band.
pub const BOUND_SLOWDOWN_START: f64 = 0.9;

/// Longest pause of background GC between steps while it has work.
pub const MAX_GC_PAUSE: Duration = Duration::from_millis(100);

/// What the space figures of a database are now.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct SpaceView {
    /// Bytes the index occupies on disk (SSTables, WAL, manifest).
    pub index_bytes: u64,
    /// Value bytes that may be garbage compaction has not reported yet
    /// ([`SpaceGovernor::hidden_garbage`]).
    pub hidden_garbage: u64,
    /// The overwrite share behind `hidden_garbage` rests on at least
    /// [`SETTLED_SAMPLES`] sampled writes, one of them an overwrite
    /// ([`SpaceGovernor::hidden_settled`]); before that it is mostly the
    /// prior (every write may overwrite), and [`SpacePolicy::decide`]
    /// leaves it out.
    pub hidden_settled: bool,
    /// The value store's figures.
    pub value: SpaceStats,
    /// The value store's use of `value_capacity` (`None`: unbounded).
    pub capacity: Option<CapacityUse>,
    /// The value store's own soft space bound, when it has one
    /// ([`crate::vstore::ValueStore::space_bound_use`]: the bands'
    /// `band_over_provisioning`, or the target if tighter): `limit` is
    /// where writers are held for a GC step each. It slows writers down
    /// from [`BOUND_SLOWDOWN_START`] of the way from `floor` to `limit`,
    /// as the capacity does; it refuses no write.
    pub bound: Option<CapacityUse>,
    /// User bytes (key and value) per byte of the value store's records,
    /// as this process's writes have shown it
    /// ([`SpaceGovernor::payload_share`]); 0 (unknown) counts as 1. The
    /// target is judged against live *user* bytes, as space amplification
    /// is defined (directory size ÷ live user bytes): without the share a
    /// record's header counted as live data, and a store at its target
    /// stood 3 % past it for values of about 600 bytes.
    pub payload_share: f64,
}

impl SpaceView {
    /// [`SpaceView::payload_share`] within [1/2, 1] (1 when unknown).
    fn share(&self) -> f64 {
        if self.payload_share > 0.0 {
            self.payload_share.clamp(0.5, 1.0)
        } else {
            1.0
        }
    }

    /// Live user bytes of the value store by the payload share (at least 1).
    fn live_user_bytes(&self) -> u64 {
        ((self.value.live_bytes as f64 * self.share()) as u64).max(1)
    }
}

/// How hard the space target presses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Pressure {
    /// Below the GC band.
    Normal,
    /// In the GC band: background GC runs.
    Gc,
    /// In the slowdown band: writers pause briefly.
    Slowdown,
    /// At or past the target: writers run GC before they write.
    Stop,
}

/// The policy's judgement of a [`SpaceView`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Decision {
    /// The more pressing of the target's and the capacity's bands.
    pub pressure: Pressure,
    /// The band of the target alone.
    pub target_pressure: Pressure,
    /// The band of the capacity alone (never `Stop`: a full store refuses
    /// user appends, and the writer runs GC then).
    pub capacity_pressure: Pressure,
    /// The capacity's fill ([`CapacityUse::fill`]), when it has one.
    pub capacity_fill: Option<f64>,
    /// The band of the store's own space bound alone ([`SpaceView::bound`]:
    /// `Normal` or `Slowdown`).
    pub bound_pressure: Pressure,
    /// The store's own space bound's fill, when it has one.
    pub bound_fill: Option<f64>,
    /// How deep into the slowdown band the store is: 0 at its start (or
    /// outside it), 1 at its end; the deeper of the two bounds.
    pub depth: f64,
    /// Estimated space amplification (conservative: settled hidden
    /// garbage counted as garbage).
    pub amp: f64,
    /// The live user bytes `amp` divides by (bytes; at least 1).
    pub live: u64,
    /// Garbage possibly hidden in the index that the decision counted
    /// (bytes; 0 while the estimate is not settled).
    pub hidden: u64,
    /// Compact the index before (or instead of) GC: most of what is over
    /// the line may be garbage compaction has not reported yet.
    pub discover: bool,
    /// Bytes on disk over the GC band's start line (0 below it).
    pub over_start: u64,
    /// Bytes between the GC band's start line and the target.
    pub room: u64,
    /// The value store holds known or possibly hidden garbage, and
    /// collecting it all would bring the store under the target: writers
    /// are slowed down and stopped only then (what GC cannot free — the
    /// index, a write journal — is no reason to hold them).
    pub collectable: bool,
    /// The value store knows of garbage (reported by compaction or GC).
    pub value_garbage: bool,
}

/// The bands of one target. See the module docs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SpacePolicy {
    target: f64,
}

impl SpacePolicy {
    /// The policy for `target` (> 1.0; `f64::INFINITY` for none).
    pub fn new(target: f64) -> SpacePolicy {
        SpacePolicy { target }
    }

    /// False when no target is set.
    pub fn enabled(&self) -> bool {
        self.target.is_finite()
    }

    /// The target.
    pub fn target(&self) -> f64 {
        self.target
    }

    /// Where the GC band starts.
    pub fn gc_start(&self) -> f64 {
        1.0 + (self.target - 1.0) / 2.0
    }

    /// Where the slowdown band starts.
    pub fn slowdown_start(&self) -> f64 {
        1.0 + (self.target - 1.0) * 0.9
    }

    /// Judges `v`. Hidden garbage that is not settled
    /// ([`SpaceView::hidden_settled`]) counts for nothing: at
    /// the start of a load the prior alone calls every byte written
    /// garbage, and background GC then rewrote a store with nothing to
    /// collect (HashKV collected a quarter of its groups twice in a load
    /// of unique keys), and writers would have run GC themselves. Known
    /// garbage acts at once, and the estimate once it is settled, which
    /// takes [`SETTLED_SAMPLES`] write batches (commit groups) with
    /// separated values after each open.
    pub fn decide(&self, v: &SpaceView) -> Decision {
        let hidden = if v.hidden_settled {
            v.hidden_garbage
        } else {
            0
        };
        self.decide_with(v, hidden)
    }

    /// [`SpacePolicy::decide`] with `hidden` bytes of possibly hidden
    /// garbage.
    fn decide_with(&self, v: &SpaceView, hidden: u64) -> Decision {
        let span = v.value.live_bytes + v.value.garbage_bytes;
        let user = v.live_user_bytes();
        let hidden = hidden.min(user);
        let live = (user - hidden).max(1) as f64;
        let disk = (v.index_bytes + v.value.file_bytes) as f64;
        let amp = disk / live;
        let start = self.gc_start() * live;
        let over_start = (disk - start).max(0.0) as u64;
        let room = if self.enabled() {
            ((self.target - self.gc_start()) * live) as u64
        } else {
            0
        };
        let floor = disk - (v.value.garbage_bytes + hidden) as f64;
        let collectable = (v.value.garbage_bytes > 0 || hidden > 0) && floor < self.target * live;
        let pressure = if !self.enabled() || v.value.live_bytes == 0 && span == 0 {
            Pressure::Normal
        } else if !collectable {
            // Background GC may still collect what there is.
            if amp >= self.gc_start() && v.value.garbage_bytes + hidden > 0 {
                Pressure::Gc
            } else {
                Pressure::Normal
            }
        } else if amp >= self.target {
            Pressure::Stop
        } else if amp >= self.slowdown_start() {
            Pressure::Slowdown
        } else if amp >= self.gc_start() {
            Pressure::Gc
        } else {
            Pressure::Normal
        };
        // Hidden garbage is worth an index compaction once it is the larger
        // share of what compaction and GC could find, and more than an
        // eighth of the band's room.
        let discover =
            pressure >= Pressure::Gc && hidden > v.value.garbage_bytes && hidden > room / 8;
        let target_depth = if pressure == Pressure::Slowdown {
            ((amp - self.slowdown_start()) / (self.target - self.slowdown_start())).clamp(0.0, 1.0)
        } else {
            0.0
        };
        // The capacity's bands, while there is something to collect.
        let capacity_fill = v.capacity.map(|c| c.fill(hidden));
        let has_garbage = v.value.garbage_bytes > 0 || hidden > 0;
        let (capacity_pressure, capacity_depth) = match capacity_fill {
            Some(f) if has_garbage && f >= CAPACITY_SLOWDOWN_START => (
                Pressure::Slowdown,
                ((f - CAPACITY_SLOWDOWN_START) / (1.0 - CAPACITY_SLOWDOWN_START)).clamp(0.0, 1.0),
            ),
            Some(f) if has_garbage && f >= CAPACITY_GC_START => (Pressure::Gc, 0.0),
            _ => (Pressure::Normal, 0.0),
        };
        // The store's own bound: slowdown only (its GC trigger is its own).
        let bound_fill = v.bound.map(|b| b.fill(0));
        let (bound_pressure, bound_depth) = match bound_fill {
            Some(f) if v.value.garbage_bytes > 0 && f >= BOUND_SLOWDOWN_START => (
                Pressure::Slowdown,
                ((f - BOUND_SLOWDOWN_START) / (1.0 - BOUND_SLOWDOWN_START)).clamp(0.0, 1.0),
            ),
            _ => (Pressure::Normal, 0.0),
        };
        Decision {
            pressure: pressure.max(capacity_pressure).max(bound_pressure),
            target_pressure: pressure,
            capacity_pressure,
            capacity_fill,
            bound_pressure,
            bound_fill,
            depth: target_depth.max(capacity_depth).max(bound_depth),
            value_garbage: v.value.garbage_bytes > 0,
            amp,
            live: live as u64,
            hidden,
            discover,
            over_start,
            room,
            collectable,
        }
    }

    /// How long a writer pauses per write in the slowdown band while GC's
    /// rate is not known yet: from nothing at its start to 100 µs at its
    /// end (once it is known, [`SpaceGovernor::before_write`] holds writers
    /// to [`SpacePolicy::allowed_rate`] instead). The writers' path
    /// computes the same pause inline; this form is what the tests check.
    #[cfg(test)]
    pub fn write_delay(&self, d: &Decision) -> Duration {
        if d.pressure != Pressure::Slowdown {
            return Duration::ZERO;
        }
        FALLBACK_WRITE_DELAY.mul_f64(d.depth)
    }

    /// The rate slowed-down writers are held to at `depth` into the
    /// slowdown band, given GC's net rate (bytes per second): twice GC's
    /// rate at the band's start, GC's rate halfway, a twentieth at its end.
    pub fn allowed_rate(depth: f64, gc_rate: f64) -> f64 {
        gc_rate * (2.0 * (1.0 - depth)).max(0.05)
    }

    /// The pause before background GC's next step: `None` below the GC
    /// band (nothing to do for the target), else the time the writers,
    /// at `write_rate` bytes per second, take to bring the store halfway
    /// into the band — zero once it is there — capped at [`MAX_GC_PAUSE`].
    /// So GC runs back to back while it is behind and idles in step with
    /// the write rate while it is ahead (the load-adaptive pacing of
    /// Scavenger+, the compaction pressure of RocksDB).
    pub fn gc_pause(&self, d: &Decision, write_rate: f64) -> Option<Duration> {
        if d.capacity_pressure >= Pressure::Gc || d.bound_pressure >= Pressure::Slowdown {
            // The capacity is an absolute bound a writer would meet as a
            // refused append, and past the store's own bound writers are
            // held for GC steps: GC keeps as far ahead as it can.
            return Some(Duration::ZERO);
        }
        if d.target_pressure < Pressure::Gc {
            return None;
        }
        let halfway = d.room / 2;
        if d.over_start >= halfway || write_rate <= 0.0 {
            return Some(if d.over_start >= halfway {
                Duration::ZERO
            } else {
                MAX_GC_PAUSE
            });
        }
        let secs = (halfway - d.over_start) as f64 / write_rate;
        Some(Duration::from_secs_f64(secs).min(MAX_GC_PAUSE))
    }
}

/// What a writer does about the target before it writes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum WriteAction {
    /// Write.
    Go,
    /// Pause this long, then write.
    Delay(Duration),
    /// Run GC (or, with `discover`, compact the index) first, then ask
    /// again.
    Stop {
        /// Compact the index first (see [`Decision::discover`]).
        discover: bool,
    },
    /// The figures are older than the bytes written since allow: take a
    /// fresh [`SpaceView`] ([`SpaceGovernor::refresh`]) and ask again.
    Refresh,
}

/// Counters of the governor (since open).
#[derive(Debug, Default)]
pub struct SpaceCounters {
    /// Writes paused in the slowdown band.
    pub slowdowns: AtomicU64,
    /// Writes that found the store at the target and ran GC first.
    pub stops: AtomicU64,
    /// Index compactions run to find hidden garbage.
    pub discoveries: AtomicU64,
    /// Writes let through at the target because GC could free nothing.
    pub target_misses: AtomicU64,
}

#[derive(Debug, Clone, Copy, Default)]
struct Cached {
    decision: Option<Decision>,
    /// Bytes on disk when the view was taken.
    disk: u64,
    /// Conservative live bytes when the view was taken.
    live: u64,
    /// Bytes written since.
    written: u64,
    /// Total bytes written when the GC loop last looked, and when.
    rate_mark: Option<(u64, Instant)>,
    total_written: u64,
    /// `total_written` at the last index compaction run to find hidden
    /// garbage.
    discovered_at: Option<u64>,
    /// Value bytes that may be shadowed since the index was last compacted
    /// whole (or at open: what its upper levels may shadow): each write's
    /// bytes times the overwrite share when it was made.
    since_whole: f64,
    /// One less the share of recent sampled writes that overwrote a
    /// separated value: a moving average over about [`SHARE_WINDOW`]
    /// samples; 0 before any sample (the prior: every write may
    /// overwrite).
    share_miss: f64,
    /// The value store's [`crate::vstore::ValueStore::garbage_found`] then.
    found_base: u64,
    /// Sampled writes, and those that overwrote a separated value.
    samples: u64,
    overwrites: u64,
    /// Writes recorded.
    writes: u64,
    /// Disk bytes one written byte adds, as last seen between two views
    /// without GC in between (a write journal writes values twice); at
    /// least 1.
    growth: f64,
    /// The capacity's use over its floor, and its room (limit − floor),
    /// when the view was taken.
    capacity: Option<(u64, u64)>,
    /// The same for the store's own space bound.
    bound: Option<(u64, u64)>,
    /// GC's net rate (bytes freed less bytes copied, per second of a
    /// step), a moving average; 0 until a step did work.
    gc_rate: f64,
    /// When the slowed-down writers' debt is paid: each write moves it on
    /// by its bytes at the allowed rate.
    paid_until: Option<Instant>,
}

/// The engine's side of the target: a cached [`Decision`] that writers
/// project forward by the bytes they add, so the check before a write
/// costs no I/O; a fresh view is taken after every GC step and whenever
/// the writes since the last one could have moved the store by a sixteenth
/// of the GC band.
#[derive(Debug)]
pub struct SpaceGovernor {
    policy: SpacePolicy,
    /// The value store has a capacity or a space bound of its own (their
    /// bands apply with no target).
    bounded: bool,
    /// The value store learns of every overwrite as it happens (the bands'
    /// invalidity table): no write is sampled and no garbage is hidden.
    exact: bool,
    cached: Mutex<Cached>,
    /// User bytes (keys and values) of the values separated since open,
    /// and the bytes of the records that hold them: added on every write,
    /// so kept outside `cached`'s lock.
    sep_payload: AtomicU64,
    sep_records: AtomicU64,
    /// What the governor did.
    pub counters: SpaceCounters,
}

/// Least bytes between two fresh views taken for writers.
const MIN_REFRESH_BYTES: u64 = 64 << 10;

/// Once [`SETTLED_SAMPLES`] writes have been sampled, one write in this many
/// looks its key up to learn whether it overwrites a separated value
/// (every write before).
pub const OVERWRITE_SAMPLE_EVERY: u64 = 16;

/// Sampled writes from which the hidden-garbage estimate may act, once one
/// of them was an overwrite ([`SpaceView::hidden_settled`]).
pub const SETTLED_SAMPLES: u64 = 32;

/// Sampled writes the overwrite share is averaged over
/// ([`SpaceGovernor::overwrite_share`]: each sample moves it by
/// `1 / SHARE_WINDOW` of the way to its own answer): about 512 writes
/// once one in [`OVERWRITE_SAMPLE_EVERY`] is sampled.
pub const SHARE_WINDOW: f64 = 32.0;

impl SpaceGovernor {
    /// A governor for `target` with no view yet (writers are asked to take
    /// one first); `bounded` when the value store has a capacity.
    pub fn new(target: f64, bounded: bool) -> SpaceGovernor {
        SpaceGovernor {
            policy: SpacePolicy::new(target),
            bounded,
            exact: false,
            cached: Mutex::new(Cached::default()),
            sep_payload: AtomicU64::new(0),
            sep_records: AtomicU64::new(0),
            counters: SpaceCounters::default(),
        }
    }

    /// This governor for a value store that learns of every overwrite as
    /// it happens (the bands' invalidity table): no write is sampled, and
    /// the index hides no garbage ([`SpaceGovernor::hidden_garbage`] is 0).
    pub fn with_exact_garbage(mut self) -> SpaceGovernor {
        self.exact = true;
        self
    }

    /// The policy.
    pub fn policy(&self) -> &SpacePolicy {
        &self.policy
    }

    /// Takes a fresh view; returns its decision.
    pub fn refresh(&self, v: &SpaceView) -> Decision {
        let d = self.policy.decide(v);
        let mut c = self.cached.lock();
        let disk = v.index_bytes + v.value.file_bytes;
        if c.written >= MIN_REFRESH_BYTES && disk > c.disk {
            let seen = (disk - c.disk) as f64 / c.written as f64;
            c.growth = seen.clamp(1.0, 3.0);
        } else if c.growth < 1.0 {
            c.growth = 1.0;
        }
        c.decision = Some(d);
        c.disk = disk;
        c.live = d.live;
        c.written = 0;
        // As `CapacityUse::fill` measures it: bytes into the room, and its
        // width.
        let into = |u: CapacityUse, hidden: u64| {
            let width = u.room_width(hidden);
            (u.used.saturating_sub(u.limit.saturating_sub(width)), width)
        };
        c.capacity = v.capacity.map(|u| into(u, d.hidden));
        c.bound = v.bound.map(|u| into(u, 0));
        d
    }

    /// True when writers consult the governor at all: a target is set or
    /// the value store has a capacity.
    pub fn active(&self) -> bool {
        self.policy.enabled() || self.bounded
    }

    /// Records a GC step that did work: `freed` bytes released, `copied`
    /// bytes of live records written again, in `took`. Feeds the rate
    /// slowed-down writers are held to.
    pub fn gc_ran(&self, freed: u64, copied: u64, took: Duration) {
        let secs = took.as_secs_f64();
        if secs <= 0.0 {
            return;
        }
        let sample = freed.saturating_sub(copied) as f64 / secs;
        let mut c = self.cached.lock();
        c.gc_rate = if c.gc_rate > 0.0 {
            0.7 * c.gc_rate + 0.3 * sample
        } else {
            sample
        };
    }

    /// GC's net rate as last measured (bytes per second; 0 before any).
    #[cfg(test)]
    pub fn gc_rate(&self) -> f64 {
        self.cached.lock().gc_rate
    }

    /// What a writer about to add `bytes` does. Projects the last view by
    /// the bytes written since, so that a run of writes meets the slowdown
    /// band and then the stop before the store passes the target (or the
    /// capacity), not after. In the slowdown band the writers are held to
    /// [`SpacePolicy::allowed_rate`]: each write adds its bytes to their
    /// debt, and the one that finds it at [`WRITE_DELAY_QUANTUM`] or more
    /// pauses (at most [`MAX_WRITE_DELAY`]). Counts slowdowns and stops.
    pub fn before_write(&self, bytes: u64) -> WriteAction {
        if !self.active() {
            return WriteAction::Go;
        }
        let mut c = self.cached.lock();
        let Some(d) = c.decision else {
            return WriteAction::Refresh;
        };
        let mut room = if self.policy.enabled() {
            d.room
        } else {
            u64::MAX
        };
        for (_, r) in c.capacity.iter().chain(&c.bound) {
            room = room.min(*r);
        }
        let refresh_every = (room / 16).max(MIN_REFRESH_BYTES);
        if c.written >= refresh_every {
            return WriteAction::Refresh;
        }
        let grown = ((c.written + bytes) as f64 * c.growth.max(1.0)) as u64;
        let mut depth: f64 = 0.0;
        let mut slowed = false;
        // Nothing to collect at the last view: writes since may have made
        // garbage, which the next view (within `refresh_every` bytes)
        // finds.
        if self.policy.enabled() && d.collectable {
            let amp = (c.disk + grown) as f64 / c.live as f64;
            if amp >= self.policy.target() {
                self.counters.stops.fetch_add(1, Ordering::Relaxed);
                let due = d.discover
                    && c.discovered_at.is_none_or(|at| {
                        c.total_written - at >= (d.room / 8).max(MIN_REFRESH_BYTES)
                    });
                c.paid_until = None;
                return WriteAction::Stop { discover: due };
            }
            if amp >= self.policy.slowdown_start() {
                slowed = true;
                depth = (amp - self.policy.slowdown_start())
                    / (self.policy.target() - self.policy.slowdown_start());
            }
        }
        if let (Some((over, room)), true) = (c.capacity, d.capacity_fill.is_some()) {
            let has_garbage = d.value_garbage || d.hidden > 0;
            let fill = if room == 0 {
                1.0
            } else {
                (over + grown) as f64 / room as f64
            };
            if has_garbage && fill >= CAPACITY_SLOWDOWN_START {
                slowed = true;
                depth =
                    depth.max((fill - CAPACITY_SLOWDOWN_START) / (1.0 - CAPACITY_SLOWDOWN_START));
            }
        }
        if let (Some((over, width)), true) = (c.bound, d.bound_fill.is_some()) {
            let fill = (over + grown) as f64 / width as f64;
            if d.value_garbage && fill >= BOUND_SLOWDOWN_START {
                slowed = true;
                depth = depth.max((fill - BOUND_SLOWDOWN_START) / (1.0 - BOUND_SLOWDOWN_START));
            }
        }
        if !slowed {
            c.paid_until = None;
            return WriteAction::Go;
        }
        // NaN (a degenerate view) counts as the band's end.
        let depth = if depth.is_nan() {
            1.0
        } else {
            depth.clamp(0.0, 1.0)
        };
        self.counters.slowdowns.fetch_add(1, Ordering::Relaxed);
        if c.gc_rate <= 0.0 {
            // GC's pace is not known yet: a short pause per write.
            return WriteAction::Delay(FALLBACK_WRITE_DELAY.mul_f64(depth));
        }
        let rate = SpacePolicy::allowed_rate(depth, c.gc_rate);
        let now = Instant::now();
        let from = c.paid_until.map_or(now, |t| t.max(now));
        // Debt past [`MAX_WRITE_DEBT`] is forgiven: a rate far below the
        // writers' is held by pausing every write, not by a growing
        // backlog. So the cost is capped there before it becomes a
        // `Duration`: a GC that has been freeing (almost) nothing net has
        // a rate near 0, and the quotient overflows a `Duration` or is
        // infinite.
        let cap = MAX_WRITE_DEBT;
        let secs = bytes as f64 * c.growth.max(1.0) / rate;
        let cost = if secs.is_finite() && secs < cap.as_secs_f64() {
            Duration::from_secs_f64(secs)
        } else {
            cap
        };
        let until = (from + cost).min(now + cap);
        c.paid_until = Some(until);
        let owed = until - now;
        if owed >= WRITE_DELAY_QUANTUM {
            WriteAction::Delay(owed.min(MAX_WRITE_DELAY))
        } else {
            WriteAction::Go
        }
    }

    /// True when an index compaction to find hidden garbage is due for `d`:
    /// it asks for one, and since the last one at least an eighth of the
    /// GC band's room was written (the memtable alone can look like hidden
    /// garbage right after one).
    pub fn discovery_due(&self, d: &Decision) -> bool {
        let c = self.cached.lock();
        d.discover
            && c.discovered_at
                .is_none_or(|at| c.total_written - at >= (d.room / 8).max(MIN_REFRESH_BYTES))
    }

    /// True when, right after open, the index's upper levels may hide
    /// enough garbage that an index compaction to find it is worth running
    /// before anything else: [`SpacePolicy::decide`]'s `discover`, with
    /// everything they may shadow counted as hidden although no write has
    /// been sampled yet (`v.hidden_garbage` then holds what
    /// [`SpaceGovernor::index_compacted`] was given at open). The estimate
    /// is not settled at open, so writers are never held by it; this lets
    /// the GC thread replace it by what compaction reports. Without it a
    /// database that short-lived processes write (a CLI import, a
    /// restarting service) carried the last process's overwrites as live
    /// bytes, and its GC and target worked from a figure a third too
    /// high.
    pub fn discovery_due_at_open(&self, v: &SpaceView) -> bool {
        if !self.policy.enabled() {
            return false;
        }
        let d = self.policy.decide_with(v, v.hidden_garbage);
        d.discover && self.cached.lock().discovered_at.is_none()
    }

    /// True when, at close, the store may be in the target's GC band or
    /// past it if `v.hidden_garbage` (the caller passes what the index's
    /// upper levels may shadow, an upper bound) were all garbage: an index
    /// compaction then tells how much is. The sampled estimate lags in a
    /// process that lives for a second: in killed and short-lived import
    /// rounds it put the store at 1.28 when it stood at 1.62.
    pub fn discovery_due_at_close(&self, v: &SpaceView) -> bool {
        if !self.policy.enabled() {
            return false;
        }
        let d = self.policy.decide_with(v, v.hidden_garbage);
        d.hidden > 0 && d.collectable && d.target_pressure >= Pressure::Gc
    }

    /// Records that an index compaction to find hidden garbage ran.
    pub fn discovered(&self) {
        let mut c = self.cached.lock();
        c.discovered_at = Some(c.total_written);
        self.counters.discoveries.fetch_add(1, Ordering::Relaxed);
    }

    /// Records `bytes` written (after the write).
    pub fn wrote(&self, bytes: u64) {
        let mut c = self.cached.lock();
        c.written += bytes;
        c.total_written += bytes;
        c.since_whole += bytes as f64 * (1.0 - c.share_miss);
        c.writes += 1;
    }

    /// Bytes written since open.
    pub fn total_written(&self) -> u64 {
        self.cached.lock().total_written
    }

    /// True when the write about to be made should be sampled: look its
    /// key up and report with [`SpaceGovernor::sampled`]. Every write is
    /// sampled until [`SETTLED_SAMPLES`] have been, then one in
    /// [`OVERWRITE_SAMPLE_EVERY`]: a short-lived process (a CLI import, a
    /// service that restarts) otherwise ended before its estimate settled,
    /// and the garbage its overwrites left behind drove nothing.
    pub fn sample_due(&self) -> bool {
        if !self.active() || self.exact {
            return false;
        }
        let c = self.cached.lock();
        c.samples < SETTLED_SAMPLES || c.writes.is_multiple_of(OVERWRITE_SAMPLE_EVERY)
    }

    /// Records values separated into the value store: `payload` user bytes
    /// (keys and values) in `records` bytes of records.
    pub fn separated(&self, payload: u64, records: u64) {
        self.sep_payload.fetch_add(payload, Ordering::Relaxed);
        self.sep_records.fetch_add(records, Ordering::Relaxed);
    }

    /// User bytes per record byte of the values separated since open
    /// ([`SpaceView::payload_share`]); 0 before any.
    pub fn payload_share(&self) -> f64 {
        // Read apart, the two may straddle a write: a share off by one
        // batch's bytes, for an estimate.
        let records = self.sep_records.load(Ordering::Relaxed);
        if records == 0 {
            0.0
        } else {
            self.sep_payload.load(Ordering::Relaxed) as f64 / records as f64
        }
    }

    /// Reports a sampled write: whether it overwrote a separated value.
    pub fn sampled(&self, overwrote: bool) {
        let mut c = self.cached.lock();
        c.samples += 1;
        c.overwrites += overwrote as u64;
        let miss = if overwrote { 0.0 } else { 1.0 };
        c.share_miss += (miss - c.share_miss) / SHARE_WINDOW;
    }

    /// Sets what the index may hide at open (value bytes its upper levels
    /// and recovered memtable may shadow), or after the index was compacted
    /// whole (the bytes written meanwhile), with the value store's
    /// `garbage_found` at that point.
    pub fn index_compacted(&self, may_shadow: u64, found: u64) {
        let mut c = self.cached.lock();
        c.since_whole = may_shadow as f64 * (1.0 - c.share_miss);
        c.found_base = found;
    }

    /// True once [`SETTLED_SAMPLES`] writes have been sampled since open
    /// and one of them overwrote a separated value. Without an overwrite
    /// the estimate is the prior's leftover (`1 / (samples + 1)` of what
    /// was written): at the start of a load of new keys, when the memtable
    /// and the files' last pages are a large share of a small store, that
    /// leftover made the store look collectable above its target, and GC
    /// rewrote live values.
    pub fn hidden_settled(&self) -> bool {
        let c = self.cached.lock();
        c.samples >= SETTLED_SAMPLES && c.overwrites > 0
    }

    /// True once a sampled write of this process overwrote a separated
    /// value.
    pub fn overwrites_seen(&self) -> bool {
        self.cached.lock().overwrites > 0
    }

    /// The share of recent writes that overwrite a separated value (a
    /// moving average over about [`SHARE_WINDOW`] sampled writes): 1 until
    /// samples say otherwise.
    #[cfg(test)]
    pub fn overwrite_share(&self) -> f64 {
        1.0 - self.cached.lock().share_miss
    }

    /// Value bytes that may be garbage nobody has reported yet: each
    /// write's bytes since the index was compacted whole times the
    /// overwrite share when it was made, less the garbage the value store
    /// learned of since (`found`: its
    /// [`crate::vstore::ValueStore::garbage_found`] now).
    ///
    /// The share is the recent one, not the share since open: after a
    /// load of new keys a process that goes on to overwrite them carried
    /// the load's samples in its share (a third of the overwrites counted
    /// halfway through a 500,000-record overwrite), and the estimate fell
    /// 0.2–0.5 short of the space amplification on disk, so background GC
    /// started late and writers were stopped for it.
    pub fn hidden_garbage(&self, found: u64) -> u64 {
        if self.exact {
            return 0;
        }
        let c = self.cached.lock();
        (c.since_whole as u64).saturating_sub(found.saturating_sub(c.found_base))
    }

    /// The write rate since the GC loop last asked (bytes per second); the
    /// first call returns 0.
    pub fn write_rate(&self) -> f64 {
        let mut c = self.cached.lock();
        let now = Instant::now();
        let total = c.total_written;
        let rate = match c.rate_mark {
            Some((bytes, at)) => {
                let secs = now.duration_since(at).as_secs_f64();
                if secs > 0.0 {
                    (total - bytes) as f64 / secs
                } else {
                    0.0
                }
            }
            None => 0.0,
        };
        c.rate_mark = Some((total, now));
        rate
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(index: u64, hidden: u64, live: u64, garbage: u64, file: u64) -> SpaceView {
        SpaceView {
            index_bytes: index,
            hidden_garbage: hidden,
            hidden_settled: true,
            value: SpaceStats {
                live_bytes: live,
                garbage_bytes: garbage,
                file_bytes: file,
            },
            capacity: None,
            bound: None,
            payload_share: 0.0,
        }
    }

    #[test]
    fn the_target_is_judged_against_live_user_bytes() {
        let p = SpacePolicy::new(1.5);
        // 100 MB of live records and 47 MB of garbage: 1.47 by records, in
        // the slowdown band.
        let v = view(0, 0, 100 << 20, 47 << 20, 147 << 20);
        let by_records = p.decide(&v);
        assert_eq!(by_records.pressure, Pressure::Slowdown);
        assert_eq!(by_records.live, 100 << 20);
        // Records of 20 header bytes on 616 bytes of key and value: the
        // same store holds 96.9 MB of user data, and stands past 1.5.
        let d = p.decide(&SpaceView {
            payload_share: 616.0 / 636.0,
            ..v
        });
        assert_eq!(d.pressure, Pressure::Stop);
        assert!(d.amp > 1.5 && d.amp < 1.53, "{}", d.amp);
        assert_eq!(d.live, ((100u64 << 20) as f64 * 616.0 / 636.0) as u64);
        // A share out of reason is held within [1/2, 1].
        let high = p.decide(&SpaceView {
            payload_share: 3.0,
            ..v
        });
        assert_eq!(high.live, 100 << 20);
        // The governor learns the share from the separated values.
        let g = SpaceGovernor::new(1.5, false);
        assert_eq!(g.payload_share(), 0.0);
        g.separated(616, 636);
        g.separated(616 * 2, 636 * 2);
        assert!((g.payload_share() - 616.0 / 636.0).abs() < 1e-12);
    }

    #[test]
    fn bands_follow_the_target() {
        let p = SpacePolicy::new(1.5);
        assert_eq!(p.gc_start(), 1.25);
        assert!((p.slowdown_start() - 1.45).abs() < 1e-9);
        // 100 MB live, no index upper levels: the bands by garbage.
        let at = |garbage: u64| p.decide(&view(0, 0, 100 << 20, garbage, (100 << 20) + garbage));
        assert_eq!(at(10 << 20).pressure, Pressure::Normal);
        assert_eq!(at(30 << 20).pressure, Pressure::Gc);
        assert_eq!(at(47 << 20).pressure, Pressure::Slowdown);
        assert_eq!(at(50 << 20).pressure, Pressure::Stop);
        assert_eq!(at(80 << 20).pressure, Pressure::Stop);
        // Growing garbage never skips from below the target to past it
        // without the slowdown band: every MiB step is seen.
        let mut seen = Vec::new();
        for g in 0..80u64 {
            let d = at(g << 20);
            if seen.last() != Some(&d.pressure) {
                seen.push(d.pressure);
            }
        }
        assert_eq!(
            seen,
            [
                Pressure::Normal,
                Pressure::Gc,
                Pressure::Slowdown,
                Pressure::Stop
            ]
        );
    }

    #[test]
    fn no_target_and_nothing_to_collect_never_press() {
        let off = SpacePolicy::new(f64::INFINITY);
        assert!(!off.enabled());
        let d = off.decide(&view(0, 0, 1 << 20, 10 << 20, 11 << 20));
        assert_eq!(d.pressure, Pressure::Normal);
        assert_eq!(off.gc_pause(&d, 1e6), None);
        // All live, a large index: over the target, but nothing to collect.
        let p = SpacePolicy::new(1.2);
        let d = p.decide(&view(10 << 20, 0, 10 << 20, 0, 10 << 20));
        assert!(d.amp >= 2.0);
        assert_eq!(d.pressure, Pressure::Normal);
        // Some garbage, but even without it the index keeps the store over
        // the target: background GC only, writers go.
        let d = p.decide(&view(10 << 20, 0, 10 << 20, 1 << 20, 11 << 20));
        assert!(!d.collectable);
        assert_eq!(d.pressure, Pressure::Gc);
    }

    #[test]
    fn hidden_garbage_counts_and_asks_for_an_index_compaction() {
        let p = SpacePolicy::new(1.5);
        // 40 MB span, nothing reported, up to 20 MB of it may be dead.
        let v = view(2 << 20, 20 << 20, 40 << 20, 0, 40 << 20);
        let d = p.decide(&v);
        assert_eq!(d.hidden, 20 << 20);
        assert!((d.amp - 42.0 / 20.0).abs() < 1e-9, "{}", d.amp);
        assert_eq!(d.pressure, Pressure::Stop);
        assert!(d.discover);
        // After the compaction everything is in the bottommost level and
        // compaction reported the garbage: GC, no more discovery.
        let v = view(1 << 20, 0, 25 << 20, 15 << 20, 40 << 20);
        let d = p.decide(&v);
        assert_eq!(d.hidden, 0);
        assert!(!d.discover);
        assert_eq!(d.pressure, Pressure::Stop);
    }

    #[test]
    fn writers_slow_down_gradually() {
        let p = SpacePolicy::new(1.5);
        let d = |garbage: u64| p.decide(&view(0, 0, 1000 << 20, garbage, (1000 << 20) + garbage));
        assert_eq!(p.write_delay(&d(300 << 20)), Duration::ZERO);
        let early = p.write_delay(&d(455 << 20));
        let late = p.write_delay(&d(495 << 20));
        assert!(early > Duration::ZERO && early < late && late <= MAX_WRITE_DELAY);
        assert_eq!(
            p.write_delay(&d(600 << 20)),
            Duration::ZERO,
            "stopped, not delayed"
        );
    }

    /// A run of writes (every one an overwrite, so garbage grows as fast
    /// as the store) meets the slowdown band and then the stop before the
    /// store passes the target, whatever the refresh granularity: the
    /// writer projects the view by what it wrote.
    #[test]
    fn governor_presses_before_the_target_is_passed() {
        let g = SpaceGovernor::new(1.5, false);
        let live = 100u64 << 20;
        let mut garbage = 0u64;
        let view = |garbage: u64| view(0, 0, live, garbage, live + garbage);
        assert_eq!(g.before_write(1000), WriteAction::Refresh, "no view yet");
        let mut first_delay = None;
        let mut stopped_at = None;
        for i in 0..200_000u64 {
            let action = match g.before_write(1000) {
                WriteAction::Refresh => {
                    g.refresh(&view(garbage));
                    g.before_write(1000)
                }
                a => a,
            };
            match action {
                WriteAction::Go => {}
                WriteAction::Delay(d) => {
                    assert!(d <= MAX_WRITE_DELAY);
                    first_delay.get_or_insert(i);
                }
                WriteAction::Stop { discover } => {
                    assert!(!discover);
                    stopped_at = Some(garbage);
                    break;
                }
                WriteAction::Refresh => panic!("asked to refresh twice"),
            }
            garbage += 1000;
            g.wrote(1000);
        }
        let stopped_at = stopped_at.expect("writers stopped");
        assert!(first_delay.is_some(), "slowed down before stopping");
        // Stopped with the store at or below the target (one write's slack).
        let amp = (live + stopped_at + 1000) as f64 / live as f64;
        assert!(amp >= 1.5 && amp < 1.5 + 2000.0 / live as f64, "{amp}");
        assert_eq!(g.counters.stops.load(Ordering::Relaxed), 1);
        assert!(g.counters.slowdowns.load(Ordering::Relaxed) > 0);
        // GC brings it back below: writers go again.
        g.refresh(&view(10 << 20));
        assert_eq!(g.before_write(1000), WriteAction::Go);
    }

    #[test]
    fn governor_without_target_or_garbage_lets_writes_go() {
        let off = SpaceGovernor::new(f64::INFINITY, false);
        assert_eq!(off.before_write(1 << 30), WriteAction::Go);
        let g = SpaceGovernor::new(1.5, false);
        // All live: nothing to collect, writes go however the projection
        // looks.
        let all_live = view(0, 0, 1 << 20, 0, 1 << 20);
        g.refresh(&all_live);
        for _ in 0..100 {
            let mut a = g.before_write(4096);
            if a == WriteAction::Refresh {
                g.refresh(&all_live);
                a = g.before_write(4096);
            }
            assert_eq!(a, WriteAction::Go);
            g.wrote(4096);
        }
    }

    #[test]
    fn unsettled_hidden_garbage_acts_on_nothing() {
        let p = SpacePolicy::new(1.5);
        // As in hidden_garbage_counts_and_asks_for_an_index_compaction, but
        // the estimate rests on the prior alone.
        let v = SpaceView {
            hidden_settled: false,
            ..view(2 << 20, 20 << 20, 40 << 20, 0, 40 << 20)
        };
        let d = p.decide(&v);
        assert_eq!(d.pressure, Pressure::Normal);
        assert_eq!(d.target_pressure, Pressure::Normal);
        assert!(!d.discover && !d.collectable);
        assert_eq!(d.hidden, 0);
        assert_eq!(p.write_delay(&d), Duration::ZERO);
        // Settled, the same estimate presses.
        let settled = p.decide(&SpaceView {
            hidden_settled: true,
            ..v
        });
        assert_eq!(settled.pressure, Pressure::Stop);
        // Known garbage past the target stops writers all the same.
        let v = SpaceView {
            hidden_settled: false,
            ..view(1 << 20, 20 << 20, 25 << 20, 15 << 20, 40 << 20)
        };
        assert_eq!(p.decide(&v).pressure, Pressure::Stop);
        // The governor settles after SETTLED_SAMPLES sampled writes, one of
        // which overwrote a separated value.
        let g = SpaceGovernor::new(1.5, false);
        for _ in 0..SETTLED_SAMPLES - 1 {
            g.sampled(false);
        }
        assert!(!g.hidden_settled());
        g.sampled(false);
        assert!(!g.hidden_settled(), "no overwrite: a load of new keys");
        g.sampled(true);
        assert!(g.hidden_settled());
    }

    /// Every write is sampled until the estimate settles, so that a
    /// process of a few hundred writes settles it too; one in
    /// `OVERWRITE_SAMPLE_EVERY` after that.
    #[test]
    fn every_write_is_sampled_until_the_estimate_settles() {
        assert!(!SpaceGovernor::new(f64::INFINITY, false).sample_due());
        let g = SpaceGovernor::new(1.5, false);
        for _ in 0..SETTLED_SAMPLES {
            assert!(g.sample_due());
            g.sampled(true);
            g.wrote(1000);
        }
        assert!(g.hidden_settled());
        let due = (0..4 * OVERWRITE_SAMPLE_EVERY)
            .filter(|_| {
                let d = g.sample_due();
                g.wrote(1000);
                d
            })
            .count();
        assert_eq!(due, 4);
    }

    #[test]
    fn hidden_garbage_follows_the_sampled_overwrite_share() {
        let g = SpaceGovernor::new(1.5, false);
        g.wrote(10 << 20);
        assert_eq!(
            g.hidden_garbage(0),
            10 << 20,
            "no samples: every write may overwrite"
        );
        // A load of new keys: the share falls towards 0, and what is
        // written meanwhile counts at the share of its time.
        for _ in 0..400 {
            g.sampled(false);
        }
        assert!(g.overwrite_share() < 1e-3, "{}", g.overwrite_share());
        g.wrote(10 << 20);
        let after_load = g.hidden_garbage(0);
        assert!(
            after_load - (10 << 20) < 20 << 10,
            "{after_load}: the load added almost nothing"
        );
        // Overwrites follow: the share climbs to them within a few windows,
        // whatever the load sampled before (a share since open would stay
        // at 1/5 after 100 overwrites).
        for _ in 0..100 {
            g.sampled(true);
        }
        assert!(g.overwrite_share() > 0.9, "{}", g.overwrite_share());
        g.wrote(10 << 20);
        let h = g.hidden_garbage(0);
        assert!(h > after_load + (9 << 20), "{h}");
        // A quarter of the writes overwrite: the share settles near 1/4.
        for i in 0..2000 {
            g.sampled(i % 4 == 0);
        }
        assert!(
            (g.overwrite_share() - 0.25).abs() < 0.1,
            "{}",
            g.overwrite_share()
        );
        // Compaction (or GC) finds some of it.
        assert_eq!(g.hidden_garbage(1 << 20), h - (1 << 20));
        // A whole-index compaction reports the rest.
        g.index_compacted(0, 3 << 20);
        assert_eq!(g.hidden_garbage(3 << 20), 0);
        let share = g.overwrite_share();
        g.wrote(1 << 20);
        assert_eq!(
            g.hidden_garbage(3 << 20),
            ((1u64 << 20) as f64 * share) as u64
        );
    }

    fn bounded_view(live: u64, garbage: u64, limit: u64) -> SpaceView {
        SpaceView {
            capacity: Some(CapacityUse {
                used: live + garbage,
                limit,
                floor: live,
                width: None,
            }),
            ..view(0, 0, live, garbage, live + garbage)
        }
    }

    /// `value_capacity` has bands of its own, with no target set: GC back
    /// to back from half the room, writers slowed from nine tenths;
    /// nothing presses while there is nothing to collect.
    #[test]
    fn capacity_bands_act_without_a_target() {
        let p = SpacePolicy::new(f64::INFINITY);
        let mb = 1u64 << 20;
        // 100 MB live, capacity 140 MB: a room of 40 MB.
        let d = p.decide(&bounded_view(100 * mb, 10 * mb, 140 * mb));
        assert_eq!(d.pressure, Pressure::Normal);
        assert_eq!(p.gc_pause(&d, 1e6), None);
        let d = p.decide(&bounded_view(100 * mb, 22 * mb, 140 * mb));
        assert_eq!(d.pressure, Pressure::Gc);
        assert_eq!(p.gc_pause(&d, 0.0), Some(Duration::ZERO));
        let d = p.decide(&bounded_view(100 * mb, 38 * mb, 140 * mb));
        assert_eq!(d.pressure, Pressure::Slowdown);
        assert!(d.depth > 0.4 && d.depth < 0.6, "{}", d.depth);
        // Nothing known to collect and nothing hidden: no pressure.
        let mut v = bounded_view(135 * mb, 0, 140 * mb);
        v.value.garbage_bytes = 0;
        assert_eq!(p.decide(&v).pressure, Pressure::Normal);
        // Little known garbage does not narrow the room below a fifth of
        // the capacity: 139 of 140 MB used, floor 138 MB.
        let u = CapacityUse {
            used: 139 * mb,
            limit: 140 * mb,
            floor: 138 * mb,
            width: None,
        };
        assert!((u.fill(0) - 27.0 / 28.0).abs() < 1e-9, "{}", u.fill(0));
    }

    /// A store's own space bound (the bands' over-provisioning) slows
    /// writers from [`BOUND_SLOWDOWN_START`] of its room, with no target
    /// and no capacity, runs GC back to back there, and never stops a
    /// writer (the store holds writers for a GC step past its limit).
    #[test]
    fn a_store_bound_slows_writers_without_a_target() {
        let mb = 1u64 << 20;
        // 100 MB live, bound 1.5: the room is 50 MB above the live bytes.
        let at = |garbage: u64| SpaceView {
            bound: Some(CapacityUse {
                used: 100 * mb + garbage,
                limit: 150 * mb,
                floor: 100 * mb,
                width: None,
            }),
            ..view(0, 0, 100 * mb, garbage, 100 * mb + garbage)
        };
        let p = SpacePolicy::new(f64::INFINITY);
        let d = p.decide(&at(40 * mb));
        assert_eq!(d.pressure, Pressure::Normal);
        assert_eq!(
            p.gc_pause(&d, 1e6),
            None,
            "below the band: the store's own trigger"
        );
        let d = p.decide(&at(47 * mb));
        assert_eq!(d.pressure, Pressure::Slowdown);
        assert_eq!(d.bound_pressure, Pressure::Slowdown);
        assert!(d.depth > 0.3 && d.depth < 0.5, "{}", d.depth);
        assert_eq!(p.gc_pause(&d, 1e6), Some(Duration::ZERO));
        let d = p.decide(&at(80 * mb));
        assert_eq!(d.pressure, Pressure::Slowdown, "never a stop");
        assert!((d.depth - 1.0).abs() < 1e-9);
        // The governor projects writes into the band and slows them.
        let g = SpaceGovernor::new(f64::INFINITY, true).with_exact_garbage();
        assert!(!g.sample_due(), "exact garbage: nothing sampled");
        assert_eq!(g.hidden_garbage(0), 0);
        g.refresh(&at(44 * mb));
        let mut slowed = false;
        for _ in 0..3000 {
            match g.before_write(1000) {
                WriteAction::Go => {}
                WriteAction::Delay(d) => {
                    assert!(d <= MAX_WRITE_DELAY);
                    slowed = true;
                    break;
                }
                WriteAction::Refresh => {
                    g.refresh(&at(44 * mb));
                }
                a => panic!("{a:?}"),
            }
            g.wrote(1000);
        }
        assert!(slowed, "no slowdown as writes neared the bound");
    }

    /// Slowed-down writers are held to the allowed rate: their pauses add
    /// up to their bytes at that rate, no pause passes
    /// [`MAX_WRITE_DELAY`], and a pause comes only once a quantum of debt
    /// has built up.
    #[test]
    fn slowed_writers_are_held_to_gc_rate() {
        let g = SpaceGovernor::new(f64::INFINITY, true);
        let mb = 1u64 << 20;
        // Halfway into the slowdown band; GC frees 10 MB/s net.
        let v = bounded_view(100 * mb, 38 * mb, 140 * mb);
        let d = g.refresh(&v);
        assert_eq!(d.pressure, Pressure::Slowdown);
        g.gc_ran(30 * mb, 20 * mb, Duration::from_secs(1));
        assert!((g.gc_rate() - (10 * mb) as f64).abs() < 1.0);
        let start = Instant::now();
        let (mut paused, mut pauses, mut writes) = (Duration::ZERO, 0, 0);
        while writes < 2000 {
            match g.before_write(1000) {
                WriteAction::Go => {}
                WriteAction::Delay(d) => {
                    assert!(d <= MAX_WRITE_DELAY, "{d:?}");
                    std::thread::sleep(d);
                    paused += d;
                    pauses += 1;
                }
                WriteAction::Refresh => {
                    g.refresh(&v);
                    continue;
                }
                a => panic!("{a:?}"),
            }
            writes += 1;
        }
        let rate = SpacePolicy::allowed_rate(d.depth, g.gc_rate());
        let want = Duration::from_secs_f64(2000.0 * 1000.0 / rate);
        // The writes themselves take time the debt is paid with too.
        assert!(start.elapsed() + Duration::from_millis(2) >= want);
        assert!(paused <= want + MAX_WRITE_DELAY, "{paused:?} > {want:?}");
        // Every pause pays at least a quantum of the debt.
        let most = want.as_nanos() / WRITE_DELAY_QUANTUM.as_nanos() + 1;
        assert!(pauses as u128 <= most, "{pauses} pauses, {most} at most");
        assert!(pauses < writes, "{pauses} pauses in {writes} writes");
    }

    /// A GC that frees nothing net (every step copies as much as it
    /// frees) drives its measured rate towards 0: writers in the slowdown
    /// band then pause the longest, and the rate's quotient never panics.
    #[test]
    fn a_vanishing_gc_rate_gives_the_longest_pause() {
        let g = SpaceGovernor::new(f64::INFINITY, true);
        let mb = 1u64 << 20;
        let v = bounded_view(100 * mb, 38 * mb, 140 * mb);
        assert_eq!(g.refresh(&v).pressure, Pressure::Slowdown);
        g.gc_ran(10 * mb, 10 * mb - 1, Duration::from_secs(1000));
        for _ in 0..2000 {
            g.gc_ran(mb, mb, Duration::from_secs(1));
        }
        assert!(g.gc_rate() > 0.0 && g.gc_rate() < 1e-300, "{}", g.gc_rate());
        let mut delays = 0;
        for _ in 0..10 {
            match g.before_write(1 << 20) {
                WriteAction::Delay(d) => {
                    assert_eq!(d, MAX_WRITE_DELAY);
                    delays += 1;
                }
                WriteAction::Refresh => {
                    g.refresh(&v);
                }
                a => panic!("{a:?}"),
            }
        }
        assert!(delays > 0);
    }

    #[test]
    fn gc_pause_follows_distance_and_write_rate() {
        let p = SpacePolicy::new(1.5);
        let d = |garbage: u64| p.decide(&view(0, 0, 100 << 20, garbage, (100 << 20) + garbage));
        // Below the band: nothing to do.
        assert_eq!(p.gc_pause(&d(10 << 20), 1e6), None);
        // Just inside: 12.5 MB to halfway; at 100 MB/s that is 125 ms,
        // capped; at 1 GB/s 12.5 ms.
        let just_in = d(25 << 20);
        assert_eq!(p.gc_pause(&just_in, 100e6), Some(MAX_GC_PAUSE));
        let fast = p.gc_pause(&just_in, 1e9).unwrap();
        assert!(
            fast > Duration::from_millis(10) && fast < Duration::from_millis(15),
            "{fast:?}"
        );
        // Past halfway: back to back.
        assert_eq!(p.gc_pause(&d(40 << 20), 0.0), Some(Duration::ZERO));
    }
}
