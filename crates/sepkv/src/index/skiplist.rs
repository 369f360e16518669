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
//! # Memory layout
//!
//! Nodes live in an arena of `ARENA_BLOCK`-byte blocks owned by the list
//! and freed with it, as LevelDB's memtable does. A node is one contiguous
//! run of the arena: its tower of `height` next-pointers, then an 8-byte
//! header (key and value lengths), then the key and the value bytes. A node
//! pointer points at the header, so level `i`'s next-pointer sits
//! `8 × (i + 1)` bytes before it and the key right after it. A search step
//! therefore touches one place in memory (the level-0 pointer, the header
//! and a short key share a cache line), where a node of three separate heap
//! allocations (node, tower, entry) cost three cache misses per step.
//!
//! This is the only module of the crate that uses `unsafe`; each block says
//! why it is sound.
#![allow(unsafe_code)]

use super::key::compare_internal;
use parking_lot::Mutex;
use std::alloc::{alloc, dealloc, handle_alloc_error, Layout};
use std::cmp::Ordering as CmpOrdering;
use std::ptr;
use std::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};

const MAX_HEIGHT: usize = 12;
const BRANCHING: u32 = 4;

/// Bytes of one arena block. A node larger than a quarter of this gets a
/// block of its own, so at most a quarter of a block is left unused when a
/// node does not fit the rest of the current one. Blocks stay below the
/// allocator's threshold for mapping memory of its own: 1 MiB blocks came
/// to be served from the heap anyway once the first was freed (the
/// threshold adapts to freed sizes), and the heap held more of them after
/// the memtables were gone (peak resident memory of five presets loaded in
/// turn in one process: 315 MB, against 267 MB with 64 KiB blocks).
const ARENA_BLOCK: usize = 64 << 10;

/// Alignment of every node (that of the tower's pointers).
const NODE_ALIGN: usize = std::mem::align_of::<AtomicPtr<Node>>();

/// A node's header; the tower lies before it and the entry after it (see
/// the module docs).
#[repr(C)]
struct Node {
    key_len: u32,
    value_len: u32,
}

const HEADER: usize = std::mem::size_of::<Node>();
const SLOT: usize = std::mem::size_of::<AtomicPtr<Node>>();

impl Node {
    /// Bytes of a node of `height` levels holding `entry` bytes, rounded up
    /// to the node alignment.
    fn size(height: usize, entry: usize) -> usize {
        (height * SLOT + HEADER + entry).next_multiple_of(NODE_ALIGN)
    }
}

/// A linked node, borrowed for as long as its list. It keeps the raw
/// pointer `Arena::node` returned — whose provenance is the arena block —
/// rather than a `&Node`, because the tower and the entry lie outside the
/// header a `&Node` covers.
#[derive(Clone, Copy)]
struct NodeRef<'a> {
    p: *mut Node,
    _list: std::marker::PhantomData<&'a SkipList>,
}

impl<'a> NodeRef<'a> {
    /// Level `level`'s next-pointer. The caller guarantees `level` is below
    /// the node's height.
    fn slot(self, level: usize) -> &'a AtomicPtr<Node> {
        // SAFETY: a node is built by `Arena::node`, which lays out `height`
        // pointer slots, aligned, directly before the header; `level <
        // height` (callers only follow levels the node was linked at, and
        // the head has all `MAX_HEIGHT`), so the slot is inside the node's
        // allocation, initialised, and lives as long as the list ('a).
        unsafe { &*(self.p as *const AtomicPtr<Node>).sub(level + 1) }
    }

    fn entry(self) -> &'a [u8] {
        // SAFETY: the header was written before the node was published and
        // `Arena::node` copied `key_len + value_len` bytes directly after
        // it; neither is written again, and both live as long as the list.
        unsafe {
            let h = &*self.p;
            std::slice::from_raw_parts(
                (self.p as *const u8).add(HEADER),
                h.key_len as usize + h.value_len as usize,
            )
        }
    }

    fn key_len(self) -> usize {
        // SAFETY: as in `entry`.
        unsafe { (*self.p).key_len as usize }
    }

    fn key(self) -> &'a [u8] {
        &self.entry()[..self.key_len()]
    }

    fn value(self) -> &'a [u8] {
        &self.entry()[self.key_len()..]
    }
}

