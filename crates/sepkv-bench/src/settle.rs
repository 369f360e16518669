//! Settling the machine between runs, so that one engine's writes are not
//! billed to the next.
//!
//! An engine that has just written a gigabyte leaves much of it dirty in
//! the page cache; the kernel writes it back while the next engine runs
//! and slows that one down. Before each engine's run, and before each
//! phase that starts from an empty database, the harness therefore
//! [settles](Settler::settle):
//!
//! 1. `syncfs` on the file system holding the databases (all of its dirty
//!    data, whoever wrote it, is sent to the device and waited for);
//! 2. waits until `Dirty + Writeback` of `/proc/meminfo` is back to its
//!    level when the whole run started, or below [`DIRTY_FLOOR`] —
//!    at most [`SETTLE_BOUND`], after which it goes on and says so (other
//!    processes may keep the machine's dirty pages high);
//! 3. drops the page cache (`1` into `/proc/sys/vm/drop_caches`), which
//!    needs root; where it may not, it says so once and goes on.
//!
//! Each settling is recorded ([`SettleRecord`]) in the report of the phase
//! that follows it. `--no-settle` turns settling off.
//!
//! A [`Settler`] is used by one thread (the runner's); it is `Send`.

use serde::{Deserialize, Serialize};
use std::path::Path;
use std::time::{Duration, Instant};

/// The longest a settling waits for the dirty pages to drain (30 s).
pub const SETTLE_BOUND: Duration = Duration::from_secs(30);
/// Below this many bytes of `Dirty + Writeback` (64 MiB) the machine counts
/// as settled whatever the level at the start of the run.
pub const DIRTY_FLOOR: u64 = 64 << 20;
/// How often the wait reads `/proc/meminfo` (100 ms).
pub const SETTLE_POLL: Duration = Duration::from_millis(100);

/// What one settling did, as recorded in the report of the phase after it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct SettleRecord {
    /// Wall-clock time of the whole settling: sync, wait and cache drop (s).
    pub seconds: f64,
    /// `Dirty + Writeback` reached its target (the level at the start of
    /// the run, or [`DIRTY_FLOOR`]) within [`SETTLE_BOUND`]; false when the
    /// wait gave up, or `/proc/meminfo` could not be read.
    pub settled: bool,
    /// `Dirty + Writeback` when the settling ended (bytes; 0 when unknown).
    pub dirty_bytes: u64,
    /// The page cache was dropped.
    pub cache_dropped: bool,
}

/// The page-cache figures of `/proc/meminfo` that settling watches
/// (bytes).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Meminfo {
    /// `Dirty`: modified pages not yet sent to the device.
    pub dirty: u64,
    /// `Writeback`: pages being written to the device now.
    pub writeback: u64,
}

impl Meminfo {
    /// Parses the text of `/proc/meminfo` (values in kB); `None` when
    /// `Dirty` or `Writeback` is missing or not a number.
    pub fn parse(text: &str) -> Option<Meminfo> {
        let (mut dirty, mut writeback) = (None, None);
        for line in text.lines() {
            let Some((name, rest)) = line.split_once(':') else {
                continue;
            };
            let slot = match name.trim() {
                "Dirty" => &mut dirty,
                "Writeback" => &mut writeback,
                _ => continue,
            };
            let mut words = rest.split_whitespace();
            let value: u64 = words.next()?.parse().ok()?;
            let unit = match words.next() {
                None => 1,
                Some(u) if u.eq_ignore_ascii_case("kb") => 1024,
                Some(_) => return None,
            };
            *slot = Some(value.checked_mul(unit)?);
        }
        Some(Meminfo {
            dirty: dirty?,
            writeback: writeback?,
        })
    }

    /// Reads `/proc/meminfo`; `None` where it is missing or unreadable.
    pub fn read() -> Option<Meminfo> {
        Self::parse(&std::fs::read_to_string("/proc/meminfo").ok()?)
    }

    /// `Dirty + Writeback` (bytes).
    pub fn pending(&self) -> u64 {
        self.dirty.saturating_add(self.writeback)
    }
}

