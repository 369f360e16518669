//! Background threads ask the scheduler for a long time slice.
//!
//! Linux's EEVDF scheduler (6.6 on) lets a thread choose the length of its
//! time slice (`sched_setattr`'s `sched_runtime` for the fair class, from
//! 6.12; 0.1–100 ms), and picks among runnable threads the one whose
//! virtual deadline — its virtual runtime plus its slice — comes first. A
//! thread waking up with a shorter slice than the running one's also ends
//! that one's protected run at once (`PREEMPT_SHORT`). With GC and
//! compaction holding every core of a small machine, a writer waking from
//! a pause or a lock waited up to the background thread's whole slice
//! before it ran again. Background threads therefore ask for
//! [`BACKGROUND_SLICE`], several times the default: a waking user thread
//! then comes first, while the background thread keeps its share of the
//! CPU (a slice is not a priority: the weight, and so the share over time,
//! is the nice value's). Unprivileged, reversible, and a no-op where the
//! kernel does not know the field.
//!
//! A long slice has a cost where a thread is preempted rather than woken:
//! a user thread that runs its own slice out while GC and compaction are
//! both runnable hands its core to one of them, which then keeps it for
//! most of its 6 ms. With the space bound's pacing working (2026-11-28),
//! that was most of what was left of the update experiment's writes over
//! 2 ms. So background threads also run [`BACKGROUND_NICE`] nice levels
//! below the thread that started them (weight 335 against 1024 at nice 0):
//! they still take every core no user thread wants, but a user thread
//! that is runnable gets its core back sooner. In the update experiment
//! `wisckey`'s p99.99 fell from a mean of 2.43 ms to 2.14 ms (fifteen
//! phases each, alternating; 2.45 to 1.75 ms in an earlier set of six) at
//! the same throughput, `hashkv`'s from 4.14 to 3.97 ms; four-thread
//! `fillrandom`, `readwhilewriting` and `ycsb-a` held their throughput or
//! gained (`wisckey` `readwhilewriting` 1.3×, its writer's p99 53–105 →
//! 11 µs; `docs/notebook/`, "Background threads a few nice levels down"). Unlike
//! the idle class (`SCHED_IDLE`, tried on 2026-11-27), a nice level
//! keeps the thread's share when user threads want the cores:
//! GC under a steady write load is slowed, not starved, and the space
//! bound's pacing slows the writers to match. An unprivileged thread
//! cannot lower its nice value again, so a background thread holds the
//! writer lock at its lower weight; its holds are short (a group of 64
//! relocations, one 64 KiB append).

use std::time::Duration;

/// The slice background threads ask for.
pub(crate) const BACKGROUND_SLICE: Duration = Duration::from_millis(6);

/// How many nice levels below the thread that starts them background
/// threads run (capped at 19, the lowest).
pub(crate) const BACKGROUND_NICE: i32 = 5;

/// Linux's `struct sched_attr` (first version, 48 bytes; later fields
/// are optional).
#[cfg(target_os = "linux")]
#[repr(C)]
#[derive(Default)]
struct SchedAttr {
    size: u32,
    sched_policy: u32,
    sched_flags: u64,
    sched_nice: i32,
    sched_priority: u32,
    sched_runtime: u64,
    sched_deadline: u64,
    sched_period: u64,
}

/// Gives the calling thread [`BACKGROUND_SLICE`] and a nice value
/// [`BACKGROUND_NICE`] levels higher when it runs in the fair class
/// (`SCHED_OTHER` or `SCHED_BATCH`), keeping its policy, and makes it
/// park at once for a [`crate::spin::SpinMutex`] another thread holds.
/// Best effort: a kernel without custom slices for the fair class ignores
/// the slice; one that refuses the attributes gets the nice value through
/// `setpriority`; any other error leaves the thread as it was.
pub(crate) fn mark_background() {
    crate::spin::park_without_spinning();
    #[cfg(target_os = "linux")]
    {
        let Some(mut attr) = current() else {
            return;
        };
        if !matches!(
            attr.sched_policy as i32,
            libc::SCHED_OTHER | libc::SCHED_BATCH
        ) {
            return;
        }
        let nice = attr.sched_nice.saturating_add(BACKGROUND_NICE).min(19);
        attr.size = std::mem::size_of::<SchedAttr>() as u32;
        attr.sched_flags = 0;
        attr.sched_nice = nice;
        attr.sched_runtime = BACKGROUND_SLICE.as_nanos() as u64;
        // SAFETY: `attr` is a valid `sched_attr` of the size it states;
        // tid 0 is the calling thread; the kernel only reads it.
        #[allow(unsafe_code)]
        let set =
            unsafe { libc::syscall(libc::SYS_sched_setattr, 0, &attr as *const SchedAttr, 0u32) };
        if set != 0 {
            // A kernel that refuses the slice still takes the nice value
            // (`setpriority` on tid 0: the calling thread).
            // SAFETY: plain syscall on the calling thread.
            #[allow(unsafe_code)]
            unsafe {
                libc::setpriority(libc::PRIO_PROCESS, 0, nice);
            }
        }
    }
}

/// The calling thread's scheduling attributes, or `None` on error.
#[cfg(target_os = "linux")]
fn current() -> Option<SchedAttr> {
    let mut attr = SchedAttr::default();
    // SAFETY: `attr` is a valid, writable `sched_attr` of the size passed;
    // tid 0 is the calling thread.
    #[allow(unsafe_code)]
    let got = unsafe {
        libc::syscall(
            libc::SYS_sched_getattr,
            0,
            &mut attr as *mut SchedAttr,
            std::mem::size_of::<SchedAttr>() as u32,
            0u32,
        )
    };
    (got == 0).then_some(attr)
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    /// The policy stays, the nice value rises by [`BACKGROUND_NICE`] (up
    /// to 19), and on kernels that keep custom slices for the fair class
    /// (6.12 on) the slice is the background one.
    #[test]
    fn background_threads_keep_policy_and_get_nice_and_the_slice() {
        let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
        let mut v = release
            .split(|c: char| !c.is_ascii_digit())
            .map(|x| x.parse::<u32>().ok());
        let custom_slices =
            matches!((v.next(), v.next()), (Some(Some(a)), Some(Some(b))) if (a, b) >= (6, 12));
        std::thread::spawn(move || {
            let Some(before) = current() else {
                return; // no sched_getattr here (a seccomp filter): nothing to check
            };
            mark_background();
            let after = current().expect("sched_getattr");
            assert_eq!(after.sched_policy, before.sched_policy);
            assert_eq!(
                after.sched_nice,
                (before.sched_nice + BACKGROUND_NICE).min(19)
            );
            if custom_slices {
                assert_eq!(after.sched_runtime, BACKGROUND_SLICE.as_nanos() as u64);
            }
        })
        .join()
        .unwrap();
    }
}

/// CPU time the calling thread has used (µs; `CLOCK_THREAD_CPUTIME_ID`),
/// or 0 where the clock is unavailable. For figures that should not count
/// the waits for a core a loaded machine adds to wall time.
#[cfg(target_os = "linux")]
pub(crate) fn thread_cpu_micros() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `clock_gettime` only writes the timespec it is given, a
    // local that outlives the call.
    #[allow(unsafe_code)]
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return 0;
    }
    u64::try_from(ts.tv_sec).unwrap_or(0) * 1_000_000
        + u64::try_from(ts.tv_nsec).unwrap_or(0) / 1_000
}

/// See the Linux version: no per-thread clock here.
#[cfg(not(target_os = "linux"))]
pub(crate) fn thread_cpu_micros() -> u64 {
    0
}
