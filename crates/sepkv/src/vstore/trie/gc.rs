//! Garbage collection per TrieTable (beyond the paper: KT-Store leaves GC to
//! future work, §5).
//!
//! One step:
//! 1. free the tables earlier steps retired, if no reader can reach them;
//! 2. [`pick`] a victim: the table with the most garbage known
//!    ([`crate::vstore::ValueStore::note_garbage`]); when no table has any
//!    known garbage, the oldest sealed table still in write order, if
//!    `Options::trie_sort_sealed` asks for sealed tables to be sorted
//!    (see below); else (estimates start at zero on open, and compaction
//!    feeds them late) the table GC has gone longest without visiting — the
//!    smallest id, since GC's output always takes a new id — so that
//!    repeated steps sweep every table;
//!    when the pick is a table to sort, other tables due to be sorted join
//!    it, oldest first, up to `trie_table_size` bytes in all
//!    ([`sort_batch`]), so that one step sorts several rolled tables into
//!    one;
//! 3. fix its range: an active victim is sealed first (its place gets a new
//!    table on its next write), so its length is final; then wait until
//!    every write that appended into it has published its pointers
//!    ([`IndexReader::wait_in_flight_writes`]);
//! 4. read it front to back; a record is live when the index's current
//!    pointer for its key is this very record (a table's records are
//!    judged in batches of up to 4 MiB, [`IndexReader::points_at_many`]);
//! 5. write the live records **sorted by key** to a new sealed table, sync
//!    it and its directory entry, record it in the trie file, and install
//!    the new pointers by compare-and-set ([`IndexRelocator::relocate`]; a
//!    user write that raced the step keeps its newer value, and the copy
//!    becomes garbage);
//! 6. make the index durable up to the writes that made the other records
//!    dead ([`IndexRelocator::make_durable`]), retire the victim, and delete
//!    it once no snapshot or iterator older than the relocation is alive
//!    (the deletion is recorded in the trie file, synced, before the file
//!    is removed).
//!
//! So GC leaves tables sorted by key, and scans over them read dense
//! spans.
//!
//! # Sorting sealed tables
//! A table written in random key order makes a short scan's values lie
//! scattered over the whole table, too thin for a span read. A sealed
//! table takes no more writes (its leaf split, or it rolled), so sorting
//! it once leaves it sorted for good. With `trie_sort_sealed`, the store
//! reports such tables through
//! [`crate::vstore::ValueStore::reorganize_due`], and background GC runs
//! steps on them when no garbage calls for one: the same step as above,
//! with a victim that may hold no garbage at all. Each value is then
//! written about twice — once on the write, once sorted — against an
//! LSM-tree's once per level. A crash between any two steps loses nothing: before 5 the new
//! table is unlisted and deleted on open; before 6 the victim's records are
//! no longer current and a later step finds them dead.
//!
//! A step holds its victims' live values in memory: at most
//! `trie_table_size` bytes, or one table when a single victim is larger.

use super::table::{self, TableInfo, TableState};
use super::trie::{Edit, Persisted};
use super::{PendingFree, TrieStore};
use crate::error::{Error, IoContext, Result};
use crate::format::value_record::{self, Kind};
use crate::fs::IoCategory;
use crate::vstore::{
    retain_live, GcOutcome, IndexReader, IndexRelocator, Relocation, ValuePointer, ValueStore,
};
use std::sync::atomic::Ordering;

/// Most bytes of keys and values read from a victim table that GC holds
/// before judging them in one batch ([`retain_live`]): dead values are
/// dropped batch by batch, so a large table is never held whole. Smaller
/// tables are judged in quarters of `trie_table_size`.
const JUDGE_BATCH_BYTES: u64 = 4 << 20;

/// A table as the picker sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Candidate {
    /// Table id.
    pub id: u64,
    /// Valid bytes.
    pub len: u64,
    /// Known garbage bytes.
    pub garbage: u64,
    /// Sealed, in write order, and due to be sorted
    /// (`Options::trie_sort_sealed`).
    pub to_sort: bool,
}

/// What to collect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Choice {
    /// Nothing to collect.
    Nothing,
    /// Collect this table.
    Collect(u64),
}