/// The blocks nodes are carved from. Only the writer (under the list's
/// mutex) allocates; blocks are freed when the list is dropped.
struct Arena {
    blocks: Vec<(*mut u8, Layout)>,
    /// Next free byte of the current block, and the bytes left after it.
    cur: *mut u8,
    left: usize,
}

impl Arena {
    fn new() -> Self {
        Arena {
            blocks: Vec::new(),
            cur: ptr::null_mut(),
            left: 0,
        }
    }

    fn block(&mut self, size: usize) -> *mut u8 {
        let layout = Layout::from_size_align(size, NODE_ALIGN).expect("arena block layout");
        // SAFETY: `size` is non-zero (a node has at least a header).
        let p = unsafe { alloc(layout) };
        if p.is_null() {
            handle_alloc_error(layout);
        }
        self.blocks.push((p, layout));
        p
    }

    /// `size` bytes aligned to `NODE_ALIGN` (`size` is a multiple of it).
    /// The first node (the list's head) gets a block of its own, so an
    /// empty list holds no full block.
    fn allocate(&mut self, size: usize) -> *mut u8 {
        if size > ARENA_BLOCK / 4 || self.blocks.is_empty() {
            return self.block(size);
        }
        if size > self.left {
            self.cur = self.block(ARENA_BLOCK);
            self.left = ARENA_BLOCK;
        }
        let p = self.cur;
        // SAFETY: `size <= left`, so the result stays inside the block.
        self.cur = unsafe { p.add(size) };
        self.left -= size;
        p
    }

    /// A new unlinked node of `height` levels holding `key ++ value`.
    fn node(&mut self, key: &[u8], value: &[u8], height: usize) -> *mut Node {
        let key_len = u32::try_from(key.len()).expect("memtable key under 4 GiB");
        let value_len = u32::try_from(value.len()).expect("memtable value under 4 GiB");
        let base = self.allocate(Node::size(height, key.len() + value.len()));
        // SAFETY: `base` starts `Node::size` fresh bytes aligned to
        // `NODE_ALIGN`: `height` slots, the header, then the entry. Every
        // part is written here before the node is published.
        unsafe {
            let tower = base as *mut AtomicPtr<Node>;
            for i in 0..height {
                tower.add(i).write(AtomicPtr::new(ptr::null_mut()));
            }
            let n = base.add(height * SLOT) as *mut Node;
            n.write(Node { key_len, value_len });
            let e = (n as *mut u8).add(HEADER);
            ptr::copy_nonoverlapping(key.as_ptr(), e, key.len());
            ptr::copy_nonoverlapping(value.as_ptr(), e.add(key.len()), value.len());
            n
        }
    }
}

impl Drop for Arena {
    fn drop(&mut self) {
        for (p, layout) in self.blocks.drain(..) {
            // SAFETY: each block came from `alloc` with this layout and is
            // freed once; nodes need no drop of their own.
            unsafe { dealloc(p, layout) };
        }
    }
}

/// What the writer's mutex guards.
struct Writer {
    rng: u64,
    arena: Arena,
}

/// The skiplist. See the module docs for the concurrency contract.
pub struct SkipList {
    head: *mut Node,
    max_height: AtomicUsize,
    len: AtomicUsize,
    bytes: AtomicUsize,
    writer: Mutex<Writer>,
}