/// How a [wait](wait_for_writeback) ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WaitOutcome {
    /// The level reached the target.
    pub settled: bool,
    /// The last level read (bytes; 0 when none could be read).
    pub last: u64,
    /// Times the level was read.
    pub reads: u32,
}

/// Waits until `read()` (the machine's `Dirty + Writeback`, bytes) is at
/// most `target`, reading it every `poll` (sleeping with `sleep`) for at
/// most `bound` in total: `bound / poll` sleeps, whatever the reads cost.
/// A read that fails (`None`) ends the wait as not settled.
pub fn wait_for_writeback(
    mut read: impl FnMut() -> Option<u64>,
    target: u64,
    bound: Duration,
    poll: Duration,
    mut sleep: impl FnMut(Duration),
) -> WaitOutcome {
    let max_sleeps = if poll.is_zero() {
        0
    } else {
        (bound.as_nanos() / poll.as_nanos()).min(u32::MAX as u128) as u32
    };
    let mut out = WaitOutcome {
        settled: false,
        last: 0,
        reads: 0,
    };
    let mut sleeps = 0u32;
    loop {
        let Some(level) = read() else {
            return out;
        };
        out.reads += 1;
        out.last = level;
        if level <= target {
            out.settled = true;
            return out;
        }
        if sleeps >= max_sleeps {
            return out;
        }
        sleep(poll);
        sleeps += 1;
    }
}

/// Settles the machine before runs (see the module docs). Made once per
/// benchmark run: it takes the `Dirty + Writeback` level the later
/// settlings wait for when it is made.
#[derive(Debug)]
pub struct Settler {
    target: u64,
    bound: Duration,
    /// Drop the page cache after the sync.
    drop_cache: bool,
    /// The page cache could not be dropped (said once).
    drop_refused: bool,
    /// `/proc/meminfo` could not be read (said once).
    meminfo_missing: bool,
}

impl Settler {
    /// A settler waiting for the current `Dirty + Writeback` level (or
    /// [`DIRTY_FLOOR`], whichever is higher), at most [`SETTLE_BOUND`].
    pub fn new() -> Self {
        let start = Meminfo::read().map_or(0, |m| m.pending());
        Settler {
            target: start.max(DIRTY_FLOOR),
            bound: SETTLE_BOUND,
            drop_cache: true,
            drop_refused: false,
            meminfo_missing: false,
        }
    }

    /// The level (bytes of `Dirty + Writeback`) settling waits for.
    pub fn target(&self) -> u64 {
        self.target
    }

    /// Settles: `syncfs` on the file system of `dir`, waits for the dirty
    /// pages, drops the page cache where it may. Never fails: what it
    /// could not do is said on stderr (a failed sync, a wait that gave up,
    /// a cache it may not drop — the last once per run) and recorded.
    pub fn settle(&mut self, dir: &Path, what: &str) -> SettleRecord {
        let t0 = Instant::now();
        if let Err(e) = syncfs(dir) {
            eprintln!("settle: syncfs on the databases' file system failed: {e}");
        }
        let wait = wait_for_writeback(
            || Meminfo::read().map(|m| m.pending()),
            self.target,
            self.bound,
            SETTLE_POLL,
            std::thread::sleep,
        );
        if wait.reads == 0 {
            if !self.meminfo_missing {
                eprintln!("settle: /proc/meminfo is unreadable; not waiting for writeback");
                self.meminfo_missing = true;
            }
        } else if !wait.settled {
            eprintln!(
                "settle: before {what}: gave up after {:.0} s with {:.0} MB dirty or under writeback (target {:.0} MB); going on",
                t0.elapsed().as_secs_f64(),
                wait.last as f64 / 1e6,
                self.target as f64 / 1e6
            );
        }
        let cache_dropped = match self.drop_cache.then(drop_page_cache) {
            None => false,
            Some(Ok(())) => true,
            Some(Err(e)) => {
                if !self.drop_refused {
                    eprintln!(
                        "settle: cannot drop the page cache ({e}; it needs root); going on without"
                    );
                    self.drop_refused = true;
                }
                false
            }
        };
        SettleRecord {
            seconds: t0.elapsed().as_secs_f64(),
            settled: wait.settled,
            dirty_bytes: wait.last,
            cache_dropped,
        }
    }
}