/// Picks the victim among `tables` (see step 2 of the module docs). Pure.
pub fn pick(tables: &[Candidate]) -> Choice {
    let nonempty = || tables.iter().filter(|c| c.len > 0);
    if let Some(c) = nonempty()
        .filter(|c| c.garbage > 0)
        .max_by_key(|c| (c.garbage, std::cmp::Reverse(c.id)))
    {
        return Choice::Collect(c.id);
    }
    nonempty()
        .filter(|c| c.to_sort)
        .min_by_key(|c| c.id)
        .or_else(|| nonempty().min_by_key(|c| c.id))
        .map_or(Choice::Nothing, |c| Choice::Collect(c.id))
}

/// The victims of a step whose pick is `first`: when `first` was picked
/// to be sorted (it holds no known garbage), the other sealed tables due
/// to be sorted join it, oldest first, while their lengths together stay
/// within `max_bytes`, so that one step (its syncs, its index write, its
/// deletions) sorts several small tables into one. Otherwise `first`
/// alone. Pure.
pub fn sort_batch(tables: &[Candidate], first: u64, max_bytes: u64) -> Vec<u64> {
    let mut out = vec![first];
    let Some(f) = tables.iter().find(|c| c.id == first) else {
        return out;
    };
    if !f.to_sort || f.garbage > 0 {
        return out;
    }
    let mut more: Vec<&Candidate> = tables
        .iter()
        .filter(|c| c.to_sort && c.len > 0 && c.id != first)
        .collect();
    more.sort_by_key(|c| c.id);
    let mut total = f.len;
    for c in more {
        if total + c.len > max_bytes {
            break;
        }
        total += c.len;
        out.push(c.id);
    }
    out
}

/// Runs one GC step on `store`.
pub fn step(
    store: &TrieStore,
    index: &dyn IndexReader,
    relocator: &dyn IndexRelocator,
) -> Result<GcOutcome> {
    let _one_at_a_time = store.gc_lock.lock();
    let mut out = GcOutcome::default();
    out.bytes_freed += free_pending(store, index.oldest_visible_seq())?;

    // Pick and fix the victims' ranges.
    let victims: Vec<(u64, u64)> = {
        let mut st = store.state.lock();
        let cands: Vec<Candidate> = st
            .tables
            .iter()
            .filter(|(_, t)| t.state != TableState::Retired)
            .map(|(&id, t)| Candidate {
                id,
                len: t.valid_len,
                garbage: t.garbage.min(t.valid_len),
                to_sort: store.opts.sort_sealed && t.unsorted_sealed(),
            })
            .collect();
        let Choice::Collect(id) = pick(&cands) else {
            out.did_work = out.bytes_freed > 0;
            return Ok(out);
        };
        if let Some(place) = st.owners.get(&id).cloned() {
            // The leaf took the table's bytes: they count towards its split.
            let taken = store.taken(&st, id, &place);
            store.roll_locked(&mut st, id, &place, taken)?;
        }
        sort_batch(&cands, id, store.opts.table_size)
            .into_iter()
            .map(|id| (id, st.tables.get(&id).map_or(0, |t| t.valid_len)))
            .collect()
    };
    // Records in the range may belong to writes that have not inserted
    // their pointers yet; judged now they would look dead.
    index.wait_in_flight_writes()?;
    // Every judgement below looks at the index at this sequence number or
    // later, so relocation need only ask what was written since.
    let judged_at = index.last_sequence();

    // Judge every record.
    let mut live: Vec<(Vec<u8>, u64, Vec<u8>, ValuePointer)> = Vec::new();
    let batch_bytes = JUDGE_BATCH_BYTES.min(store.opts.table_size / 4).max(1) as usize;
    for &(victim, len) in &victims {
        let path = store.path(victim);
        // A table's records are judged in batches of up to `batch_bytes`, so the index may look their keys up
        // in key order, each of its blocks loaded once, while no more than a
        // batch of dead values is held at a time.
        let mut held: Vec<(Vec<u8>, u64, Vec<u8>, ValuePointer)> = Vec::new();
        let mut held_bytes = 0usize;
        let end = table::scan(
            store.reader.fs.as_ref(),
            &path,
            0,
            len,
            &store.reader.stats,
            IoCategory::Gc,
            |off, r| {
                let ptr = ValuePointer {
                    file_id: victim,
                    offset: off,
                    length: r.len as u32,
                    aux: 0,
                };
                if r.kind.holds_value() {
                    held_bytes += r.key.len() + r.value.len();
                    held.push((r.key.to_vec(), r.seq, r.value.to_vec(), ptr));
                    if held_bytes >= batch_bytes {
                        live.extend(retain_live(index, std::mem::take(&mut held))?);
                        held_bytes = 0;
                    }
                }
                Ok(())
            },
        )?;
        if end.torn {
            return Err(Error::corruption(
                &path,
                end.valid_len,
                "TrieTable record damaged inside the valid range",
            ));
        }
        live.extend(retain_live(index, held)?);
    }
    let len: u64 = victims.iter().map(|(_, len)| len).sum();
    out.bytes_read = len;
    store
        .counters
        .gc_bytes_read
        .fetch_add(len, Ordering::Relaxed);
    // Readers at or after this sequence see every dead record's successor.
    let mut visible_from = index.last_sequence();

    if !live.is_empty() {
        live.sort_by(|a, b| a.0.cmp(&b.0));
        let new_ptrs = write_sorted(store, &live)?;
        let moves: Vec<Relocation> = live
            .iter()
            .zip(&new_ptrs)
            .map(|((k, _, _, old), new)| Relocation {
                key: k.clone(),
                old: *old,
                new: *new,
            })
            .collect();
        let (installed, seq) = relocator.relocate_judged(&moves, judged_at)?;
        visible_from = visible_from.max(seq);
        let mut rewritten = 0;
        for (m, ok) in moves.iter().zip(&installed) {
            if *ok {
                rewritten += m.new.length as u64;
            } else {
                // The user overwrote the key meanwhile: the copy is garbage.
                store.note_garbage(&m.new);
            }
        }
        out.bytes_rewritten = rewritten;
        store
            .counters
            .gc_bytes_rewritten
            .fetch_add(rewritten, Ordering::Relaxed);
    }
    // A record judged dead was superseded by a newer write; that write must
    // be durable before the record's table goes.
    relocator.make_durable(index.last_sequence())?;
    {
        let mut st = store.state.lock();
        let mut known = 0;
        for &(victim, _) in &victims {
            if let Some(t) = st.tables.get_mut(&victim) {
                t.state = TableState::Retired;
                known += t.garbage.min(t.valid_len);
            }
            st.pending.push(PendingFree {
                seq: visible_from,
                table: victim,
            });
        }
        // Dead bytes no report had named.
        let dead = len.saturating_sub(out.bytes_rewritten);
        store
            .counters
            .garbage_found
            .fetch_add(dead - dead.min(known), Ordering::Relaxed);
    }
    out.bytes_freed += free_pending(store, index.oldest_visible_seq())?;
    store.counters.gc_runs.fetch_add(1, Ordering::Relaxed);
    out.did_work = true;
    Ok(out)
}

