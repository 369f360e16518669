//! Span reads for range queries (KT-Store §3.3, "Range-query Procedure").
//!
//! A scan hands [`read_many`] the pointers of its next entries. They are
//! grouped by TrieTable; each table's pointers, in offset order, are cut
//! into **spans** that are each read with one sequential read, and every
//! requested record is then picked out of its span and checked like a
//! point read (checksum, key, length). Spans of different tables — and
//! single reads — run in parallel on the prefetch pool while value reads
//! reach the device.
//!
//! # The span rule
//! The paper reads each table's whole `[min offset, max offset + size]`
//! span. That pays when the requested records fill a fair share of it;
//! in a table written in random key order a short scan's records are
//! scattered over the whole table, and the span would be mostly other
//! keys' values and garbage. So, with *density* = requested bytes ÷ span
//! bytes and a floor `d`:
//!
//! 1. a table's whole span is read at once when it holds at least two
//!    requested records, its density is at least `d` and it is at most
//!    [`SpanRules::max`] (default 4 MiB) long;
//! 2. otherwise its pointers are taken in offset order and grouped
//!    greedily: a pointer joins the current group while the group's span
//!    stays within [`SpanRules::max`] and its density stays at least `d`; a
//!    group of two or more records is read as one span;
//! 3. a pointer left alone is read by itself, as a point read.
//!
//! The floor weighs a read call against the bytes it moves. While value
//! reads reach the device (the running read-time estimate,
//! [`crate::vstore::ReadLatency`]), `d` = [`MIN_DENSITY`] = 1/16: one
//! random read (~75–100 µs on an SSD or a virtual disk, milliseconds on a
//! disk) costs as much as 50–200 KB or more of sequential transfer
//! (measured on a virtual disk: a 4 KiB direct read 74 µs, 256 KiB direct
//! reads at 760 MB/s, so one read call is worth about 56 KB at queue depth
//! one), and parallel single reads lower that worth. On that disk (1 M ×
//! 1 KiB values loaded in random order, 100-entry scans, one run each)
//! floors of 1/8, 1/16 and 1/32 gave 367, 423 and 373 scans/s: denser
//! floors leave more single reads, sparser ones move more bytes (read
//! amplification 4.5, 7.4 and 11.9). While reads are served from
//! the page cache a read call costs about a microsecond and every byte is a
//! copy (measured: at the device floor, spans read three times the
//! requested bytes and the copying took a third of a scan's time), so `d`
//! = [`MIN_DENSITY_MEMORY`] = 3/4: spans are read where the records lie
//! nearly back to back, as in tables GC rewrote in key order.
//!
//! While the reads run in parallel (reads reach the device and the
//! prefetch pool has threads), spans are planned with a bound of
//! [`SpanRules::parallel`] (default 512 KiB) instead of [`SpanRules::max`]: a long dense run is
//! then cut at record boundaries into chunks that the pool's threads read
//! at once, and the longest reads are handed out first, so one big span
//! does not leave the other threads idle behind it.
//!
//! The floors and bounds are options (`Options::trie_span_density`,
//! `trie_span_density_memory`, `trie_span_max`, `trie_span_parallel`,
//! gathered in [`SpanRules`]); the figures above chose their defaults. A
//! floor of `0.0` with bounds as large as the tables reads each table's
//! whole span from its least to its greatest requested offset, as the
//! paper does.
//!
//! # Each table once per range query
//! A scan told its length (`Scan::limit`) hands the pointers of its whole
//! (remaining) range to one call,
//! up to `Options::scan_batch_bytes` of values, so the plan sees every
//! pointer of the range at once and no byte of a table is read twice for
//! one range query (a table whose requested records are cut into several
//! spans reads disjoint pieces). A scan without a limit doubles its batches,
//! so it reads a table once per batch that reaches it: `log2 N` batches
//! for `N` entries, until a batch holds `scan_batch_bytes`. The
//! `span_tables` figure counts, per call, the tables read; over one range
//! query of known length it is at most the number of tables the range
//! touches.
//!
//! That holds for limited scans read without the pipeline
//! (`Options::trie_scan_pipeline` = 0). With it ([`super::pipeline`]), a
//! limited scan hands its pointers over in windows of half the pipeline's
//! budget (at most `scan_batch_bytes`), each planned by the rule above, so
//! a table is read at most once per window (in disjoint pieces across
//! windows), and the reads of later windows overlap the return of earlier
//! ones.
//!
//! The result is exactly what per-pointer reads return: a span is only a
//! cheaper way to fetch the same bytes; a pointer outside its table's valid
//! range reads as lost (`None`), and a damaged record is `Corruption` at
//! its own offset.

