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
//! # Searches and inserts
//!
//! A search splits its target once (user key, trailer, and the user key's
//! first 16 bytes read as two big-endian `u64`s) and compares each node's
//! key in place against it: for two user keys of 16 bytes or more, one or
//! two integer comparisons decide, with no decoding and no call. A node
//! that ended the search on one level is not compared again on the level
//! below, and while it compares the next node on a level the search
//! prefetches the node it goes to if it steps down.
//!
//! The writer keeps a *splice*: for each level, the nodes around its last
//! insert (see `Splice`). An insert first checks whether its key falls
//! within the splice's lowest brackets; a sorted run of inserts (a sorted
//! batch, ascending keys) then starts its search at the lowest level
//! whose bracket holds the key, mostly the bottom one, instead of at the
//! top, and a random key costs one or two
//! comparisons more, against nodes still in cache. An insert with
//! [`SkipList::insert_parts`] writes the user key and the trailer into
//! the node directly, with no internal key assembled on the heap first.
//! What each part saves is measured in the [`super::memtable`] docs.
//!
//! This is the only module of the crate that uses `unsafe`; each block says
//! why it is sound.
#![allow(unsafe_code)]

use super::key::{compare_bytes, compare_internal, trailer, user_key, TRAILER_LEN};
use parking_lot::Mutex;
use std::alloc::{alloc, dealloc, handle_alloc_error, Layout};
use std::cmp::Ordering as CmpOrdering;
use std::ptr;
use std::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};

const MAX_HEIGHT: usize = 12;
const BRANCHING: u32 = 4;