/// Writes `live` (sorted by key) as a new sealed table, durably, and
/// records it in the trie file. Returns the new pointers.
fn write_sorted(
    store: &TrieStore,
    live: &[(Vec<u8>, u64, Vec<u8>, ValuePointer)],
) -> Result<Vec<ValuePointer>> {
    // The id is taken now; if the step dies before the table is recorded,
    // open deletes the unlisted file.
    let id = {
        let mut st = store.state.lock();
        let id = st.cat.next_id;
        st.cat.next_id = id + 1;
        id
    };
    let path = store.path(id);
    let fs = &store.reader.fs;
    let mut file = fs.create(&path).ctx(&path)?;
    let mut ptrs = Vec::with_capacity(live.len());
    let mut buf = Vec::new();
    let mut written = 0u64;
    for (k, seq, v, _) in live {
        let offset = written + buf.len() as u64;
        value_record::encode(&mut buf, Kind::GcCopy, 0, k, *seq, v);
        ptrs.push(ValuePointer {
            file_id: id,
            offset,
            length: (written + buf.len() as u64 - offset) as u32,
            aux: 0,
        });
        if buf.len() >= 1 << 20 {
            file.append(&buf).ctx(&path)?;
            written += buf.len() as u64;
            buf.clear();
        }
    }
    file.append(&buf).ctx(&path)?;
    written += buf.len() as u64;
    file.sync().ctx(&path)?;
    let dir = &store.reader.dir;
    fs.sync_dir(dir).ctx(dir)?;
    store.reader.stats.add_written(IoCategory::Gc, written);
    let mut st = store.state.lock();
    st.tables.insert(id, TableInfo::sealed(written, true));
    st.recount();
    store.publish_order(&st);
    st.commit(&[Edit::Table {
        id,
        state: Persisted::Sealed {
            len: written,
            sorted: true,
        },
    }])?;
    Ok(ptrs)
}