use super::{table, Reader, TrieStore};
use crate::error::{Error, Result};
use crate::fs::{Advice, AlignedBuf, IoCategory, DIRECT_IO_ALIGN};
use crate::vstore::ValuePointer;
use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Default least share of a span's bytes that requested records must fill
/// while reads reach the device ([`SpanRules::density`]).
pub const MIN_DENSITY: f64 = 1.0 / 16.0;
/// The same while reads are served from memory
/// ([`SpanRules::density_memory`]).
pub const MIN_DENSITY_MEMORY: f64 = 3.0 / 4.0;
/// Default longest span read at once (bytes, [`SpanRules::max`]).
pub const MAX_SPAN: u64 = 4 << 20;
/// Default longest span read at once while spans are read in parallel
/// (bytes, [`SpanRules::parallel`]).
pub const PARALLEL_SPAN: u64 = 512 << 10;
/// Shortest span the scan pipeline reads with direct I/O (bytes; see
/// [`super::pipeline`], "Direct span reads"): shorter ones are read
/// buffered.
pub const DIRECT_MIN_SPAN: u64 = 64 << 10;

/// The span rule's knobs (`Options::trie_span_*`; module docs).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SpanRules {
    /// Density floor while value reads reach the device.
    pub density: f64,
    /// Density floor while value reads are served from memory.
    pub density_memory: f64,
    /// Longest span read at once (bytes).
    pub max: u64,
    /// Longest span read at once while spans are read in parallel (bytes).
    pub parallel: u64,
}

impl Default for SpanRules {
    fn default() -> Self {
        SpanRules {
            density: MIN_DENSITY,
            density_memory: MIN_DENSITY_MEMORY,
            max: MAX_SPAN,
            parallel: PARALLEL_SPAN,
        }
    }
}

/// One read of the plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Read {
    /// One sequential read of `[start, end)` of `table`, serving the
    /// requests `members` (indexes into the request list).
    Span {
        /// Table id.
        table: u64,
        /// First byte.
        start: u64,
        /// One past the last byte.
        end: u64,
        /// Requests served.
        members: Vec<usize>,
    },
    /// One point read for request `i`.
    Single(usize),
}

