//! Composed iterators: the merging iterator over several sorted children and
//! the level iterator that walks the files of one level lazily.

use super::iter::InternalIterator;
use super::key::compare_internal;
use super::sstable::ReadCtx;
use super::table_cache::{AnyTable, AnyTableIterator, TableCache};
use super::version::FileMeta;
use crate::error::{Error, Result};
use std::cmp::Ordering;
use std::sync::Arc;

/// Merges children in internal-key order. On equal keys the child listed
/// first wins (children are given newest first).
///
/// Each valid child's current key is copied when the child moves, so that
/// comparisons read flat buffers instead of calling down through the
/// child's layers (level, table, block) for every comparison. Moving
/// forward, the valid children form a binary min-heap ordered by (key,
/// child index): a `next` compares the moved child with at most two
/// children per level of the heap, and not at all with the others (Pebble
/// and RocksDB keep a heap for the same reason; LevelDB compares every
/// child). Moving backward, which scans rarely do, every child is compared.
///
/// A child that stops on an error stops the merge: the iterator becomes
/// invalid and [`InternalIterator::status`] reports the error, so no entry
/// of the other children is returned past the point where the failed
/// child's entries went missing.
///
/// The children are of one type `C`: boxed cursors of any kind by default,
/// or one concrete cursor type (a DTable's segment cursors), which saves a
/// box per child and a virtual call per move.
pub struct MergingIterator<C = Box<dyn InternalIterator>> {
    children: Vec<C>,
    /// `keys[i]`: child `i`'s current key while it is valid.
    keys: Vec<Vec<u8>>,
    /// Moving forward: the valid children as a min-heap, smallest first.
    heap: Vec<usize>,
    current: Option<usize>,
    forward: bool,
    err: Option<Error>,
}

impl<C: InternalIterator> MergingIterator<C> {
    /// Merges `children`, given newest source first.
    pub fn new(children: Vec<C>) -> Self {
        let n = children.len();
        MergingIterator {
            children,
            keys: vec![Vec::new(); n],
            heap: Vec::with_capacity(n),
            current: None,
            forward: true,
            err: None,
        }
    }

    /// True when child `a` comes before child `b`: a smaller key, or an
    /// equal one from a child listed earlier.
    fn before(&self, a: usize, b: usize) -> bool {
        match compare_internal(&self.keys[a], &self.keys[b]) {
            Ordering::Less => true,
            Ordering::Equal => a < b,
            Ordering::Greater => false,
        }
    }

    /// Records child `i`'s position after it moved: copies its key when it
    /// is valid; otherwise keeps its error, if it stopped on one. True when
    /// the child is valid.
    fn refresh(&mut self, i: usize) -> bool {
        let c = &self.children[i];
        if c.valid() {
            let k = &mut self.keys[i];
            k.clear();
            k.extend_from_slice(c.key());
            return true;
        }
        if self.err.is_none() {
            if let Err(e) = c.status() {
                self.err = Some(e);
            }
        }
        false
    }

    /// Refreshes every child after all moved, then orders them for the
    /// direction.
    fn refresh_all(&mut self) {
        self.heap.clear();
        for i in 0..self.children.len() {
            if self.refresh(i) {
                self.heap.push(i);
            }
        }
        if self.forward {
            // Heapify: sift down every inner node, the last first.
            for at in (0..self.heap.len() / 2).rev() {
                self.sift_down(at);
            }
            self.set_current(self.heap.first().copied());
        } else {
            self.find_largest();
        }
    }

    /// Restores the heap order below `at`.
    fn sift_down(&mut self, mut at: usize) {
        let n = self.heap.len();
        loop {
            let l = 2 * at + 1;
            if l >= n {
                return;
            }
            let r = l + 1;
            let child = if r < n && self.before(self.heap[r], self.heap[l]) {
                r
            } else {
                l
            };
            if !self.before(self.heap[child], self.heap[at]) {
                return;
            }
            self.heap.swap(at, child);
            at = child;
        }
    }

    /// The current child, unless an error stopped the merge.
    fn set_current(&mut self, c: Option<usize>) {
        self.current = if self.err.is_some() { None } else { c };
    }

    /// Moving backward: the child with the largest key (of equal keys, the
    /// one listed last, mirroring the forward order).
    fn find_largest(&mut self) {
        self.heap.clear();
        let mut best: Option<usize> = None;
        for i in (0..self.children.len()).rev() {
            if self.children[i].valid()
                && best.is_none_or(|b| {
                    compare_internal(&self.keys[i], &self.keys[b]) == Ordering::Greater
                })
            {
                best = Some(i);
            }
        }
        self.set_current(best);
    }

