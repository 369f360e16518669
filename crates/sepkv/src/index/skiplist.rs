//! A concurrent skiplist: one writer, any number of lock-free readers.
//!
//! Entries are immutable byte strings (an internal key and its value) kept
//! in internal-key order. Nodes are never removed or freed while the list is
//! alive, so a reader holding the list (through an `Arc`) may follow any
//! pointer it loaded. A writer links a new node bottom-up with release
//! stores; readers load with acquire, so they see either the old or the new
//! list, never a half-linked node. Inserts are serialised by an internal
//! mutex, so the single-writer rule holds even if callers forget it.
//!
//! This is the only module of the crate that uses `unsafe`; each block says
//! why it is sound.
#![allow(unsafe_code)]

use super::key::compare_internal;
use parking_lot::Mutex;
use std::cmp::Ordering as CmpOrdering;
use std::ptr;
use std::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};

const MAX_HEIGHT: usize = 12;
const BRANCHING: u32 = 4;

struct Node {
    /// `internal key ++ value`.
    entry: Box<[u8]>,
    key_len: usize,
    next: Box<[AtomicPtr<Node>]>,
}

impl Node {
    fn alloc(key: &[u8], value: &[u8], height: usize) -> *mut Node {
        let mut entry = Vec::with_capacity(key.len() + value.len());
        entry.extend_from_slice(key);
        entry.extend_from_slice(value);
        let next = (0..height)
            .map(|_| AtomicPtr::new(ptr::null_mut()))
            .collect();
        Box::into_raw(Box::new(Node {
            entry: entry.into_boxed_slice(),
            key_len: key.len(),
            next,
        }))
    }

    fn key(&self) -> &[u8] {
        &self.entry[..self.key_len]
    }

    fn value(&self) -> &[u8] {
        &self.entry[self.key_len..]
    }
}

/// The skiplist. See the module docs for the concurrency contract.
pub struct SkipList {
    head: *mut Node,
    max_height: AtomicUsize,
    len: AtomicUsize,
    bytes: AtomicUsize,
    writer: Mutex<u64>,
}

// SAFETY: all shared mutable state is in atomics or behind `writer`; nodes
// are immutable after they are linked and live as long as the list.
unsafe impl Send for SkipList {}
// SAFETY: as above; readers only perform acquire loads and shared reads.
unsafe impl Sync for SkipList {}

impl Default for SkipList {
    fn default() -> Self {
        Self::new()
    }
}

impl SkipList {
    /// An empty list.
    pub fn new() -> Self {
        SkipList {
            head: Node::alloc(&[], &[], MAX_HEIGHT),
            max_height: AtomicUsize::new(1),
            len: AtomicUsize::new(0),
            bytes: AtomicUsize::new(0),
            writer: Mutex::new(0x2545_f491_4f6c_dd1d),
        }
    }

    fn node(&self, p: *mut Node) -> &Node {
        // SAFETY: `p` is non-null and was produced by `Node::alloc` for this
        // list (head or a linked node); nodes are freed only in `drop`, which
        // needs `&mut self`, so the node outlives `&self`.
        unsafe { &*p }
    }

    fn next(&self, p: *mut Node, level: usize) -> *mut Node {
        self.node(p).next[level].load(Ordering::Acquire)
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.len.load(Ordering::Relaxed)
    }

    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Approximate bytes used by entries and nodes.
    pub fn approximate_bytes(&self) -> usize {
        self.bytes.load(Ordering::Relaxed)
    }

    /// First node with key `>= target`, filling `prev` with the rightmost
    /// node before it at every level.
    fn find_ge(&self, target: &[u8], mut prev: Option<&mut [*mut Node; MAX_HEIGHT]>) -> *mut Node {
        let mut x = self.head;
        let mut level = self.max_height.load(Ordering::Acquire) - 1;
        loop {
            let nx = self.next(x, level);
            if !nx.is_null() && compare_internal(self.node(nx).key(), target) == CmpOrdering::Less {
                x = nx;
            } else {
                if let Some(p) = prev.as_deref_mut() {
                    p[level] = x;
                }
                if level == 0 {
                    return nx;
                }
                level -= 1;
            }
        }
    }

    /// Last node with key `< target`, or head.
    fn find_lt(&self, target: &[u8]) -> *mut Node {
        let mut x = self.head;
        let mut level = self.max_height.load(Ordering::Acquire) - 1;
        loop {
            let nx = self.next(x, level);
            if !nx.is_null() && compare_internal(self.node(nx).key(), target) == CmpOrdering::Less {
                x = nx;
            } else if level == 0 {
                return x;
            } else {
                level -= 1;
            }
        }
    }

    /// Last node, or head when empty.
    fn find_last(&self) -> *mut Node {
        let mut x = self.head;
        let mut level = self.max_height.load(Ordering::Acquire) - 1;
        loop {
            let nx = self.next(x, level);
            if !nx.is_null() {
                x = nx;
            } else if level == 0 {
                return x;
            } else {
                level -= 1;
            }
        }
    }