/// Plans the reads for `reqs` (`(request index, pointer)`, all inside
/// their tables) with the rule of the module docs, given the density
/// threshold and the longest span. Pure: no I/O.
pub fn plan(reqs: &[(usize, ValuePointer)], min_density: f64, max_span: u64) -> Vec<Read> {
    let mut by_table: BTreeMap<u64, Vec<(usize, ValuePointer)>> = BTreeMap::new();
    for &(i, p) in reqs {
        by_table.entry(p.file_id).or_default().push((i, p));
    }
    let dense = |req: u64, span: u64| span <= max_span && req as f64 >= min_density * span as f64;
    let mut out = Vec::new();
    for (table, mut ptrs) in by_table {
        ptrs.sort_by_key(|(i, p)| (p.offset, *i));
        let end_of = |p: &ValuePointer| p.offset + p.length as u64;
        let whole_start = ptrs[0].1.offset;
        let whole_end = ptrs.iter().map(|(_, p)| end_of(p)).max().unwrap_or(0);
        let whole_req: u64 = ptrs.iter().map(|(_, p)| p.length as u64).sum();
        if ptrs.len() >= 2 && dense(whole_req, whole_end - whole_start) {
            out.push(Read::Span {
                table,
                start: whole_start,
                end: whole_end,
                members: ptrs.iter().map(|(i, _)| *i).collect(),
            });
            continue;
        }
        let mut group: Vec<usize> = Vec::new();
        let (mut start, mut end, mut req) = (0u64, 0u64, 0u64);
        let mut close = |group: &mut Vec<usize>, start: u64, end: u64| match group.len() {
            0 => {}
            1 => out.push(Read::Single(group[0])),
            _ => out.push(Read::Span {
                table,
                start,
                end,
                members: std::mem::take(group),
            }),
        };
        for (i, p) in ptrs {
            if !group.is_empty() {
                let (ne, nr) = (end.max(end_of(&p)), req + p.length as u64);
                if dense(nr, ne - start) {
                    group.push(i);
                    end = ne;
                    req = nr;
                    continue;
                }
                close(&mut group, start, end);
                group.clear();
            }
            group.push(i);
            start = p.offset;
            end = end_of(&p);
            req = p.length as u64;
        }
        close(&mut group, start, end);
    }
    out
}

/// What one planned read produced: `(request index, result)` pairs.
pub(super) type Served = Vec<(usize, Result<Option<Vec<u8>>>)>;

/// Checks and copies out each member's record from `buf`, the bytes of
/// `table` from offset `base` on.
fn pick(
    reader: &Reader,
    reqs: &[(Vec<u8>, ValuePointer)],
    table: u64,
    members: &[usize],
    buf: &[u8],
    base: u64,
) -> Served {
    let path = || reader.path(table);
    members
        .iter()
        .map(|&i| {
            let (k, p) = &reqs[i];
            let at = (p.offset - base) as usize;
            let rec = &buf[at..at + p.length as usize];
            let r = table::check_record(path, p, k, rec).map(|r| Some(rec[r].to_vec()));
            (i, r)
        })
        .collect()
}

/// Reads `[start, end)` of `table` with direct I/O, widened to
/// [`DIRECT_IO_ALIGN`] boundaries, into the calling thread's aligned
/// buffer, and picks the members' records out of it. `None`: no direct
/// handles (off, or refused before); `Some(Err)`: the direct read failed.
fn run_direct(
    reader: &Reader,
    reqs: &[(Vec<u8>, ValuePointer)],
    table: u64,
    (start, end): (u64, u64),
    members: &[usize],
) -> Option<std::io::Result<Served>> {
    let handles = reader.direct.as_ref()?;
    if !reader.direct_ok.load(Ordering::Relaxed) {
        return None;
    }
    let align = DIRECT_IO_ALIGN as u64;
    let base = start - start % align;
    let need = (end - base) as usize;
    let Some(len) = need.checked_next_multiple_of(DIRECT_IO_ALIGN) else {
        return Some(Err(std::io::ErrorKind::InvalidInput.into()));
    };
    let h = match handles.get(table) {
        Ok(h) => h,
        Err(e) => return Some(Err(std::io::Error::other(e.to_string()))),
    };
    Some(DIRECT_BUF.with(|cell| {
        let mut slot = cell.borrow_mut();
        if slot.as_ref().is_none_or(|b| b.len() < len) {
            // Grown, never shrunk: at most the longest span plus two
            // alignment units.
            *slot = None;
            *slot = Some(AlignedBuf::new(len)?);
        }
        let Some(aligned) = slot.as_mut() else {
            return Err(std::io::ErrorKind::OutOfMemory.into());
        };
        let buf = &mut aligned.as_mut_slice()[..len];
        let mut got = 0;
        // Aligned reads into the aligned buffer: the device writes into
        // it directly. The last may come back short at the end of the
        // file, past `end`.
        while got < need {
            match h.read_at(base + got as u64, &mut buf[got..]) {
                Ok(0) => {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::UnexpectedEof,
                        "read past end of file",
                    ))
                }
                Ok(n) => got += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        reader.stats.add_read(IoCategory::ValueStore, got as u64);
        reader.direct_reads.fetch_add(1, Ordering::Relaxed);
        Ok(pick(reader, reqs, table, members, &buf[..need], base))
    }))
}