    fn cur(&self) -> &C {
        &self.children[self.current.expect("valid iterator")]
    }

    /// The children, in the order given.
    pub(crate) fn children(&self) -> &[C] {
        &self.children
    }
}

impl<C: InternalIterator> InternalIterator for MergingIterator<C> {
    fn valid(&self) -> bool {
        self.current.is_some()
    }

    fn seek_to_first(&mut self) {
        self.err = None;
        for c in &mut self.children {
            c.seek_to_first();
        }
        self.forward = true;
        self.refresh_all();
    }

    fn seek_to_last(&mut self) {
        self.err = None;
        for c in &mut self.children {
            c.seek_to_last();
        }
        self.forward = false;
        self.refresh_all();
    }

    fn seek(&mut self, target: &[u8]) {
        self.err = None;
        for c in &mut self.children {
            c.seek(target);
        }
        self.forward = true;
        self.refresh_all();
    }

    fn next(&mut self) {
        let cur = self.current.expect("valid iterator");
        if !self.forward {
            // Every other child must be positioned after key().
            let key = self.keys[cur].clone();
            for (i, c) in self.children.iter_mut().enumerate() {
                if i != cur {
                    c.seek(&key);
                    if c.valid() && compare_internal(c.key(), &key) == Ordering::Equal {
                        c.next();
                    }
                }
            }
            self.children[cur].next();
            self.forward = true;
            self.refresh_all();
            return;
        }
        // `cur` is the heap's root.
        self.children[cur].next();
        if self.refresh(cur) {
            self.sift_down(0);
        } else {
            let last = self.heap.len() - 1;
            self.heap.swap(0, last);
            self.heap.pop();
            self.sift_down(0);
        }
        self.set_current(self.heap.first().copied());
    }

    fn prev(&mut self) {
        let cur = self.current.expect("valid iterator");
        if self.forward {
            // Every other child must be positioned before key().
            let key = self.keys[cur].clone();
            for (i, c) in self.children.iter_mut().enumerate() {
                if i != cur {
                    c.seek(&key);
                    if c.valid() {
                        c.prev();
                    } else if c.status().is_ok() {
                        c.seek_to_last();
                    }
                }
            }
            self.children[cur].prev();
            self.forward = false;
            self.refresh_all();
            return;
        }
        self.children[cur].prev();
        self.refresh(cur);
        self.find_largest();
    }

    fn key(&self) -> &[u8] {
        &self.keys[self.current.expect("valid iterator")]
    }

    fn value(&self) -> &[u8] {
        self.cur().value()
    }

    fn status(&self) -> Result<()> {
        match &self.err {
            Some(e) => Err(e.clone()),
            None => Ok(()),
        }
    }
}

/// Walks the files of one sorted level (1 and up), opening each table only
/// when the cursor reaches it.
pub struct LevelIterator {
    files: Vec<Arc<FileMeta>>,
    tc: Arc<TableCache>,
    ctx: ReadCtx,
    idx: usize,
    cur: Option<AnyTableIterator>,
    err: Option<Error>,
}

impl LevelIterator {
    /// A cursor over `files` (sorted, disjoint).
    pub fn new(files: Vec<Arc<FileMeta>>, tc: Arc<TableCache>, ctx: ReadCtx) -> Self {
        LevelIterator {
            files,
            tc,
            ctx,
            idx: 0,
            cur: None,
            err: None,
        }
    }

    /// Opens file `idx` (none past the last) and returns its table.
    fn open(&mut self, idx: usize) -> Option<Arc<AnyTable>> {
        self.idx = idx;
        self.cur = None;
        if self.err.is_some() {
            return None;
        }
        let f = self.files.get(idx)?;
        match self.tc.get(f.number, f.size, self.ctx.category) {
            Ok(t) => {
                self.cur = Some(t.iter(self.ctx));
                Some(t)
            }
            Err(e) => {
                self.err = Some(e);
                None
            }
        }
    }

    fn cur_failed(&self) -> bool {
        self.cur.as_ref().is_some_and(|c| c.status().is_err())
    }

    fn skip_forward(&mut self) {
        while self.cur.as_ref().is_some_and(|c| !c.valid()) && !self.cur_failed() {
            let next = self.idx + 1;
            self.open(next);
            if let Some(c) = self.cur.as_mut() {
                c.seek_to_first();
            }
        }
    }

    fn skip_backward(&mut self) {
        while self.cur.as_ref().is_some_and(|c| !c.valid()) && !self.cur_failed() {
            if self.idx == 0 {
                self.cur = None;
                return;
            }
            let prev = self.idx - 1;
            self.open(prev);
            if let Some(c) = self.cur.as_mut() {
                c.seek_to_last();
            }
        }
    }
}