    /// Inserts an entry. Keys must be unique (internal keys carry distinct
    /// sequence numbers); inserting an equal key is a logic error checked in
    /// debug builds.
    pub fn insert(&self, key: &[u8], value: &[u8]) {
        let mut rng = self.writer.lock();
        let mut prev = [self.head; MAX_HEIGHT];
        let x = self.find_ge(key, Some(&mut prev));
        debug_assert!(
            x.is_null() || compare_internal(self.node(x).key(), key) != CmpOrdering::Equal
        );
        let mut height = 1;
        while height < MAX_HEIGHT {
            *rng ^= *rng << 13;
            *rng ^= *rng >> 7;
            *rng ^= *rng << 17;
            if !(*rng as u32).is_multiple_of(BRANCHING) {
                break;
            }
            height += 1;
        }
        let cur = self.max_height.load(Ordering::Relaxed);
        if height > cur {
            // prev[cur..height] already hold head.
            self.max_height.store(height, Ordering::Release);
        }
        let n = Node::alloc(key, value, height);
        for (level, p) in prev.iter().enumerate().take(height) {
            let succ = self.node(*p).next[level].load(Ordering::Relaxed);
            self.node(n).next[level].store(succ, Ordering::Relaxed);
            self.node(*p).next[level].store(n, Ordering::Release);
        }
        self.len.fetch_add(1, Ordering::Relaxed);
        self.bytes.fetch_add(
            key.len() + value.len() + std::mem::size_of::<Node>() + height * 8,
            Ordering::Relaxed,
        );
    }
}

impl Drop for SkipList {
    fn drop(&mut self) {
        let mut p = self.head;
        while !p.is_null() {
            // SAFETY: `&mut self` guarantees no reader or iterator is alive
            // (iterators hold an `Arc` to the owner); every node reachable on
            // level 0 came from `Box::into_raw` and is freed exactly once.
            let node = unsafe { Box::from_raw(p) };
            p = node.next[0].load(Ordering::Relaxed);
        }
    }
}

/// A cursor over a skiplist. It borrows the list through the owner `O`
/// (an `Arc` of the structure holding the list) so nodes stay alive.
pub struct SkipIter<O: AsRef<SkipList>> {
    owner: O,
    node: *mut Node,
}

// SAFETY: the iterator only reads immutable nodes of a `Sync` list it keeps
// alive through `owner`.
unsafe impl<O: AsRef<SkipList> + Send> Send for SkipIter<O> {}

impl<O: AsRef<SkipList>> SkipIter<O> {
    /// An unpositioned cursor.
    pub fn new(owner: O) -> Self {
        SkipIter {
            owner,
            node: ptr::null_mut(),
        }
    }

    fn list(&self) -> &SkipList {
        self.owner.as_ref()
    }

    /// True when positioned at an entry.
    pub fn valid(&self) -> bool {
        !self.node.is_null()
    }

    /// Current key. Requires `valid()`.
    pub fn key(&self) -> &[u8] {
        self.list().node(self.node).key()
    }

    /// Current value. Requires `valid()`.
    pub fn value(&self) -> &[u8] {
        self.list().node(self.node).value()
    }

    /// Positions at the first key `>= target`.
    pub fn seek(&mut self, target: &[u8]) {
        self.node = self.list().find_ge(target, None);
    }

    /// Positions at the first entry.
    pub fn seek_to_first(&mut self) {
        let l = self.list();
        self.node = l.next(l.head, 0);
    }

    /// Positions at the last entry.
    pub fn seek_to_last(&mut self) {
        let l = self.list();
        let n = l.find_last();
        self.node = if n == l.head { ptr::null_mut() } else { n };
    }

    /// Advances. Requires `valid()`.
    pub fn next(&mut self) {
        self.node = self.list().next(self.node, 0);
    }

    /// Steps back. Requires `valid()`.
    pub fn prev(&mut self) {
        let l = self.list();
        let n = l.find_lt(l.node(self.node).key());
        self.node = if n == l.head { ptr::null_mut() } else { n };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::key::{internal_key, ValueType};
    use std::sync::Arc;

    struct Own(SkipList);
    impl AsRef<SkipList> for Own {
        fn as_ref(&self) -> &SkipList {
            &self.0
        }
    }
    impl AsRef<SkipList> for Arc<Own> {
        fn as_ref(&self) -> &SkipList {
            &self.0
        }
    }

    #[test]
    fn ordered_iteration_both_ways() {
        let l = Arc::new(Own(SkipList::new()));
        let mut keys: Vec<Vec<u8>> = (0..2000u32)
            .map(|i| internal_key(&(i * 7919 % 2000).to_be_bytes(), i as u64, ValueType::Value))
            .collect();
        for k in &keys {
            l.0.insert(k, b"v");
        }
        keys.sort_by(|a, b| compare_internal(a, b));
        let mut it = SkipIter::new(l.clone());
        it.seek_to_first();
        for k in &keys {
            assert!(it.valid());
            assert_eq!(it.key(), &k[..]);
            it.next();
        }
        assert!(!it.valid());
        it.seek_to_last();
        for k in keys.iter().rev() {
            assert_eq!(it.key(), &k[..]);
            it.prev();
        }
        assert!(!it.valid());
        it.seek(&keys[500]);
        assert_eq!(it.key(), &keys[500][..]);
        assert_eq!(l.0.len(), 2000);
    }

    #[test]
    fn concurrent_readers_see_consistent_order() {
        let l = Arc::new(Own(SkipList::new()));
        let readers: Vec<_> = (0..2)
            .map(|_| {
                let l = l.clone();
                std::thread::spawn(move || {
                    for _ in 0..200 {
                        let mut it = SkipIter::new(l.clone());
                        it.seek_to_first();
                        let mut last: Option<Vec<u8>> = None;
                        while it.valid() {
                            if let Some(p) = &last {
                                assert_eq!(compare_internal(p, it.key()), CmpOrdering::Less);
                            }
                            last = Some(it.key().to_vec());
                            it.next();
                        }
                    }
                })
            })
            .collect();
        for i in 0..20_000u64 {
            l.0.insert(
                &internal_key(
                    &(i.wrapping_mul(2654435761) % 100_000).to_be_bytes(),
                    i,
                    ValueType::Value,
                ),
                b"x",
            );
        }
        for r in readers {
            r.join().unwrap();
        }
    }
}