/// Runs one planned read; a span of at least [`DIRECT_MIN_SPAN`] bytes
/// with direct I/O when `direct` and the store has direct handles (see
/// [`super::pipeline`], "Direct span reads").
pub(super) fn run(
    reader: &Reader,
    reqs: &[(Vec<u8>, ValuePointer)],
    read: &Read,
    direct: bool,
) -> Served {
    match read {
        Read::Single(i) => {
            let (k, p) = &reqs[*i];
            vec![(*i, reader.read_record(k, p).map(Some))]
        }
        Read::Span {
            table,
            start,
            end,
            members,
        } => {
            let tried = if direct && end - start >= DIRECT_MIN_SPAN {
                run_direct(reader, reqs, *table, (*start, *end), members)
            } else {
                None
            };
            let failed = match tried {
                Some(Ok(served)) => return served,
                Some(Err(_)) => true,
                None => false,
            };
            let served = run_buffered(reader, reqs, *table, (*start, *end), members);
            if failed && served.iter().all(|(_, r)| r.is_ok()) {
                // The direct read failed where the buffered one worked
                // (a file system that takes `O_DIRECT` at open but not
                // at read): read buffered from now on.
                reader.direct_ok.store(false, Ordering::Relaxed);
            }
            served
        }
    }
}

/// Reads `[start, end)` of `table` through the page cache into the calling
/// thread's span buffer and picks the members' records out of it.
fn run_buffered(
    reader: &Reader,
    reqs: &[(Vec<u8>, ValuePointer)],
    table: u64,
    (start, end): (u64, u64),
    members: &[usize],
) -> Served {
    SPAN_BUF.with(|cell| {
        // A span buffer per thread, kept between reads: a fresh
        // allocation of this size would be mapped and faulted in anew
        // each time. Only its first `n` bytes are used, all of them
        // overwritten by the read.
        let mut scratch = cell.borrow_mut();
        let n = (end - start) as usize;
        if scratch.len() < n {
            scratch.resize(n, 0);
        }
        let buf = &mut scratch[..n];
        let got = reader.handles.get(table).and_then(|h| {
            h.advise(start, end - start, Advice::WillNeed);
            h.read_exact_at(start, buf)
                .map_err(|e| Error::io(reader.path(table), e))
        });
        if let Err(e) = got {
            return members.iter().map(|&i| (i, Err(e.clone()))).collect();
        }
        reader.stats.add_read(IoCategory::ValueStore, n as u64);
        pick(reader, reqs, table, members, buf, start)
    })
}

thread_local! {
    /// The span buffer of the calling thread (at most [`SpanRules::max`]
    /// bytes).
    static SPAN_BUF: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
    /// The aligned span buffer of the calling thread's direct reads.
    static DIRECT_BUF: std::cell::RefCell<Option<AlignedBuf>> = const { std::cell::RefCell::new(None) };
}