impl InternalIterator for LevelIterator {
    fn valid(&self) -> bool {
        self.cur.as_ref().is_some_and(|c| c.valid())
    }

    fn seek_to_first(&mut self) {
        self.open(0);
        if let Some(c) = self.cur.as_mut() {
            c.seek_to_first();
        }
        self.skip_forward();
    }

    fn seek_to_last(&mut self) {
        if self.files.is_empty() {
            self.cur = None;
            return;
        }
        self.open(self.files.len() - 1);
        if let Some(c) = self.cur.as_mut() {
            c.seek_to_last();
        }
        self.skip_backward();
    }

    fn seek(&mut self, target: &[u8]) {
        let i = self
            .files
            .partition_point(|f| compare_internal(&f.largest, target) == Ordering::Less);
        let t = self.open(i);
        if let Some(c) = self.cur.as_mut() {
            c.seek(target);
            // A DTable's seek positioned a cursor in each of its segments:
            // all but one are charged to it (the LWC-tree's seek merges).
            if let Some(t) = t.as_deref() {
                if let Some(d) = t.as_dtable() {
                    let extra = d.num_segments().saturating_sub(1) as u64;
                    self.tc.charge_reads(t, extra);
                }
            }
        }
        self.skip_forward();
    }

    fn next(&mut self) {
        if let Some(c) = self.cur.as_mut() {
            c.next();
        }
        self.skip_forward();
    }

    fn prev(&mut self) {
        if let Some(c) = self.cur.as_mut() {
            c.prev();
        }
        self.skip_backward();
    }

    fn key(&self) -> &[u8] {
        self.cur.as_ref().expect("valid iterator").key()
    }

    fn value(&self) -> &[u8] {
        self.cur.as_ref().expect("valid iterator").value()
    }