impl Default for Settler {
    fn default() -> Self {
        Self::new()
    }
}

/// `syncfs(2)` on the file system holding `dir`.
fn syncfs(dir: &Path) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let f = std::fs::File::open(dir)?;
    // SAFETY: `f` is an open file descriptor for the whole call; syncfs
    // only reads the descriptor.
    let rc = unsafe { libc::syncfs(f.as_raw_fd()) };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Drops the clean page cache (`1` into `/proc/sys/vm/drop_caches`).
fn drop_page_cache() -> std::io::Result<()> {
    std::fs::write("/proc/sys/vm/drop_caches", b"1")
}

#[cfg(test)]
mod tests {
    use super::*;

    const MEMINFO: &str = "MemTotal:       24570000 kB\nMemFree:         1000000 kB\nDirty:              1234 kB\nWriteback:            16 kB\nWritebackTmp:          0 kB\n";

    #[test]
    fn parses_dirty_and_writeback_in_bytes() {
        let m = Meminfo::parse(MEMINFO).unwrap();
        assert_eq!(m.dirty, 1234 * 1024);
        assert_eq!(m.writeback, 16 * 1024);
        assert_eq!(m.pending(), 1250 * 1024);
        assert_eq!(Meminfo::parse("MemTotal: 1 kB\nDirty: 5 kB\n"), None);
        assert_eq!(Meminfo::parse("Dirty: x kB\nWriteback: 1 kB\n"), None);
        assert_eq!(Meminfo::parse("Dirty: 1 MB\nWriteback: 1 kB\n"), None);
        assert!(Meminfo::read().is_some(), "this test runs on Linux");
    }

    #[test]
    fn the_wait_ends_when_the_level_reaches_the_target() {
        let mut levels = [500u64, 300, 90, 10].into_iter();
        let mut slept = Duration::ZERO;
        let out = wait_for_writeback(
            || levels.next(),
            100,
            Duration::from_secs(30),
            Duration::from_millis(100),
            |d| slept += d,
        );
        assert_eq!(
            out,
            WaitOutcome {
                settled: true,
                last: 90,
                reads: 3
            }
        );
        assert_eq!(slept, Duration::from_millis(200));
    }

    #[test]
    fn the_wait_gives_up_at_its_bound() {
        let mut reads = 0u32;
        let mut slept = Duration::ZERO;
        let out = wait_for_writeback(
            || {
                reads += 1;
                Some(1 << 30)
            },
            100,
            Duration::from_secs(30),
            Duration::from_millis(100),
            |d| slept += d,
        );
        assert!(!out.settled);
        assert_eq!(out.last, 1 << 30);
        assert_eq!(slept, Duration::from_secs(30));
        assert_eq!(out.reads, 301);
        assert_eq!(reads, 301);
        // An unreadable level ends the wait at once.
        let out = wait_for_writeback(
            || None,
            100,
            Duration::from_secs(30),
            Duration::from_millis(100),
            |_| panic!("no sleep"),
        );
        assert_eq!((out.settled, out.reads), (false, 0));
    }

    #[test]
    fn settling_syncs_and_records_itself() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("f"), vec![7u8; 1 << 20]).unwrap();
        assert!(Settler::new().target() >= DIRTY_FLOOR);
        // Any level counts as settled; the shared page cache is left alone.
        let mut s = Settler {
            target: u64::MAX,
            bound: Duration::from_secs(1),
            drop_cache: false,
            drop_refused: false,
            meminfo_missing: false,
        };
        let r = s.settle(d.path(), "a test");
        assert!(r.settled && !r.cache_dropped, "{r:?}");
        assert!(r.seconds < 30.0, "{r:?}");
        assert!(syncfs(&d.path().join("missing")).is_err());
    }
}