/// [`crate::vstore::ValueStore::read_many`] for the trie layout.
pub fn read_many(
    store: &TrieStore,
    reqs: &[(Vec<u8>, ValuePointer)],
) -> Result<Vec<Option<Vec<u8>>>> {
    let mut out: Vec<Option<Vec<u8>>> = vec![None; reqs.len()];
    // Validity is decided under the lock; the reads run without it.
    let valid: Vec<(usize, ValuePointer)> = {
        let st = store.state.lock();
        reqs.iter()
            .enumerate()
            .filter(|(_, (_, p))| TrieStore::valid_locked(&st, p) == Some(true))
            .map(|(i, (_, p))| (i, *p))
            .collect()
    };
    let from_memory = store.reader.latency.from_memory();
    let rules = &store.opts.spans;
    let floor = if from_memory {
        rules.density_memory
    } else {
        rules.density
    };
    let parallel = store.prefetch.threads() > 0 && !from_memory;
    let mut reads = plan(
        &valid,
        floor,
        if parallel { rules.parallel } else { rules.max },
    );
    // Longest first: the pool hands out jobs in order.
    reads.sort_by_key(|r| match r {
        Read::Span { start, end, .. } => std::cmp::Reverse(end - start),
        Read::Single(_) => std::cmp::Reverse(0),
    });
    let c = &store.counters;
    let tables: std::collections::BTreeSet<u64> = valid.iter().map(|(_, p)| p.file_id).collect();
    c.span_tables
        .fetch_add(tables.len() as u64, Ordering::Relaxed);
    for r in &reads {
        match r {
            Read::Single(_) => {
                c.single_reads.fetch_add(1, Ordering::Relaxed);
            }
            Read::Span {
                start,
                end,
                members,
                ..
            } => {
                c.span_reads.fetch_add(1, Ordering::Relaxed);
                c.span_bytes.fetch_add(end - start, Ordering::Relaxed);
                c.span_values
                    .fetch_add(members.len() as u64, Ordering::Relaxed);
            }
        }
    }
    let served: Vec<Served> = if parallel && reads.len() >= 2 {
        let reader = store.reader.clone();
        let jobs = Arc::new((reqs.to_vec(), reads));
        let n = jobs.1.len();
        store
            .prefetch
            .map(n, move |j| run(&reader, &jobs.0, &jobs.1[j], false))
    } else {
        reads
            .iter()
            .map(|r| run(&store.reader, reqs, r, false))
            .collect()
    };
    for (i, r) in served.into_iter().flatten() {
        match r {
            Ok(v) => out[i] = v,
            // GC deleted the table between the check and the read: lost,
            // like a pointer outside the valid range.
            Err(_) if TrieStore::valid_locked(&store.state.lock(), &reqs[i].1).is_none() => {}
            Err(e) => return Err(e),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(table: u64, offset: u64, length: u32) -> ValuePointer {
        ValuePointer {
            file_id: table,
            offset,
            length,
            aux: 0,
        }
    }

    #[test]
    fn a_dense_table_is_one_span_in_any_request_order() {
        let reqs = vec![
            (0, p(1, 2000, 1000)),
            (1, p(1, 0, 1000)),
            (2, p(1, 1000, 1000)),
        ];
        assert_eq!(
            plan(&reqs, MIN_DENSITY, MAX_SPAN),
            vec![Read::Span {
                table: 1,
                start: 0,
                end: 3000,
                members: vec![1, 2, 0]
            }]
        );
    }

    #[test]
    fn sparse_pointers_are_read_alone_and_clusters_as_spans() {
        // Table 7: a lone record far before a cluster of four, then a lone
        // record far after. Table 9: one record.
        let reqs = vec![
            (0, p(7, 0, 1000)),
            (1, p(7, 1_000_000, 1000)),
            (2, p(7, 1_001_500, 1000)),
            (3, p(7, 1_003_000, 1000)),
            (4, p(7, 1_004_000, 1000)),
            (5, p(7, 3_000_000, 1000)),
            (6, p(9, 50, 100)),
        ];
        let got = plan(&reqs, MIN_DENSITY, MAX_SPAN);
        assert_eq!(
            got,
            vec![
                Read::Single(0),
                Read::Span {
                    table: 7,
                    start: 1_000_000,
                    end: 1_005_000,
                    members: vec![1, 2, 3, 4]
                },
                Read::Single(5),
                Read::Single(6),
            ]
        );
    }

    #[test]
    fn the_memory_floor_reads_only_nearly_contiguous_records() {
        // Records of 1000 bytes every 2000 bytes: density 1/2.
        let reqs: Vec<_> = (0..10u64)
            .map(|i| (i as usize, p(5, i * 2000, 1000)))
            .collect();
        assert!(matches!(
            plan(&reqs, MIN_DENSITY, MAX_SPAN)[..],
            [Read::Span { .. }]
        ));
        let mem = plan(&reqs, MIN_DENSITY_MEMORY, MAX_SPAN);
        assert_eq!(mem, (0..10).map(Read::Single).collect::<Vec<_>>());
        // Back to back: one span either way.
        let tight: Vec<_> = (0..10u64)
            .map(|i| (i as usize, p(5, i * 1000, 1000)))
            .collect();
        assert_eq!(plan(&tight, MIN_DENSITY_MEMORY, MAX_SPAN).len(), 1);
    }

    #[test]
    fn the_papers_rule_reads_each_table_once() {
        // Scattered records of three tables, in any request order: a floor
        // of 0 and bounds as long as the tables read one span per table
        // holding two or more, from the least to the greatest offset.
        let mut x = 7u64;
        let reqs: Vec<_> = (0..300)
            .map(|i| {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
                (i, p(x % 3, (x >> 20) % 3_000_000, 4096))
            })
            .collect();
        let got = plan(&reqs, 0.0, 64 << 20);
        assert_eq!(got.len(), 3);
        for r in got {
            let Read::Span {
                table,
                start,
                end,
                members,
            } = r
            else {
                panic!("a single read: {r:?}")
            };
            let mine: Vec<_> = reqs.iter().filter(|(_, q)| q.file_id == table).collect();
            assert_eq!(members.len(), mine.len());
            assert_eq!(start, mine.iter().map(|(_, q)| q.offset).min().unwrap());
            assert_eq!(
                end,
                mine.iter().map(|(_, q)| q.offset + 4096).max().unwrap()
            );
        }
    }

    #[test]
    fn spans_never_pass_the_bounds() {
        // Contiguous 64 KiB records over 12 MiB: dense, but cut at 4 MiB.
        let reqs: Vec<_> = (0..192u64)
            .map(|i| (i as usize, p(3, i << 16, 1 << 16)))
            .collect();
        let got = plan(&reqs, MIN_DENSITY, MAX_SPAN);
        let mut served = 0;
        for r in &got {
            match r {
                Read::Span {
                    start,
                    end,
                    members,
                    ..
                } => {
                    assert!(end - start <= MAX_SPAN);
                    served += members.len();
                }
                Read::Single(_) => served += 1,
            }
        }
        assert_eq!(served, 192);
        assert_eq!(got.len(), 3);
        // Every span respects the density floor, whatever the layout.
        let mut x = 99u64;
        let reqs: Vec<_> = (0..500)
            .map(|i| {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
                (
                    i,
                    p(x % 3, (x >> 20) % 50_000_000, 1 + ((x >> 8) % 4000) as u32),
                )
            })
            .collect();
        let mut seen = vec![false; 500];
        for r in plan(&reqs, MIN_DENSITY, MAX_SPAN) {
            match r {
                Read::Span {
                    table,
                    start,
                    end,
                    members,
                } => {
                    let req: u64 = members.iter().map(|&i| reqs[i].1.length as u64).sum();
                    assert!(req as f64 >= MIN_DENSITY * (end - start) as f64);
                    assert!(end - start <= MAX_SPAN);
                    for i in members {
                        let q = reqs[i].1;
                        assert_eq!(q.file_id, table);
                        assert!(q.offset >= start && q.offset + q.length as u64 <= end);
                        assert!(!seen[i]);
                        seen[i] = true;
                    }
                }
                Read::Single(i) => {
                    assert!(!seen[i]);
                    seen[i] = true;
                }
            }
        }
        assert!(seen.iter().all(|&s| s), "a request was not planned");
    }
}