    fn status(&self) -> Result<()> {
        if let Some(e) = &self.err {
            return Err(e.clone());
        }
        match &self.cur {
            Some(c) => c.status(),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A sorted in-memory internal iterator for tests.
    pub struct VecIter {
        pub entries: Vec<(Vec<u8>, Vec<u8>)>,
        pub pos: Option<usize>,
    }

    impl InternalIterator for VecIter {
        fn valid(&self) -> bool {
            self.pos.is_some()
        }
        fn seek_to_first(&mut self) {
            self.pos = (!self.entries.is_empty()).then_some(0);
        }
        fn seek_to_last(&mut self) {
            self.pos = self.entries.len().checked_sub(1);
        }
        fn seek(&mut self, t: &[u8]) {
            let i = self
                .entries
                .partition_point(|e| compare_internal(&e.0, t) == Ordering::Less);
            self.pos = (i < self.entries.len()).then_some(i);
        }
        fn next(&mut self) {
            self.pos = self.pos.map(|p| p + 1).filter(|&p| p < self.entries.len());
        }
        fn prev(&mut self) {
            self.pos = self.pos.and_then(|p| p.checked_sub(1));
        }
        fn key(&self) -> &[u8] {
            &self.entries[self.pos.unwrap()].0
        }
        fn value(&self) -> &[u8] {
            &self.entries[self.pos.unwrap()].1
        }
        fn status(&self) -> Result<()> {
            Ok(())
        }
    }

    use crate::index::key::{internal_key, ValueType};
    use proptest::prelude::*;

    /// A child that fails once it is moved past `fail_at` entries.
    struct FailingIter {
        inner: VecIter,
        fail_at: usize,
        failed: bool,
    }

    impl InternalIterator for FailingIter {
        fn valid(&self) -> bool {
            !self.failed && self.inner.valid()
        }
        fn seek_to_first(&mut self) {
            self.inner.seek_to_first();
        }
        fn seek_to_last(&mut self) {
            self.inner.seek_to_last();
        }
        fn seek(&mut self, t: &[u8]) {
            self.inner.seek(t);
        }
        fn next(&mut self) {
            self.inner.next();
            if self.inner.pos.is_some_and(|p| p >= self.fail_at) {
                self.failed = true;
            }
        }
        fn prev(&mut self) {
            self.inner.prev();
        }
        fn key(&self) -> &[u8] {
            self.inner.key()
        }
        fn value(&self) -> &[u8] {
            self.inner.value()
        }
        fn status(&self) -> Result<()> {
            if self.failed {
                return Err(Error::corruption("child", 0, "test failure"));
            }
            Ok(())
        }
    }

    /// A failed child stops the merge where its entries go missing: no
    /// entry of the other children past that point comes out, and the
    /// merge reports the child's error.
    #[test]
    fn a_failed_child_stops_the_merge() {
        let entries = |keys: &[u8]| -> Vec<(Vec<u8>, Vec<u8>)> {
            keys.iter()
                .map(|&k| (internal_key(&[k], 1, ValueType::Value), vec![k]))
                .collect()
        };
        let failing = FailingIter {
            inner: VecIter {
                entries: entries(&[1, 3, 5, 7]),
                pos: None,
            },
            fail_at: 2,
            failed: false,
        };
        let healthy = VecIter {
            entries: entries(&[2, 4, 6, 8]),
            pos: None,
        };
        let mut m = MergingIterator::new(vec![
            Box::new(failing) as Box<dyn InternalIterator>,
            Box::new(healthy),
        ]);
        m.seek_to_first();
        let mut got = Vec::new();
        while m.valid() {
            got.push(m.value()[0]);
            m.next();
        }
        // The child fails as it moves past 3: what it would have returned
        // next is unknown, so nothing more comes out (6 must never follow 4).
        assert_eq!(got, [1, 2, 3]);
        assert!(m.status().is_err());
    }

    proptest! {
        #[test]
        fn merge_matches_sorted_union(
            keys in proptest::collection::vec((0u8..40, 1u64..1000), 0..200),
            parts in 1usize..5,
            moves in proptest::collection::vec(any::<bool>(), 0..60),
        ) {
            let mut all: Vec<Vec<u8>> = keys.iter().enumerate()
                .map(|(i, (k, s))| internal_key(&[*k], s * 1000 + i as u64, ValueType::Value)).collect();
            let mut children: Vec<Vec<(Vec<u8>, Vec<u8>)>> = vec![Vec::new(); parts];
            for (i, k) in all.iter().enumerate() {
                children[i % parts].push((k.clone(), vec![]));
            }
            for c in &mut children { c.sort_by(|a, b| compare_internal(&a.0, &b.0)); }
            all.sort_by(|a, b| compare_internal(a, b));
            let mut m = MergingIterator::new(children.into_iter()
                .map(|e| Box::new(VecIter { entries: e, pos: None }) as Box<dyn InternalIterator>).collect());
            m.seek_to_first();
            let mut pos = 0usize;
            if all.is_empty() { prop_assert!(!m.valid()); return Ok(()); }
            for fwd in moves {
                prop_assert!(m.valid());
                prop_assert_eq!(m.key(), &all[pos][..]);
                if fwd && pos + 1 < all.len() { m.next(); pos += 1; }
                else if !fwd && pos > 0 { m.prev(); pos -= 1; }
            }
        }

        /// Going forward from a seek, with the same internal key in several
        /// children: every entry comes out, in key order, and of equal keys
        /// the one of the child listed first comes first (the runner-up
        /// shortcut must keep that order). (A change of direction assumes
        /// internal keys unique across children, as a sequence number is
        /// given once; `merge_matches_sorted_union` covers it.)
        #[test]
        fn forward_merge_orders_equal_keys_by_child(
            keys in proptest::collection::vec((0u8..12, 1u64..4, 0usize..4), 0..120),
            target in (0u8..14, 0u64..5),
        ) {
            let mut children: Vec<Vec<(Vec<u8>, Vec<u8>)>> = vec![Vec::new(); 4];
            for (k, s, c) in &keys {
                let ik = internal_key(&[*k], *s, ValueType::Value);
                if !children[*c].iter().any(|e| e.0 == ik) {
                    children[*c].push((ik, vec![*c as u8]));
                }
            }
            for c in &mut children { c.sort_by(|a, b| compare_internal(&a.0, &b.0)); }
            let mut want: Vec<(Vec<u8>, Vec<u8>)> = children.iter().flatten().cloned().collect();
            // Stable: equal keys keep the children's order.
            want.sort_by(|a, b| compare_internal(&a.0, &b.0));
            let mut m = MergingIterator::new(children.into_iter()
                .map(|e| Box::new(VecIter { entries: e, pos: None }) as Box<dyn InternalIterator>).collect());
            let t = internal_key(&[target.0], target.1, ValueType::Value);
            let pos = want.partition_point(|e| compare_internal(&e.0, &t) == Ordering::Less);
            m.seek(&t);
            let mut got = Vec::new();
            while m.valid() {
                got.push((m.key().to_vec(), m.value().to_vec()));
                m.next();
            }
            prop_assert_eq!(&got[..], &want[pos..]);
        }
    }
}