// SAFETY: all shared mutable state is in atomics or behind `writer`; nodes
// are immutable after they are linked and live, in the arena, as long as
// the list.
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
        let mut arena = Arena::new();
        let head = arena.node(&[], &[], MAX_HEIGHT);
        SkipList {
            head,
            max_height: AtomicUsize::new(1),
            len: AtomicUsize::new(0),
            bytes: AtomicUsize::new(0),
            writer: Mutex::new(Writer {
                rng: 0x2545_f491_4f6c_dd1d,
                arena,
            }),
        }
    }

    /// The node `p` points to. `p` is non-null and was produced by
    /// `Arena::node` for this list (head or a linked node); the arena is
    /// freed only when the list is dropped, which needs `&mut self`, so the
    /// node outlives `&self`.
    fn node(&self, p: *mut Node) -> NodeRef<'_> {
        debug_assert!(!p.is_null());
        NodeRef {
            p,
            _list: std::marker::PhantomData,
        }
    }

    fn next(&self, p: *mut Node, level: usize) -> *mut Node {
        self.node(p).slot(level).load(Ordering::Acquire)
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.len.load(Ordering::Relaxed)
    }

    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes of the entries' nodes (towers, headers, keys and values); the
    /// arena's unused tail is not counted.
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
        let mut w = self.writer.lock();
        let mut prev = [self.head; MAX_HEIGHT];
        let x = self.find_ge(key, Some(&mut prev));
        debug_assert!(
            x.is_null() || compare_internal(self.node(x).key(), key) != CmpOrdering::Equal
        );
        let mut height = 1;
        while height < MAX_HEIGHT {
            w.rng ^= w.rng << 13;
            w.rng ^= w.rng >> 7;
            w.rng ^= w.rng << 17;
            if !(w.rng as u32).is_multiple_of(BRANCHING) {
                break;
            }
            height += 1;
        }
        let cur = self.max_height.load(Ordering::Relaxed);
        if height > cur {
            // prev[cur..height] already hold head.
            self.max_height.store(height, Ordering::Release);
        }
        let n = w.arena.node(key, value, height);
        for (level, p) in prev.iter().enumerate().take(height) {
            let succ = self.node(*p).slot(level).load(Ordering::Relaxed);
            self.node(n).slot(level).store(succ, Ordering::Relaxed);
            self.node(*p).slot(level).store(n, Ordering::Release);
        }
        self.len.fetch_add(1, Ordering::Relaxed);
        self.bytes.fetch_add(
            Node::size(height, key.len() + value.len()),
            Ordering::Relaxed,
        );
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
    fn entries_of_every_size_read_back_across_arena_blocks() {
        // Sizes from empty to past a quarter block (a block of its own),
        // enough of them to fill several blocks.
        let l = Arc::new(Own(SkipList::new()));
        let sizes = [
            0usize,
            1,
            7,
            8,
            9,
            100,
            4095,
            ARENA_BLOCK / 4,
            ARENA_BLOCK / 4 + 1,
            3 << 20,
        ];
        let mut want = Vec::new();
        for i in 0..3000u32 {
            let len = sizes[i as usize % sizes.len()];
            let len = if len > 4096 && i > 40 { 33 } else { len };
            let key = internal_key(&(i * 7919 % 3000).to_be_bytes(), i as u64, ValueType::Value);
            let value: Vec<u8> = (0..len).map(|j| (i as usize + j) as u8).collect();
            l.0.insert(&key, &value);
            want.push((key, value));
        }
        want.sort_by(|a, b| compare_internal(&a.0, &b.0));
        let mut it = SkipIter::new(l.clone());
        it.seek_to_first();
        for (k, v) in &want {
            assert!(it.valid());
            assert_eq!(it.key(), &k[..]);
            assert_eq!(it.value(), &v[..]);
            it.next();
        }
        assert!(!it.valid());
        let nodes: usize = want
            .iter()
            .map(|(k, v)| Node::size(1, k.len() + v.len()))
            .sum();
        assert!(l.0.approximate_bytes() >= nodes);
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