/// Lowest levels of the splice an insert checks for a bracket holding its
/// key while inserts come in sorted runs (see [`Splice`]): a key within
/// about `BRANCHING ^ CLIMB_LEVELS` entries after the last one starts its
/// search there.
const CLIMB_LEVELS: usize = 4;

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
        // SAFETY: as in `entry`; the key is the entry's first `key_len`
        // bytes.
        unsafe { std::slice::from_raw_parts((self.p as *const u8).add(HEADER), self.key_len()) }
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

    /// A new unlinked node of `height` levels holding the key `key ++
    /// key_tail` and `value`.
    fn node(&mut self, key: &[u8], key_tail: &[u8], value: &[u8], height: usize) -> *mut Node {
        let klen = key.len() + key_tail.len();
        let key_len = u32::try_from(klen).expect("memtable key under 4 GiB");
        let value_len = u32::try_from(value.len()).expect("memtable value under 4 GiB");
        let base = self.allocate(Node::size(height, klen + value.len()));
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
            ptr::copy_nonoverlapping(key_tail.as_ptr(), e.add(key.len()), key_tail.len());
            ptr::copy_nonoverlapping(value.as_ptr(), e.add(klen), value.len());
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
    splice: Splice,
    /// The last insert fell within a bracket of the splice.
    sorted_run: bool,
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
        let head = arena.node(&[], &[], &[], MAX_HEIGHT);
        SkipList {
            head,
            max_height: AtomicUsize::new(1),
            len: AtomicUsize::new(0),
            bytes: AtomicUsize::new(0),
            writer: Mutex::new(Writer {
                rng: 0x2545_f491_4f6c_dd1d,
                arena,
                splice: Splice {
                    prev: [head; MAX_HEIGHT],
                    next: [ptr::null_mut(); MAX_HEIGHT],
                },
                sorted_run: false,
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

    /// Key comparisons a search for the internal key `target` makes (for
    /// the memtable micro-benchmark).
    #[doc(hidden)]
    pub fn search_comparisons(&self, target: &[u8]) -> usize {
        let mut n = 0;
        self.find_ge(&Target::new(target), &mut || n += 1);
        n
    }

    /// Starts loading the node a search at `x` on `level` goes to if it
    /// steps down a level, while it compares the next node on this one.
    /// Either way, one of the two nodes it reads next is on its way: a
    /// step down, about one step in four, then waits for no miss.
    #[inline(always)]
    fn prefetch_down(&self, x: *mut Node, level: usize) {
        if level > 0 {
            // Only an address is read, never the node behind it.
            let down = self.node(x).slot(level - 1).load(Ordering::Relaxed);
            #[cfg(target_arch = "x86_64")]
            // SAFETY: SSE is part of every x86_64 target, and a prefetch
            // is a hint that reads nothing and never faults, even on null.
            unsafe {
                std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
                    down as *const i8,
                )
            };
            #[cfg(not(target_arch = "x86_64"))]
            let _ = down;
        }
    }

    /// True when node `n`'s key sorts before `t`.
    #[inline(always)]
    fn before(&self, n: *mut Node, t: &Target<'_>) -> bool {
        t.is_after(self.node(n).key())
    }

    /// First node with key `>= t`. `probe` is called once per key
    /// comparison.
    fn find_ge(&self, t: &Target<'_>, probe: &mut impl FnMut()) -> *mut Node {
        let mut x = self.head;
        let mut level = self.max_height.load(Ordering::Acquire) - 1;
        // The node the search last found `>= t`: met again one level
        // down (no node lies between), it is not compared again.
        let mut bigger = ptr::null_mut();
        loop {
            self.prefetch_down(x, level);
            let nx = self.next(x, level);
            if nx != bigger && !nx.is_null() && {
                probe();
                self.before(nx, t)
            } {
                x = nx;
            } else {
                if level == 0 {
                    return nx;
                }
                bigger = nx;
                level -= 1;
            }
        }
    }

    /// First entry with key `>= target` as `(key, value)`, searched from
    /// `finger`: the search climbs from the predecessors the finger's last
    /// search left only as far as the distance to `target` needs, then
    /// steps down as [`SkipList::find_ge`] does, and leaves its own
    /// predecessors in the finger. For targets in ascending order (a
    /// batch of lookups sorted by key) a search passes about
    /// `log(distance)` levels instead of all of them, among nodes the last
    /// search left in cache. Any order is correct: a target at or before
    /// the finger's place starts from the head.
    pub fn seek_from<'a>(
        &'a self,
        finger: &mut Finger<'a>,
        target: &[u8],
    ) -> Option<(&'a [u8], &'a [u8])> {
        debug_assert!(ptr::eq(finger.list, self), "a finger of another list");
        let t = Target::new(target);
        let height = self.max_height.load(Ordering::Acquire);
        // Every predecessor the finger holds sorts at or before its level-0
        // one, so that one sorting before `t` makes all of them valid
        // starting points.
        let low = finger.prev[0];
        if low != self.head && !self.before(low, &t) {
            finger.prev = [self.head; MAX_HEIGHT];
        }
        // Climb while the next node one level up still sorts before `t`.
        let mut level = 0;
        while level + 1 < height {
            let nx = self.next(finger.prev[level + 1], level + 1);
            if nx.is_null() || !self.before(nx, &t) {
                break;
            }
            level += 1;
        }
        let mut x = finger.prev[level];
        let mut bigger = ptr::null_mut();
        loop {
            self.prefetch_down(x, level);
            let nx = self.next(x, level);
            if nx != bigger && !nx.is_null() && self.before(nx, &t) {
                x = nx;
            } else {
                finger.prev[level] = x;
                if level == 0 {
                    if nx.is_null() {
                        return None;
                    }
                    let n = self.node(nx);
                    return Some((n.key(), n.value()));
                }
                bigger = nx;
                level -= 1;
            }
        }
    }

    /// Last node with key `< target`, or head.
    fn find_lt(&self, target: &[u8]) -> *mut Node {
        let t = Target::new(target);
        let mut x = self.head;
        let mut level = self.max_height.load(Ordering::Acquire) - 1;
        let mut bigger = ptr::null_mut();
        loop {
            self.prefetch_down(x, level);
            let nx = self.next(x, level);
            if nx != bigger && !nx.is_null() && self.before(nx, &t) {
                x = nx;
            } else if level == 0 {
                return x;
            } else {
                bigger = nx;
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

    /// Inserts an entry whose key is the internal key `key`. Keys must be
    /// unique (internal keys carry distinct sequence numbers); inserting an
    /// equal key is a logic error checked in debug builds.
    ///
    /// # Panics
    ///
    /// If the key or the value is 4 GiB or longer.
    pub fn insert(&self, key: &[u8], value: &[u8]) {
        self.insert_at(&Target::new(key), key, &[], value);
    }

    /// Inserts an entry whose key is `user_key` followed by `trailer`
    /// (little-endian), as [`SkipList::insert`] does with that internal
    /// key, without assembling it first.
    ///
    /// # Panics
    ///
    /// As [`SkipList::insert`].
    pub fn insert_parts(&self, user_key: &[u8], trailer: u64, value: &[u8]) {
        let t = Target::parts(user_key, trailer);
        self.insert_at(&t, user_key, &trailer.to_le_bytes(), value);
    }

    /// Links a node holding `key ++ key_tail` and `value`, where `t` is that
    /// key. The search starts from the splice (see [`Splice`]): from the
    /// lowest level whose bracket still holds `t` rather than from the top.
    fn insert_at(&self, t: &Target<'_>, key: &[u8], key_tail: &[u8], value: &[u8]) {
        self.insert_counting(t, key, key_tail, value, &mut || {});
    }

    /// [`SkipList::insert_at`], calling `probe` once per key comparison.
    fn insert_counting(
        &self,
        t: &Target<'_>,
        key: &[u8],
        key_tail: &[u8],
        value: &[u8],
        probe: &mut impl FnMut(),
    ) {
        let mut before = |n: *mut Node| {
            probe();
            self.before(n, t)
        };
        let mut guard = self.writer.lock();
        let w = &mut *guard;
        let top = self.max_height.load(Ordering::Relaxed);
        let sp = &mut w.splice;
        // Lowest level whose bracket holds `t`, among the lowest
        // `CLIMB_LEVELS` (only level 0 unless the last insert was found
        // there too: a key in no low bracket is one far from the last
        // key, whose search is cheapest from the top). A bound shared with
        // the level below is not compared again.
        let climb = if w.sorted_run { CLIMB_LEVELS } else { 1 }.min(top);
        let mut level = 0;
        // Head stands for "none" (it is nobody's successor).
        let (mut last_prev, mut last_next) = (self.head, self.head);
        let mut found = false;
        while level < climb {
            let (p, n) = (sp.prev[level], sp.next[level]);
            let after_prev = p == last_prev || p == self.head || before(p);
            if !after_prev {
                // Before this level's lower bound, and so before the
                // lower bounds below the next few levels' too, mostly.
                break;
            }
            last_prev = p;
            // `last_next` is known to sort before `t`: met again, this
            // level's bracket fails too.
            if n != last_next {
                if n.is_null() || !before(n) {
                    found = true;
                    break;
                }
                last_next = n;
            }
            level += 1;
        }
        w.sorted_run = found;
        // Down from that level (from the top when none held `t`): `x`
        // holds a node before `t`, `bigger` one at or after it.
        let (mut x, mut bigger) = if found {
            (sp.prev[level], sp.next[level])
        } else {
            level = top;
            (self.head, ptr::null_mut())
        };
        while level > 0 {
            level -= 1;
            loop {
                self.prefetch_down(x, level);
                let nx = self.next(x, level);
                if nx != bigger && !nx.is_null() && before(nx) {
                    x = nx;
                } else {
                    bigger = nx;
                    break;
                }
            }
            sp.prev[level] = x;
            sp.next[level] = bigger;
        }
        debug_assert!(
            sp.next[0].is_null() || {
                let k = self.node(sp.next[0]).key();
                let mut whole = key.to_vec();
                whole.extend_from_slice(key_tail);
                compare_internal(k, &whole) != CmpOrdering::Equal
            }
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
        if height > top {
            // sp.prev[top..height] hold head and sp.next[top..height] null.
            self.max_height.store(height, Ordering::Release);
        }
        let n = w.arena.node(key, key_tail, value, height);
        let sp = &mut w.splice;
        for level in 0..height {
            let p = sp.prev[level];
            debug_assert_eq!(self.next(p, level), sp.next[level]);
            self.node(n)
                .slot(level)
                .store(sp.next[level], Ordering::Relaxed);
            self.node(p).slot(level).store(n, Ordering::Release);
            sp.prev[level] = n;
        }
        // Only the writer, under the lock, changes these: no read-modify-
        // write needed.
        self.len
            .store(self.len.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
        let size = Node::size(height, key.len() + key_tail.len() + value.len());
        self.bytes
            .store(self.bytes.load(Ordering::Relaxed) + size, Ordering::Relaxed);
    }
}

/// A search key, split once so that each comparison with a node reads the
/// node's key in place: its user key, its trailer, and the user key's first
/// sixteen bytes as two big-endian numbers (when it has sixteen), which
/// decide a comparison of two such keys in one or two instructions.
struct Target<'a> {
    user: &'a [u8],
    trailer: u64,
    /// Bytes 0..8 and 8..16 of `user`, big-endian; valid when `user` has
    /// at least 16 bytes.
    w: [u64; 2],
}

impl<'a> Target<'a> {
    /// The internal key `ikey` (split as [`compare_internal`] splits it,
    /// damaged short keys included).
    fn new(ikey: &'a [u8]) -> Self {
        Target::parts(user_key(ikey), trailer(ikey))
    }

    fn parts(user: &'a [u8], trailer: u64) -> Self {
        let w = user.first_chunk::<16>().map_or([0; 2], |c| {
            let (a, b) = c.split_at(8);
            [
                u64::from_be_bytes(a.try_into().expect("8 bytes")),
                u64::from_be_bytes(b.try_into().expect("8 bytes")),
            ]
        });
        Target { user, trailer, w }
    }

    /// True when the internal key `k` sorts before this key: the same as
    /// `compare_internal(k, target) == Less`.
    #[inline(always)]
    fn is_after(&self, k: &[u8]) -> bool {
        let ord = match (k.first_chunk::<16>(), self.user.len() >= 16) {
            (Some(c), true) if k.len() >= 16 + TRAILER_LEN => {
                let (a, b) = c.split_at(8);
                let a = u64::from_be_bytes(a.try_into().expect("8 bytes"));
                if a != self.w[0] {
                    return a < self.w[0];
                }
                let b = u64::from_be_bytes(b.try_into().expect("8 bytes"));
                if b != self.w[1] {
                    return b < self.w[1];
                }
                let split = k.len() - TRAILER_LEN;
                compare_bytes(&k[16..split], &self.user[16..])
            }
            _ => compare_bytes(user_key(k), self.user),
        };
        match ord {
            CmpOrdering::Less => true,
            CmpOrdering::Greater => false,
            // Newer (larger trailer) first.
            CmpOrdering::Equal => trailer(k) > self.trailer,
        }
    }
}

/// Where the writer's last insert went: at each level, the node before the
/// last inserted key's place (`prev`, the inserted node itself at the
/// levels it was linked at) and the node after it (`next`). With one
/// writer it always describes the list exactly — `next[i]` is `prev[i]`'s
/// successor at level `i` — and its brackets nest (a level's bracket lies
/// within the one above), so when the next key falls inside level `l`'s
/// bracket it falls inside every bracket above, and the search starts at
/// level `l` from `prev[l]`. A sorted run of inserts (a sorted batch,
/// sequential keys) thus costs a few comparisons each instead of a descent
/// from the top; a random key costs one or two comparisons more, with
/// nodes the last insert just read (in cache), before it descends from
/// the top.
struct Splice {
    prev: [*mut Node; MAX_HEIGHT],
    next: [*mut Node; MAX_HEIGHT],
}

/// Where a search of one list ended: its predecessor on each level, for
/// the next search to start from ([`SkipList::seek_from`]). Holds the list
/// borrowed, so it never outlives the nodes it points at.
pub struct Finger<'a> {
    list: &'a SkipList,
    prev: [*mut Node; MAX_HEIGHT],
}

impl<'a> Finger<'a> {
    /// A finger at the head of `list`.
    pub fn new(list: &'a SkipList) -> Finger<'a> {
        Finger {
            list,
            prev: [list.head; MAX_HEIGHT],
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
        self.node = self.list().find_ge(&Target::new(target), &mut || {});
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

    /// An internal key from a small alphabet, so that user keys share
    /// prefixes of every length (around the 8- and 16-byte words the
    /// comparison reads first) and repeat with other sequence numbers.
    fn arb_key() -> impl proptest::strategy::Strategy<Value = (Vec<u8>, u64, u8)> {
        use proptest::prelude::*;
        (
            prop_oneof![
                proptest::collection::vec(b'a'..b'c', 0..4),
                proptest::collection::vec(b'a'..b'c', 7..10),
                (proptest::collection::vec(b'a'..b'c', 0..3)).prop_map(|t| {
                    let mut k = b"0000000000000".to_vec();
                    k.extend(t);
                    k
                }),
                proptest::collection::vec(b'a'..b'c', 15..19),
            ],
            0u64..1000,
            0u8..3,
        )
    }

    proptest::proptest! {
        #[test]
        fn a_target_orders_as_compare_internal(
            a in proptest::collection::vec(b'a'..b'd', 0..30),
            b in proptest::collection::vec(b'a'..b'd', 0..30),
            short in proptest::collection::vec(any_byte(), 0..8),
        ) {
            for (x, y) in [(&a, &b), (&b, &a), (&a, &a), (&short, &a), (&a, &short)] {
                let want = compare_internal(x, y) == CmpOrdering::Less;
                proptest::prop_assert_eq!(Target::new(y).is_after(x), want);
            }
        }

        /// Inserts (random order, sorted runs, repeated user keys with
        /// other sequence numbers) checked against a sorted model: both
        /// iteration directions and seeks to keys held and not held.
        #[test]
        fn inserts_match_a_sorted_model(
            keys in proptest::collection::vec(arb_key(), 1..300),
            sorted_from in 0usize..300,
            seeks in proptest::collection::vec(arb_key(), 0..40),
        ) {
            // A sorted tail exercises the splice's sorted runs.
            let mut keys = keys;
            let from = sorted_from.min(keys.len());
            keys[from..].sort();
            let l = Arc::new(Own(SkipList::new()));
            let mut model: Vec<Vec<u8>> = Vec::new();
            for (i, (uk, _, t)) in keys.iter().enumerate() {
                // Distinct sequence numbers keep internal keys unique.
                let seq = i as u64 + 1;
                let ik = internal_key(uk, seq, ValueType::from_u8(*t).unwrap());
                if i % 2 == 0 {
                    l.0.insert(&ik, &seq.to_le_bytes());
                } else {
                    l.0.insert_parts(uk, crate::index::key::trailer(&ik), &seq.to_le_bytes());
                }
                model.push(ik);
            }
            model.sort_by(|a, b| compare_internal(a, b));
            proptest::prop_assert_eq!(l.0.len(), model.len());
            let mut it = SkipIter::new(l.clone());
            it.seek_to_first();
            for k in &model {
                proptest::prop_assert!(it.valid());
                proptest::prop_assert_eq!(it.key(), &k[..]);
                let seq = crate::index::key::parse_internal_key(k).unwrap().seq;
                proptest::prop_assert_eq!(it.value(), &seq.to_le_bytes()[..]);
                it.next();
            }
            proptest::prop_assert!(!it.valid());
            it.seek_to_last();
            for k in model.iter().rev() {
                proptest::prop_assert!(it.valid());
                proptest::prop_assert_eq!(it.key(), &k[..]);
                it.prev();
            }
            proptest::prop_assert!(!it.valid());
            for (uk, seq, _) in &seeks {
                let target = crate::index::key::seek_key(uk, *seq);
                let want = model
                    .iter()
                    .find(|k| compare_internal(k, &target) != CmpOrdering::Less);
                it.seek(&target);
                proptest::prop_assert_eq!(it.valid().then(|| it.key().to_vec()), want.cloned());
            }
        }
    }

    fn any_byte() -> std::ops::RangeInclusive<u8> {
        0..=255
    }

    /// Readers seek, while one writer inserts sorted runs and random keys,
    /// every key the writer has finished inserting: each must be found,
    /// and forward scans must stay in order.
    #[test]
    fn readers_find_every_key_inserted_before_they_look() {
        const N: u64 = 30_000;
        let l = Arc::new(Own(SkipList::new()));
        let done = Arc::new(AtomicUsize::new(0));
        // Key of the i-th insert: runs of 100 ascending keys, each run at
        // a scattered place.
        let key = |i: u64| {
            let run = (i / 100).wrapping_mul(2654435761) % 1_000_003;
            internal_key(
                format!("{run:010}{:06}", i % 100).as_bytes(),
                i + 1,
                ValueType::Value,
            )
        };
        let readers: Vec<_> = (0..2)
            .map(|r| {
                let (l, done) = (l.clone(), done.clone());
                std::thread::spawn(move || {
                    let mut it = SkipIter::new(l.clone());
                    let mut checked = 0u64;
                    let mut rng = 0x9e37_79b9_7f4a_7c15u64 + r;
                    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
                    // While the writer runs, and for 1000 seeks after.
                    while ((done.load(Ordering::Acquire) as u64) < N || checked < 1000)
                        && std::time::Instant::now() < deadline
                    {
                        let published = done.load(Ordering::Acquire) as u64;
                        if published == 0 {
                            std::thread::yield_now();
                            continue;
                        }
                        rng ^= rng << 13;
                        rng ^= rng >> 7;
                        rng ^= rng << 17;
                        let k = key(rng % published);
                        it.seek(&k);
                        assert!(it.valid(), "published key not found");
                        assert_eq!(it.key(), &k[..]);
                        let mut prev = it.key().to_vec();
                        for _ in 0..8 {
                            it.next();
                            if !it.valid() {
                                break;
                            }
                            assert_eq!(compare_internal(&prev, it.key()), CmpOrdering::Less);
                            prev = it.key().to_vec();
                        }
                        checked += 1;
                    }
                    checked
                })
            })
            .collect();
        for i in 0..N {
            l.0.insert(&key(i), b"v");
            done.store(i as usize + 1, Ordering::Release);
        }
        for r in readers {
            assert!(r.join().unwrap() > 0, "a reader checked nothing");
        }
        let mut it = SkipIter::new(l.clone());
        it.seek_to_first();
        let mut n = 0;
        while it.valid() {
            n += 1;
            it.next();
        }
        assert_eq!(n, N);
    }

    #[test]
    fn sorted_inserts_start_from_the_splice() {
        // Sorted keys, each after the last, need a few comparisons each;
        // a search of the same list from the top needs many more.
        let l = SkipList::new();
        for i in 0..50_000u32 {
            l.insert(&internal_key(&i.to_be_bytes(), 1, ValueType::Value), b"");
        }
        let mut n = 0;
        let mut count = || n += 1;
        let k = internal_key(&50_000u32.to_be_bytes(), 1, ValueType::Value);
        l.insert_counting(&Target::new(&k), &k, &[], b"", &mut count);
        assert!(n <= 4, "{n} comparisons for the next sorted key");
        assert!(l.search_comparisons(&k) > 10);
    }
    /// A search from a finger finds what a search from the top finds, for
    /// ascending targets (the GC batch), for targets out of order (the
    /// finger starts over) and for targets past the last key.
    #[test]
    fn finger_searches_find_what_top_searches_find() {
        let l = SkipList::new();
        for i in 0..5000u32 {
            let k = (i * 7919 % 5000) * 2;
            l.insert(
                &internal_key(&k.to_be_bytes(), 1, ValueType::Value),
                &k.to_le_bytes(),
            );
        }
        let top = |t: &[u8]| {
            let n = l.find_ge(&Target::new(t), &mut || {});
            (!n.is_null()).then(|| (l.node(n).key(), l.node(n).value()))
        };
        let mut targets: Vec<u32> = (0..3000u32).map(|i| i * 104_729 % 10_003).collect();
        targets.sort_unstable();
        let mut shuffled: Vec<u32> = (0..3000u64)
            .map(|i| (i * 15_485_863 % 10_007) as u32)
            .collect();
        shuffled.extend([0, 0, 9_998, 9_999, 20_000, 1]);
        for order in [&targets, &shuffled] {
            let mut f = Finger::new(&l);
            for t in order.iter() {
                let k = internal_key(&t.to_be_bytes(), 1, ValueType::Value);
                assert_eq!(l.seek_from(&mut f, &k), top(&k), "target {t}");
            }
        }
        // Past the last key: nothing, and the finger still serves a search.
        let mut f = Finger::new(&l);
        let past = internal_key(&20_000u32.to_be_bytes(), 1, ValueType::Value);
        assert_eq!(l.seek_from(&mut f, &past), None);
        let first = internal_key(&0u32.to_be_bytes(), 1, ValueType::Value);
        assert_eq!(l.seek_from(&mut f, &first), top(&first));
        assert!(top(&first).is_some());
    }
}