/// Deletes retired tables no live reader can reach; returns bytes freed.
fn free_pending(store: &TrieStore, oldest: u64) -> Result<u64> {
    let ready: Vec<u64> = {
        let mut st = store.state.lock();
        let (ready, keep): (Vec<_>, Vec<_>) = st.pending.drain(..).partition(|p| p.seq <= oldest);
        st.pending = keep;
        if ready.is_empty() {
            return Ok(0);
        }
        // Recorded, durably, before the files go: a table the trie file
        // lists must exist.
        let edits: Vec<Edit> = ready.iter().map(|p| Edit::DropTable(p.table)).collect();
        st.commit(&edits)?;
        st.log.sync()?;
        ready.iter().map(|p| p.table).collect()
    };
    let mut freed = 0;
    for id in ready {
        let len = {
            let mut st = store.state.lock();
            let len = st.tables.remove(&id).map_or(0, |t| t.valid_len);
            st.recount();
            store.publish_order(&st);
            len
        };
        store.reader.handles.forget(id);
        if let Some(d) = &store.reader.direct {
            d.forget(id);
        }
        let path = store.path(id);
        match store.reader.fs.remove(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(Error::io(&path, e)),
        }
        freed += len;
    }
    store
        .counters
        .gc_bytes_freed
        .fetch_add(freed, Ordering::Relaxed);
    Ok(freed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(id: u64, len: u64, garbage: u64) -> Candidate {
        Candidate {
            id,
            len,
            garbage,
            to_sort: false,
        }
    }

    #[test]
    fn picks_the_most_garbage_then_sweeps_by_age() {
        assert_eq!(pick(&[]), Choice::Nothing);
        assert_eq!(pick(&[c(1, 0, 0)]), Choice::Nothing);
        assert_eq!(
            pick(&[c(1, 100, 10), c(2, 100, 60), c(3, 500, 59)]),
            Choice::Collect(2)
        );
        // Ties go to the older table.
        assert_eq!(pick(&[c(4, 100, 60), c(2, 100, 60)]), Choice::Collect(2));
        // No known garbage: the oldest non-empty table.
        assert_eq!(
            pick(&[c(1, 0, 0), c(5, 10, 0), c(3, 10, 0)]),
            Choice::Collect(3)
        );
    }

    #[test]
    fn sorts_the_oldest_unsorted_sealed_table_when_no_garbage_is_known() {
        let sort = |id, len| Candidate {
            to_sort: true,
            ..c(id, len, 0)
        };
        assert_eq!(
            pick(&[c(1, 10, 0), sort(7, 10), sort(4, 10), sort(2, 0)]),
            Choice::Collect(4)
        );
        // Garbage comes first.
        assert_eq!(pick(&[sort(4, 10), c(9, 10, 1)]), Choice::Collect(9));
    }

    #[test]
    fn a_sort_pick_takes_more_tables_to_sort_up_to_the_bound() {
        let sort = |id, len| Candidate {
            to_sort: true,
            ..c(id, len, 0)
        };
        let cands = [
            sort(9, 40),
            sort(3, 30),
            c(1, 50, 0),
            sort(5, 30),
            sort(7, 0),
            sort(8, 50),
        ];
        // Oldest first, while the total stays within the bound; empty
        // tables and tables not due to be sorted stay out.
        assert_eq!(sort_batch(&cands, 3, 150), vec![3, 5, 8, 9]);
        assert_eq!(sort_batch(&cands, 3, 110), vec![3, 5, 8]);
        assert_eq!(sort_batch(&cands, 3, 109), vec![3, 5]);
        assert_eq!(sort_batch(&cands, 3, 10), vec![3]);
        // A pick made for its garbage, or of a table not due to be sorted,
        // goes alone.
        let garbage = [
            Candidate {
                garbage: 5,
                ..sort(3, 30)
            },
            sort(5, 30),
        ];
        assert_eq!(sort_batch(&garbage, 3, 100), vec![3]);
        assert_eq!(sort_batch(&cands, 1, 1000), vec![1]);
    }
}
