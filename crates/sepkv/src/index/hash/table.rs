//! The FlashKey hash table (§V-A1): buckets of two nodes plus an overflow
//! chain, grouped into pages that live in memory or in a bounded
//! write-back page cache over an append-only page file.
//!
//! - **Addressing.** The primary hash `h = xxh3(key)` picks a bucket: its
//!   low 6 bits the bucket within a page of [`BUCKETS_PER_PAGE`] buckets,
//!   the next 32 bits (the node's `home`) the page. A node holds the value
//!   address (band, offset, length; `aux` bit 0 marks a delete token), the
//!   home bits and a 32-bit **key fingerprint** from a second, seeded hash.
//!   Keys are not stored: a lookup reads the record of each node whose
//!   home bits and fingerprint match (70 bits of hash with the bucket's
//!   six) until one holds the key.
//! - **Growth.** Past 90 % load (nodes ÷ two per bucket) the table doubles
//!   incrementally, by linear hashing: each later insert splits one more
//!   page of the old size into itself and its new twin (the home bits say
//!   where each node goes, so no record is read), until every page is
//!   split. A lookup of a page not yet split uses the old page count.
//! - **Pages on disk.** Pages are written to `hash-G.pages` append-only
//!   (`page := page_no:u64le n:u32le (bucket:u8 node)* crc:u32le`, node =
//!   `home:u32 fp:u32 band:u64 offset:u64 length:u32 aux:u32`, little
//!   endian), located by a page map. In disk mode at most `cache_pages`
//!   pages stay in memory; a dirty page evicted is appended to the page
//!   file and its new place noted in the working page map.
//! - **Delta records.** A page already in the file is appended as the
//!   buckets changed since its last record (a bit mask per page), a delta
//!   naming that record, so a checkpoint's bytes follow the nodes changed,
//!   not the pages touched. A page is written whole again once its chain
//!   would pass `MAX_DELTAS_MEMORY` deltas (`MAX_DELTAS_DISK` in disk mode,
//!   where a miss reads the chain) or the bytes of the whole page; a read
//!   follows the chain back to the whole image and applies the deltas.
//! - **Checkpoint** (§V-B6): every dirty page is appended, the page file
//!   synced, and then the checkpoint recorded: as an edit-log record
//!   (`HASHEDITS`: the geometry, the region of the page file written
//!   since the last checkpoint, whose records name their pages and which
//!   open reads back into the page map, and the bands state's edit), or,
//!   when the log or the regions would pass their bounds or a new page
//!   file began, as a whole `HASHMETA` (geometry,
//!   page map, the bands' replay position and state, checksummed) replaced
//!   atomically (write, sync, rename). A crash at any point leaves the
//!   previous checkpoint, whose records are untouched (records are never
//!   overwritten in place; a torn edit-log record is cut off), so recovery
//!   loads it and replays the bands after its position. When the page
//!   file holds more than four times the live records (plus
//!   `PAGE_FILE_SLACK`), the checkpoint rewrites every page whole to the
//!   next generation first.

use crate::error::{Error, IoContext, Result};
use crate::format::checksum::{crc, mask, unmask};
use crate::fs::{FileSystem, IoCategory, IoStats, RandomAccessFile, SyncHandle, WritableFile};
use crate::vstore::ValuePointer;
use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

fn mask_crc(v: &[u8]) -> u32 {
    mask(crc(v))
}

/// Buckets in one page.
pub const BUCKETS_PER_PAGE: usize = 64;
/// Bytes of an encoded node.
pub const NODE_LEN: usize = 32;
/// Load factor past which the table doubles (§V-A1).
pub const MAX_LOAD: f64 = 0.9;
/// Pages a lookup's [`Table::install`] looks at for one it may drop
/// unwritten.
const CLEAN_VICTIM_TRIES: usize = 16;
/// Name of the meta file.
pub const META: &str = "HASHMETA";
/// Name of the meta file's edit log: the bands' state as GC steps change
/// it, one record per step, each naming the `HASHMETA` it extends.
pub const EDITS: &str = "HASHEDITS";
/// Bytes of dead pages the page file may hold beyond four times its live
/// pages before a checkpoint rewrites it (was 4 MiB, which a table of a
/// few thousand nodes under churn kept as dead pages).
const PAGE_FILE_SLACK: u64 = 512 << 10;
/// Most delta records a page's image may end with in memory mode, where a
/// chain is read only at open: each checkpoint after the page's whole
/// image appends the buckets it changed, until this many deltas or the
/// size of the whole page.
const MAX_DELTAS_MEMORY: u32 = 8;
/// The same in disk mode, where a page missing from the cache is read
/// through its chain, one read per record.
const MAX_DELTAS_DISK: u32 = 2;
/// Bytes of page records the edit log's checkpoints may name, at least,
/// before a checkpoint writes `HASHMETA` whole; beyond it, the bytes of
/// the table's pages written whole.
const REGIONS_MIN_COMPACT: u64 = 1 << 20;
/// Smallest size the edit log may reach before an edit rewrites
/// `HASHMETA` whole instead (bytes); beyond it, the size of `HASHMETA`.
const EDITS_MIN_COMPACT: u64 = 64 << 10;

/// Keys that begin with these bytes all hash alike, primary and
/// fingerprint, in the crate's test builds: tests reach the paths of true
/// collisions through them.
#[cfg(test)]
pub(crate) const COLLIDING_PREFIX: &[u8] = b"\xffcollide:";

/// Hashes of a key: `(primary, fingerprint)`.
pub fn hash_key(key: &[u8]) -> (u64, u32) {
    #[cfg(test)]
    if key.starts_with(COLLIDING_PREFIX) {
        return (0x0123_4567_89ab_cdef, 0x5eed_5eed);
    }
    let h = xxhash_rust::xxh3::xxh3_64(key);
    let fp = xxhash_rust::xxh3::xxh3_64_with_seed(key, 0x5e9_f1a5) as u32;
    (h, fp)
}

/// One node: a key's value address, home bits and fingerprint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Node {
    /// Bits 6..38 of the primary hash (the page, at any table size).
    pub home: u32,
    /// Key fingerprint (secondary hash).
    pub fp: u32,
    /// Where the key's newest version is.
    pub ptr: ValuePointer,
}

impl Node {
    fn is_empty(&self) -> bool {
        self.ptr.file_id == 0
    }

    fn encode_to(&self, v: &mut Vec<u8>) {
        v.extend_from_slice(&self.home.to_le_bytes());
        v.extend_from_slice(&self.fp.to_le_bytes());
        v.extend_from_slice(&self.ptr.file_id.to_le_bytes());
        v.extend_from_slice(&self.ptr.offset.to_le_bytes());
        v.extend_from_slice(&self.ptr.length.to_le_bytes());
        v.extend_from_slice(&(self.ptr.aux as u32).to_le_bytes());
    }

    fn decode(b: &[u8]) -> Node {
        let w4 = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().expect("4 bytes"));
        let w8 = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
        Node {
            home: w4(0),
            fp: w4(4),
            ptr: ValuePointer {
                file_id: w8(8),
                offset: w8(16),
                length: w4(24),
                aux: w4(28) as u64,
            },
        }
    }
}

/// A bucket: two nodes in the table, then an overflow chain.
#[derive(Debug, Clone, Default)]
struct Bucket {
    nodes: [Node; 2],
    chain: Vec<Node>,
}

impl Bucket {
    fn iter(&self) -> impl Iterator<Item = &Node> {
        self.nodes
            .iter()
            .filter(|n| !n.is_empty())
            .chain(self.chain.iter())
    }

    fn insert(&mut self, n: Node) {
        match self.nodes.iter_mut().find(|x| x.is_empty()) {
            Some(slot) => *slot = n,
            None => self.chain.push(n),
        }
    }

    fn find_mut(&mut self, ptr: &ValuePointer) -> Option<&mut Node> {
        self.nodes
            .iter_mut()
            .chain(self.chain.iter_mut())
            .find(|n| !n.is_empty() && n.ptr == *ptr)
    }

    fn remove(&mut self, ptr: &ValuePointer) -> bool {
        if let Some(i) = self.chain.iter().position(|n| n.ptr == *ptr) {
            self.chain.remove(i);
            return true;
        }
        for i in 0..2 {
            if !self.nodes[i].is_empty() && self.nodes[i].ptr == *ptr {
                // The chain's head moves up into the table.
                self.nodes[i] = if self.chain.is_empty() {
                    Node::default()
                } else {
                    self.chain.remove(0)
                };
                return true;
            }
        }
        false
    }
}

/// The delta records a page's image in the page file ends with, since its
/// last whole image.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Chain {
    /// Delta records after the whole image.
    depth: u32,
    /// Their bytes.
    bytes: u64,
}

/// Bit of a record's `page_no` field that marks a delta record.
const DELTA_FLAG: u64 = 1 << 63;
/// Bytes of a delta record before its nodes.
const DELTA_HEADER: usize = 36;

/// A record of the page file, decoded.
enum Image {
    /// A whole page.
    Full(Page),
    /// The buckets of `mask` replaced by `nodes` (bucket, node), over the
    /// image at `prev`, which has `depth − 1` delta records.
    Delta {
        prev: (u64, u32),
        depth: u32,
        mask: u64,
        nodes: Vec<(u8, Node)>,
    },
}

/// A page of buckets.
#[derive(Debug, Clone)]
pub struct Page {
    buckets: Vec<Bucket>,
    /// The delta records of the page file image this page was read from
    /// (or last written as).
    chain: Chain,
}

impl Page {
    fn new() -> Page {
        Page {
            buckets: vec![Bucket::default(); BUCKETS_PER_PAGE],
            chain: Chain::default(),
        }
    }

    fn nodes(&self) -> usize {
        self.buckets.iter().map(|b| b.iter().count()).sum()
    }

    /// A delta record: the buckets of `mask`, whole, over the image at
    /// `prev` of `depth − 1` delta records.
    ///
    /// ```text
    /// delta := page_no|2^63:u64le prev_off:u64le prev_len:u32le depth:u32le
    ///          mask:u64le n:u32le (bucket:u8 node){n} crc:u32le
    /// ```
    fn encode_delta(&self, page_no: u64, prev: (u64, u32), depth: u32, mask: u64) -> Vec<u8> {
        let mut v = Vec::with_capacity(DELTA_HEADER + 4 + 4 * (NODE_LEN + 1));
        v.extend_from_slice(&(page_no | DELTA_FLAG).to_le_bytes());
        v.extend_from_slice(&prev.0.to_le_bytes());
        v.extend_from_slice(&prev.1.to_le_bytes());
        v.extend_from_slice(&depth.to_le_bytes());
        v.extend_from_slice(&mask.to_le_bytes());
        v.extend_from_slice(&0u32.to_le_bytes());
        let mut n = 0u32;
        for (i, b) in self.buckets.iter().enumerate() {
            if mask & (1 << i) != 0 {
                for node in b.iter() {
                    v.push(i as u8);
                    node.encode_to(&mut v);
                    n += 1;
                }
            }
        }
        v[32..36].copy_from_slice(&n.to_le_bytes());
        let c = mask_crc(&v);
        v.extend_from_slice(&c.to_le_bytes());
        v
    }

    /// Decodes a record of page `page_no`: a whole page or a delta.
    fn decode_image(b: &[u8], page_no: u64) -> Option<Image> {
        if b.len() < 16 {
            return None;
        }
        let body = &b[..b.len() - 4];
        let stored = unmask(u32::from_le_bytes(b[b.len() - 4..].try_into().ok()?));
        if crc(body) != stored {
            return None;
        }
        let no = u64::from_le_bytes(body[0..8].try_into().ok()?);
        if no == page_no {
            return Page::decode(b, page_no).map(Image::Full);
        }
        if no != page_no | DELTA_FLAG || body.len() < DELTA_HEADER {
            return None;
        }
        let w4 = |i: usize| u32::from_le_bytes(body[i..i + 4].try_into().expect("4 bytes"));
        let w8 = |i: usize| u64::from_le_bytes(body[i..i + 8].try_into().expect("8 bytes"));
        let (prev, depth, mask) = ((w8(8), w4(16)), w4(20), w8(24));
        let n = w4(32) as usize;
        if depth == 0 || prev.1 == 0 || body.len() != DELTA_HEADER + n.checked_mul(NODE_LEN + 1)? {
            return None;
        }
        let mut nodes = Vec::with_capacity(n);
        for i in 0..n {
            let at = DELTA_HEADER + i * (NODE_LEN + 1);
            let bucket = body[at];
            let node = Node::decode(&body[at + 1..at + 1 + NODE_LEN]);
            if bucket as usize >= BUCKETS_PER_PAGE || mask & (1 << bucket) == 0 || node.is_empty() {
                return None;
            }
            nodes.push((bucket, node));
        }
        Some(Image::Delta {
            prev,
            depth,
            mask,
            nodes,
        })
    }

    /// Replaces the buckets of `mask` by `nodes`.
    fn apply_delta(&mut self, mask: u64, nodes: &[(u8, Node)]) {
        for (i, b) in self.buckets.iter_mut().enumerate() {
            if mask & (1 << i) != 0 {
                *b = Bucket::default();
            }
        }
        for (bucket, node) in nodes {
            self.buckets[*bucket as usize].insert(*node);
        }
    }

    fn encode(&self, page_no: u64) -> Vec<u8> {
        let n = self.nodes();
        let mut v = Vec::with_capacity(16 + n * (NODE_LEN + 1));
        v.extend_from_slice(&page_no.to_le_bytes());
        v.extend_from_slice(&(n as u32).to_le_bytes());
        for (i, b) in self.buckets.iter().enumerate() {
            for node in b.iter() {
                v.push(i as u8);
                node.encode_to(&mut v);
            }
        }
        let c = mask_crc(&v);
        v.extend_from_slice(&c.to_le_bytes());
        v
    }

    fn decode(b: &[u8], page_no: u64) -> Option<Page> {
        if b.len() < 16 {
            return None;
        }
        let body = &b[..b.len() - 4];
        let stored = unmask(u32::from_le_bytes(b[b.len() - 4..].try_into().ok()?));
        if crc(body) != stored || u64::from_le_bytes(body[0..8].try_into().ok()?) != page_no {
            return None;
        }
        let n = u32::from_le_bytes(body[8..12].try_into().ok()?) as usize;
        if body.len() != 12 + n.checked_mul(NODE_LEN + 1)? {
            return None;
        }
        let mut p = Page::new();
        for i in 0..n {
            let at = 12 + i * (NODE_LEN + 1);
            let bucket = body[at] as usize;
            if bucket >= BUCKETS_PER_PAGE {
                return None;
            }
            let node = Node::decode(&body[at + 1..at + 1 + NODE_LEN]);
            if node.is_empty() {
                return None;
            }
            p.buckets[bucket].insert(node);
        }
        Some(p)
    }

    /// Nodes of `h`'s bucket whose home bits are `h`'s and whose
    /// fingerprint is `fp` (70 bits of the key's hashes), in bucket order.
    pub fn candidates(&self, h: u64, fp: u32) -> Vec<Node> {
        let home = (h >> 6) as u32;
        self.buckets[(h as usize) % BUCKETS_PER_PAGE]
            .iter()
            .filter(|n| n.fp == fp && n.home == home)
            .copied()
            .collect()
    }

    fn bytes_estimate(&self) -> usize {
        std::mem::size_of::<Bucket>() * BUCKETS_PER_PAGE
            + self
                .buckets
                .iter()
                .map(|b| b.chain.capacity() * NODE_LEN)
                .sum::<usize>()
    }
}

struct Cached {
    page: Page,
    /// Buckets changed since the page's last written image (bit `i`:
    /// bucket `i`); all set for a page whose buckets all moved (a split).
    changed: u64,
    /// Second chance: set by every use, under the table's lock for reading.
    referenced: AtomicBool,
}

/// Geometry and where every page is: what a checkpoint records.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Meta {
    /// Pages before the current doubling began (a power of two).
    pub base_pages: u64,
    /// Pages of the old size already split.
    pub split: u64,
    /// Nodes in the table.
    pub count: u64,
    /// Generation of the page file.
    pub generation: u64,
    /// `(offset, length)` of each page in the page file; `(0, 0)` for a page
    /// never written (empty).
    pub map: Vec<(u64, u32)>,
    /// Bands position replay starts at.
    pub ckpt: (u64, u64),
    /// The bands' persisted state.
    pub bands_state: Vec<u8>,
}

const META_MAGIC: &[u8; 8] = b"SKVHMETA";

impl Meta {
    fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(64 + self.map.len() * 12 + self.bands_state.len());
        v.extend_from_slice(META_MAGIC);
        for w in [
            self.base_pages,
            self.split,
            self.count,
            self.generation,
            self.ckpt.0,
            self.ckpt.1,
            self.map.len() as u64,
        ] {
            v.extend_from_slice(&w.to_le_bytes());
        }
        for (o, l) in &self.map {
            v.extend_from_slice(&o.to_le_bytes());
            v.extend_from_slice(&l.to_le_bytes());
        }
        v.extend_from_slice(&(self.bands_state.len() as u32).to_le_bytes());
        v.extend_from_slice(&self.bands_state);
        let c = mask(crc(&v));
        v.extend_from_slice(&c.to_le_bytes());
        v
    }

    #[cfg(test)]
    pub(crate) fn encode_for_test(&self) -> Vec<u8> {
        self.encode()
    }

    /// Decodes a meta file; `None` when damaged or inconsistent.
    pub fn decode(b: &[u8]) -> Option<Meta> {
        if b.len() < 8 + 56 + 8 || &b[..8] != META_MAGIC {
            return None;
        }
        let body = &b[..b.len() - 4];
        if crc(body) != unmask(u32::from_le_bytes(b[b.len() - 4..].try_into().ok()?)) {
            return None;
        }
        let w = |i: usize| -> Option<u64> {
            Some(u64::from_le_bytes(body.get(i..i + 8)?.try_into().ok()?))
        };
        let (base, split, count, generation) = (w(8)?, w(16)?, w(24)?, w(32)?);
        let ckpt = (w(40)?, w(48)?);
        let n = w(56)? as usize;
        if !base.is_power_of_two()
            || split > base
            || n as u64 != base + split
            || n > body.len() / 12
        {
            return None;
        }
        let mut map = Vec::with_capacity(n);
        let mut at = 64;
        for _ in 0..n {
            let off = w(at)?;
            let len = u32::from_le_bytes(body.get(at + 8..at + 12)?.try_into().ok()?);
            map.push((off, len));
            at += 12;
        }
        let sl = u32::from_le_bytes(body.get(at..at + 4)?.try_into().ok()?) as usize;
        let bands_state = body.get(at + 4..at + 4 + sl)?.to_vec();
        (at + 4 + sl == body.len()).then_some(Meta {
            base_pages: base,
            split,
            count,
            generation,
            map,
            ckpt,
            bands_state,
        })
    }
}

/// First byte of a checkpoint's edit in the edit log (a GC step's edit of
/// the bands state begins with 1).
const CHECKPOINT_EDIT: u8 = 2;

/// The edit that turns the checkpoint `from` into `to`, of the same page
/// file generation, whose page records since `from` are the bytes
/// `region` of the page file: the geometry, the region (each record in it
/// names its page, so the page map's changes are read from it at open)
/// and the bands state's edit. `None` when the generations differ or a
/// bands state does not decode (the meta is then written whole).
///
/// ```text
/// edit := 0x02 base_pages:u64le split:u64le count:u64le ckpt_band:u64le ckpt_off:u64le
///         n_pages:u64le region_start:u64le region_end:u64le state_len:u32le state_edit
/// ```
fn checkpoint_edit(from: &Meta, to: &Meta, region: (u64, u64)) -> Option<Vec<u8>> {
    if from.generation != to.generation || to.map.len() < from.map.len() {
        return None;
    }
    let state = crate::vstore::index_log::state_edit(&from.bands_state, &to.bands_state)?;
    let mut v = Vec::with_capacity(69 + state.len());
    v.push(CHECKPOINT_EDIT);
    for w in [
        to.base_pages,
        to.split,
        to.count,
        to.ckpt.0,
        to.ckpt.1,
        to.map.len() as u64,
        region.0,
        region.1,
    ] {
        v.extend_from_slice(&w.to_le_bytes());
    }
    v.extend_from_slice(&(state.len() as u32).to_le_bytes());
    v.extend_from_slice(&state);
    Some(v)
}

/// Applies a [`checkpoint_edit`] to `meta` but for its page map, and
/// returns its region of the page file; `None` when it is malformed or
/// does not fit (a smaller table, an empty or backward region).
fn apply_checkpoint_edit(meta: &mut Meta, e: &[u8]) -> Option<(u64, u64)> {
    let w8 =
        |i: usize| -> Option<u64> { Some(u64::from_le_bytes(e.get(i..i + 8)?.try_into().ok()?)) };
    if e.first() != Some(&CHECKPOINT_EDIT) {
        return None;
    }
    let (base, split, count) = (w8(1)?, w8(9)?, w8(17)?);
    let ckpt = (w8(25)?, w8(33)?);
    let n = w8(41)?;
    let region = (w8(49)?, w8(57)?);
    if !base.is_power_of_two()
        || split > base
        || n != base + split
        || n < meta.map.len() as u64
        || region.0 > region.1
    {
        return None;
    }
    let sl = u32::from_le_bytes(e.get(65..69)?.try_into().ok()?) as usize;
    let state = e.get(69..69 + sl)?;
    if 69 + sl != e.len() {
        return None;
    }
    let bands_state = crate::vstore::index_log::apply_state_edit(&meta.bands_state, state)?;
    meta.base_pages = base;
    meta.split = split;
    meta.count = count;
    meta.ckpt = ckpt;
    meta.map.resize(n as usize, (0, 0));
    meta.bands_state = bands_state;
    Some(region)
}

/// Notes in `map` the place of every page record in `region` of the page
/// file, in file order (a later record of a page supersedes an earlier).
///
/// # Errors
/// `Corruption` (the page file and the record's offset) for a record that
/// is damaged, cut short or names a page beyond the map; `Io`.
fn scan_region(
    reader: &dyn RandomAccessFile,
    path: &Path,
    stats: &IoStats,
    region: (u64, u64),
    map: &mut [(u64, u32)],
) -> Result<()> {
    let len = region.1 - region.0;
    let mut b = vec![
        0u8;
        usize::try_from(len).map_err(|_| Error::corruption(
            path,
            region.0,
            "hash-table page region too large"
        ))?
    ];
    reader.read_exact_at(region.0, &mut b).ctx(path)?;
    stats.add_read(IoCategory::Manifest, len);
    let mut at = 0usize;
    while at < b.len() {
        let off = region.0 + at as u64;
        let damaged = || Error::corruption(path, off, "hash-table page record damaged");
        let rest = &b[at..];
        let no_field = u64::from_le_bytes(
            rest.get(..8)
                .ok_or_else(damaged)?
                .try_into()
                .expect("8 bytes"),
        );
        let (no, head) = if no_field & DELTA_FLAG != 0 {
            (no_field & !DELTA_FLAG, DELTA_HEADER)
        } else {
            (no_field, 12)
        };
        let n = u32::from_le_bytes(
            rest.get(head - 4..head)
                .ok_or_else(damaged)?
                .try_into()
                .expect("4 bytes"),
        ) as usize;
        let rec_len = n
            .checked_mul(NODE_LEN + 1)
            .and_then(|x| x.checked_add(head + 4))
            .ok_or_else(damaged)?;
        let rec = rest.get(..rec_len).ok_or_else(damaged)?;
        if usize::try_from(no).map_or(true, |no| no >= map.len())
            || Page::decode_image(rec, no).is_none()
        {
            return Err(damaged());
        }
        map[no as usize] = (off, rec_len as u32);
        at += rec_len;
    }
    Ok(())
}

/// An edit-log record: `len:u32le crc:u32le base:u64le edit`.
fn edit_record(base: u64, edit: &[u8]) -> Vec<u8> {
    let mut body = base.to_le_bytes().to_vec();
    body.extend_from_slice(edit);
    let mut rec = Vec::with_capacity(8 + body.len());
    rec.extend_from_slice(&(body.len() as u32).to_le_bytes());
    rec.extend_from_slice(&mask(crc(&body)).to_le_bytes());
    rec.extend_from_slice(&body);
    rec
}

/// Figures of the table for `stats`.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct TableFigures {
    /// Buckets in use (pages × 64).
    pub buckets: u64,
    /// Nodes (keys) stored.
    pub nodes: u64,
    /// `nodes / (2 × buckets)`.
    pub load: f64,
    /// Buckets with an overflow chain, among cached pages.
    pub overflow_chains: u64,
    /// Nodes in overflow chains, among cached pages.
    pub overflow_nodes: u64,
    /// Pages in memory.
    pub cached_pages: u64,
    /// Dirty pages in memory.
    pub dirty_pages: u64,
    /// True while a doubling is under way.
    pub resizing: bool,
}

/// The hash table. Not synchronised: the index wraps it in a lock.
pub struct Table {
    dir: Arc<Path>,
    fs: Arc<dyn FileSystem>,
    stats: Arc<IoStats>,
    /// Most pages kept in memory (`usize::MAX` in memory mode).
    cache_pages: usize,
    meta: Meta,
    /// The meta of the last checkpoint (what `HASHMETA` and the edit log
    /// hold together).
    durable: Meta,
    /// xxh3 of the bytes of `HASHMETA`: the edits that extend it name it.
    base_hash: u64,
    /// Bytes of `HASHMETA`.
    base_len: u64,
    /// Bytes of the edit log.
    edits_len: u64,
    /// A page file of an older generation, removed after the next meta.
    pending_remove: Option<PathBuf>,
    cache: HashMap<u64, Cached>,
    order: VecDeque<u64>,
    /// The page file's appender; a mutex only so that the table can be
    /// shared for reading (it is used with the table held for writing).
    writer: parking_lot::Mutex<Box<dyn WritableFile>>,
    reader: Arc<dyn RandomAccessFile>,
    file_len: u64,
    /// A doubling is under way: each insert splits one page.
    resizing: bool,
    /// Most delta records a page's image may end with before the page is
    /// written whole again.
    max_deltas: u32,
    /// Bytes of the delta records of the pages' images, as far as known
    /// (those of pages read since open and those written).
    live_delta_bytes: u64,
    /// Where the page records the next checkpoint's region holds begin:
    /// the end of the last checkpoint's, or of the file at open (what lies
    /// beyond a durable checkpoint then is no checkpoint's).
    region_start: u64,
    /// Bytes of the regions the edit log's checkpoints name, which open
    /// reads.
    regions_len: u64,
}

/// Where [`Table::probe`] finds a bucket.
pub enum Probe {
    /// The page is in memory: the bucket's nodes with the fingerprint.
    Found(Vec<Node>),
    /// The page is on disk, to be read without the table's lock.
    Read(PageRead),
    /// The page was never written: [`Table::candidates`] makes it.
    Load,
}

/// A page's image in the page file, as [`Table::probe`] found it.
pub struct PageRead {
    no: u64,
    generation: u64,
    off: u64,
    len: u32,
    reader: Arc<dyn RandomAccessFile>,
    /// The directory, for the page file's path in an error.
    dir: Arc<Path>,
    stats: Arc<IoStats>,
}

impl PageRead {
    /// Reads and checks the page. The handle stays valid when a page-file
    /// rewrite removes the file meanwhile.
    ///
    /// # Errors
    /// `Corruption` (page file and offset) for a damaged page; `Io`.
    pub fn read(&self) -> Result<Page> {
        let path = || pages_path(&self.dir, self.generation);
        read_page(
            &*self.reader,
            path,
            &self.stats,
            self.no,
            self.off,
            self.len,
        )
    }
}

/// Reads and checks page `no` at `off`; `path` names the page file in an
/// error (made only then).
fn read_page(
    reader: &dyn RandomAccessFile,
    path: impl Fn() -> PathBuf,
    stats: &IoStats,
    no: u64,
    off: u64,
    len: u32,
) -> Result<Page> {
    // Newest first: delta records back to the whole image.
    let mut deltas = Vec::new();
    let (mut at, mut l) = (off, len);
    let mut chain = Chain::default();
    let mut page = loop {
        let here = at;
        let damaged = || Error::corruption(path(), here, format!("hash-table page {no} damaged"));
        let mut b = vec![0u8; l as usize];
        if let Err(e) = reader.read_exact_at(at, &mut b) {
            return Err(e).ctx(&path());
        }
        stats.add_read(IoCategory::UserRead, l as u64);
        match Page::decode_image(&b, no).ok_or_else(damaged)? {
            Image::Full(p) => break p,
            Image::Delta {
                prev,
                depth,
                mask,
                nodes,
            } => {
                // Each delta names an older record, one delta fewer deep.
                let expect = deltas.len() as u32;
                if prev.0 >= at || (expect > 0 && depth + expect != chain.depth) {
                    return Err(damaged());
                }
                if expect == 0 {
                    chain.depth = depth;
                }
                chain.bytes += l as u64;
                deltas.push((mask, nodes));
                (at, l) = prev;
                if deltas.len() as u32 > chain.depth {
                    return Err(damaged());
                }
            }
        }
    };
    if deltas.len() as u32 != chain.depth {
        return Err(Error::corruption(
            path(),
            off,
            format!("hash-table page {no} damaged"),
        ));
    }
    for (mask, nodes) in deltas.iter().rev() {
        page.apply_delta(*mask, nodes);
    }
    page.chain = chain;
    Ok(page)
}

/// The meta file's place, written without the table's lock.
pub struct MetaFile {
    fs: Arc<dyn FileSystem>,
    path: PathBuf,
    stats: Arc<IoStats>,
}

impl MetaFile {
    /// Replaces the meta file by `meta` atomically (write, sync, rename),
    /// then removes the edit log, whose records extend the replaced file
    /// (were the removal lost in a crash, they name that file and are
    /// passed over).
    ///
    /// # Errors
    /// `Io`; the file then holds its previous content.
    pub fn write(&self, meta: &Meta) -> Result<()> {
        let b = meta.encode();
        crate::fs::write_atomic(self.fs.as_ref(), &self.path, &b).ctx(&self.path)?;
        self.stats.add_written(IoCategory::Manifest, b.len() as u64);
        let edits = self.edits_path();
        if self.fs.exists(&edits) {
            self.fs.remove(&edits).ctx(&edits)?;
        }
        Ok(())
    }

    fn edits_path(&self) -> PathBuf {
        self.path.with_file_name(EDITS)
    }

    /// Appends one record to the edit log and syncs it (creating the log,
    /// and syncing its directory, when there is none).
    ///
    /// # Errors
    /// `Io`; the record may then be torn, and the next open passes over it.
    fn append_edit(&self, rec: &[u8]) -> Result<()> {
        let path = self.edits_path();
        let mut f = if self.fs.exists(&path) {
            self.fs.open_append(&path).ctx(&path)?
        } else {
            let f = self.fs.create(&path).ctx(&path)?;
            if let Some(dir) = path.parent() {
                self.fs.sync_dir(dir).ctx(dir)?;
            }
            f
        };
        f.append(rec)
            .and_then(|_| f.flush())
            .and_then(|_| f.sync())
            .ctx(&path)?;
        self.stats
            .add_written(IoCategory::Manifest, rec.len() as u64);
        Ok(())
    }
}

/// A new bands state on its way to disk ([`Table::with_bands_state`]): an
/// edit-log record, or a whole meta file.
pub struct StateWrite {
    meta: Meta,
    /// The record to append; `None`: write `meta` whole.
    edit: Option<Vec<u8>>,
    file: MetaFile,
}

impl StateWrite {
    /// Appends the edit (synced), or replaces `HASHMETA`.
    ///
    /// # Errors
    /// `Io`; the previous state then stays in force.
    pub fn write(&self) -> Result<()> {
        match &self.edit {
            Some(rec) => self.file.append_edit(rec),
            None => self.file.write(&self.meta),
        }
    }
}

/// Applies to `meta` the records of the edit log in `dir` that extend the
/// `HASHMETA` whose bytes hash to `base`, in order (a checkpoint's record
/// but for its page map: its region of the page file goes to `regions`,
/// for [`scan_region`]); returns the log's
/// length when any record does (0 otherwise: the log is stale and goes;
/// `u64::MAX` when a torn record ends it).
///
/// ```text
/// HASHEDITS := record*
/// record    := len:u32le crc:u32le body          (crc: masked CRC-32C of body)
/// body      := base:u64le edit                   (base: xxh3 of the HASHMETA it extends;
///                                                 edit: vstore/index_log state_edit)
/// ```
///
/// A record cut short at the end of the log (a crash while it was
/// appended, before its GC step went on) ends it.
///
/// # Errors
/// `Corruption` (the log and the record's offset) for a damaged record
/// before the end, or an edit that does not apply; `Io`.
fn read_edits(
    fs: &dyn FileSystem,
    dir: &Path,
    stats: &IoStats,
    base: u64,
    meta: &mut Meta,
    regions: &mut Vec<(u64, u64)>,
) -> Result<u64> {
    let path = dir.join(EDITS);
    if !fs.exists(&path) {
        return Ok(0);
    }
    let b = crate::fs::read_all(fs, &path).ctx(&path)?;
    stats.add_read(IoCategory::Manifest, b.len() as u64);
    let mut pos = 0usize;
    let mut applied = false;
    while pos + 8 <= b.len() {
        let len = u32::from_le_bytes(b[pos..pos + 4].try_into().expect("4 bytes")) as usize;
        let sum = u32::from_le_bytes(b[pos + 4..pos + 8].try_into().expect("4 bytes"));
        let Some(body) = b.get(pos + 8..pos + 8 + len) else {
            break;
        };
        if len < 8 || crc(body) != unmask(sum) {
            if pos + 8 + len == b.len() {
                break;
            }
            return Err(Error::corruption(
                &path,
                pos as u64,
                "hash-table edit damaged",
            ));
        }
        let rec_base = u64::from_le_bytes(body[..8].try_into().expect("8 bytes"));
        if rec_base == base {
            let edit = &body[8..];
            let ok = if edit.first() == Some(&CHECKPOINT_EDIT) {
                apply_checkpoint_edit(meta, edit)
                    .map(|r| regions.push(r))
                    .is_some()
            } else {
                match crate::vstore::index_log::apply_state_edit(&meta.bands_state, edit) {
                    Some(state) => {
                        meta.bands_state = state;
                        true
                    }
                    None => false,
                }
            };
            if !ok {
                return Err(Error::corruption(
                    &path,
                    pos as u64,
                    "hash-table edit does not apply",
                ));
            }
            applied = true;
        }
        pos += 8 + len;
    }
    if !applied {
        fs.remove(&path).ctx(&path)?;
        return Ok(0);
    }
    if pos < b.len() {
        // A torn record ends the log: the log is folded into `HASHMETA`
        // before anything is appended after it.
        return Ok(u64::MAX);
    }
    Ok(b.len() as u64)
}

/// What is left of a checkpoint once its pages are appended
/// ([`Table::checkpoint_write`]).
pub struct CheckpointSync {
    handle: Option<Box<dyn SyncHandle>>,
    pages: PathBuf,
    meta: Meta,
    /// The edit-log record to append; `None`: write `meta` whole.
    edit: Option<Vec<u8>>,
    /// The page file's length when the checkpoint's records were written.
    region_end: u64,
    file: MetaFile,
}

/// A checkpoint made durable ([`CheckpointSync::finish`]), for
/// [`Table::checkpoint_done`].
pub struct Checkpointed {
    meta: Meta,
    /// Bytes appended to the edit log; `None`: `HASHMETA` was written whole.
    edit_len: Option<u64>,
    /// The page file's length when the checkpoint's records were written.
    region_end: u64,
}

impl CheckpointSync {
    /// Syncs the page file, then records the checkpoint naming its pages —
    /// an edit appended to the edit log (synced), or `HASHMETA` whole —
    /// for [`Table::checkpoint_done`].
    ///
    /// # Errors
    /// `Io`; the previous checkpoint then stays in force (a torn edit is
    /// cut off at the next open).
    pub fn finish(self) -> Result<Checkpointed> {
        if let Some(h) = &self.handle {
            h.sync().ctx(&self.pages)?;
        }
        match &self.edit {
            Some(rec) => self.file.append_edit(rec)?,
            None => self.file.write(&self.meta)?,
        }
        Ok(Checkpointed {
            edit_len: self.edit.as_ref().map(|r| r.len() as u64),
            region_end: self.region_end,
            meta: self.meta,
        })
    }
}

/// Every page of the working page map, checked without the table's lock.
pub struct PageCheck {
    map: Vec<(u64, u32)>,
    reader: Arc<dyn RandomAccessFile>,
    path: PathBuf,
    stats: Arc<IoStats>,
}

impl PageCheck {
    /// Reads and checks every page; returns the pages checked and the
    /// faults (file and offset).
    pub fn run(&self) -> (u64, Vec<Error>) {
        let mut faults = Vec::new();
        let mut n = 0;
        for (no, &(off, len)) in self.map.iter().enumerate() {
            if len == 0 {
                continue;
            }
            n += 1;
            let path = || self.path.clone();
            if let Err(e) = read_page(&*self.reader, path, &self.stats, no as u64, off, len) {
                faults.push(e);
            }
        }
        (n, faults)
    }
}

fn pages_path(dir: &Path, generation: u64) -> PathBuf {
    dir.join(format!("hash-{generation:06}.pages"))
}

impl Table {
    /// Opens the table in `dir` from its meta file (a new, empty table of
    /// `initial_pages` pages when there is none). Returns the table and
    /// whether a meta file existed.
    ///
    /// # Errors
    /// `Corruption` for a damaged meta file; `Io`.
    pub fn open(
        dir: &Path,
        fs: Arc<dyn FileSystem>,
        stats: Arc<IoStats>,
        cache_pages: usize,
        initial_pages: u64,
    ) -> Result<(Table, bool)> {
        let meta_path = dir.join(META);
        let (mut base_hash, mut base_len, mut edits_len) = (0, 0, 0);
        let mut regions = Vec::new();
        let (mut meta, existed) = if fs.exists(&meta_path) {
            let b = crate::fs::read_all(fs.as_ref(), &meta_path).ctx(&meta_path)?;
            stats.add_read(IoCategory::Manifest, b.len() as u64);
            let mut m = Meta::decode(&b)
                .ok_or_else(|| Error::corruption(&meta_path, 0, "hash-table meta damaged"))?;
            base_hash = xxhash_rust::xxh3::xxh3_64(&b);
            base_len = b.len() as u64;
            edits_len = read_edits(fs.as_ref(), dir, &stats, base_hash, &mut m, &mut regions)?;
            (m, true)
        } else {
            let base = initial_pages.max(1).next_power_of_two();
            (
                Meta {
                    base_pages: base,
                    generation: 1,
                    map: vec![(0, 0); base as usize],
                    ..Default::default()
                },
                false,
            )
        };
        // Page files of other generations are leftovers of a compaction.
        for name in fs.list(dir).ctx(dir)? {
            if let Some(g) = name
                .strip_prefix("hash-")
                .and_then(|n| n.strip_suffix(".pages"))
                .and_then(|n| n.parse::<u64>().ok())
            {
                if g != meta.generation {
                    let p = dir.join(&name);
                    fs.remove(&p).ctx(&p)?;
                }
            }
        }
        let path = pages_path(dir, meta.generation);
        let writer = if fs.exists(&path) {
            fs.open_append(&path).ctx(&path)?
        } else {
            let f = fs.create(&path).ctx(&path)?;
            fs.sync_dir(dir).ctx(dir)?;
            f
        };
        let file_len = writer.len();
        let reader: Arc<dyn RandomAccessFile> = Arc::from(fs.open_read(&path).ctx(&path)?);
        // The checkpoints since `HASHMETA` name the page records they
        // wrote by their region of the page file.
        let mut regions_len = 0;
        for &r in &regions {
            if r.1 > file_len {
                return Err(Error::corruption(
                    &path,
                    r.0,
                    "hash-table page region beyond the page file",
                ));
            }
            scan_region(&*reader, &path, &stats, r, &mut meta.map)?;
            regions_len += r.1 - r.0;
        }
        if edits_len == u64::MAX {
            // Rewritten whole, so that no record follows the torn one.
            let file = MetaFile {
                fs: Arc::clone(&fs),
                path: meta_path.clone(),
                stats: Arc::clone(&stats),
            };
            file.write(&meta)?;
            let b = meta.encode();
            base_hash = xxhash_rust::xxh3::xxh3_64(&b);
            base_len = b.len() as u64;
            edits_len = 0;
            regions_len = 0;
        }
        let resizing = meta.split > 0;
        Ok((
            Table {
                dir: Arc::from(dir),
                fs,
                stats,
                cache_pages: cache_pages.max(4),
                durable: meta.clone(),
                base_hash,
                base_len,
                edits_len,
                pending_remove: None,
                meta,
                cache: HashMap::new(),
                order: VecDeque::new(),
                writer: parking_lot::Mutex::new(writer),
                reader,
                file_len,
                resizing,
                max_deltas: if cache_pages == usize::MAX {
                    MAX_DELTAS_MEMORY
                } else {
                    MAX_DELTAS_DISK
                },
                live_delta_bytes: 0,
                region_start: file_len,
                regions_len,
            },
            existed,
        ))
    }

    /// The replay position and bands state of the last checkpoint.
    pub fn checkpoint_state(&self) -> ((u64, u64), &[u8]) {
        (self.meta.ckpt, &self.meta.bands_state)
    }

    fn path(&self) -> PathBuf {
        pages_path(&self.dir, self.meta.generation)
    }

    /// Page holding primary hash `h`.
    fn page_of(&self, h: u64) -> u64 {
        let home = (h >> 6) as u32 as u64;
        let base = self.meta.base_pages;
        let p = home & (base - 1);
        if p < self.meta.split {
            home & (2 * base - 1)
        } else {
            p
        }
    }

    fn page_of_home(&self, home: u32) -> u64 {
        self.page_of((home as u64) << 6)
    }

    /// Loads page `no` into the cache (evicting others when full).
    fn load(&mut self, no: u64) -> Result<&mut Cached> {
        if !self.cache.contains_key(&no) {
            let page = match self.meta.map.get(no as usize).copied() {
                Some((_, 0)) | None => Page::new(),
                Some((off, len)) => {
                    read_page(&*self.reader, || self.path(), &self.stats, no, off, len)?
                }
            };
            self.evict_for_one(false)?;
            self.cache.insert(
                no,
                Cached {
                    page,
                    changed: 0,
                    referenced: AtomicBool::new(false),
                },
            );
            self.order.push_back(no);
        }
        let c = self.cache.get_mut(&no).expect("just loaded");
        *c.referenced.get_mut() = true;
        Ok(c)
    }

    /// Makes room for one more page (second-chance FIFO); a dirty victim is
    /// appended to the page file. With `clean_only` dirty pages are passed
    /// over instead, at most [`CLEAN_VICTIM_TRIES`] pages are looked at, and
    /// `false` says no room was made (nothing is written, so no error).
    fn evict_for_one(&mut self, clean_only: bool) -> Result<bool> {
        let mut tries = if clean_only {
            CLEAN_VICTIM_TRIES
        } else {
            usize::MAX
        };
        while self.cache.len() >= self.cache_pages {
            if tries == 0 {
                return Ok(false);
            }
            tries -= 1;
            let Some(no) = self.order.pop_front() else {
                return Ok(!clean_only);
            };
            let Some(c) = self.cache.get_mut(&no) else {
                continue;
            };
            if std::mem::replace(c.referenced.get_mut(), false) || (clean_only && c.changed != 0) {
                self.order.push_back(no);
                continue;
            }
            let mut c = self.cache.remove(&no).expect("present");
            if c.changed != 0 {
                self.write_page(no, &mut c.page, c.changed)?;
            }
        }
        Ok(true)
    }

    /// Appends page `no`'s changes: the buckets of `changed` as a delta
    /// record over its last image, or the whole page when it has no image
    /// yet, every bucket changed, or its delta records would pass
    /// `max_deltas` or the bytes of the whole page.
    fn write_page(&mut self, no: u64, page: &mut Page, changed: u64) -> Result<()> {
        let prev = self.meta.map[no as usize];
        let full_len = 16 + page.nodes() as u64 * (NODE_LEN as u64 + 1);
        let mut delta = None;
        if prev.1 != 0 && changed != u64::MAX && page.chain.depth < self.max_deltas {
            let d = page.encode_delta(no, prev, page.chain.depth + 1, changed);
            if page.chain.bytes + d.len() as u64 <= full_len {
                delta = Some(d);
            }
        }
        let (b, chain) = match delta {
            Some(d) => {
                let chain = Chain {
                    depth: page.chain.depth + 1,
                    bytes: page.chain.bytes + d.len() as u64,
                };
                (d, chain)
            }
            None => (page.encode(no), Chain::default()),
        };
        let path = self.path();
        let w = self.writer.get_mut();
        w.append(&b).and_then(|_| w.flush()).ctx(&path)?;
        self.stats.add_written(IoCategory::Flush, b.len() as u64);
        self.meta.map[no as usize] = (self.file_len, b.len() as u32);
        self.file_len += b.len() as u64;
        self.live_delta_bytes =
            self.live_delta_bytes.saturating_sub(page.chain.bytes) + chain.bytes;
        page.chain = chain;
        Ok(())
    }

    /// Nodes of `h`'s bucket whose home bits and fingerprint are the
    /// key's ([`Page::candidates`]), in bucket order.
    ///
    /// # Errors
    /// `Corruption` for a damaged page; `Io`.
    pub fn candidates(&mut self, h: u64, fp: u32) -> Result<Vec<Node>> {
        let no = self.page_of(h);
        Ok(self.load(no)?.page.candidates(h, fp))
    }

    /// [`Table::candidates`] when `h`'s page is in memory; where the page
    /// is on disk when it is there, for a read
    /// ([`PageRead::read`]) the caller makes without the table's lock, so
    /// that lookups of other pages do not wait for it. The page's image
    /// there is its state now: only a page in memory can differ from its
    /// last written image.
    pub fn probe(&self, h: u64, fp: u32) -> Probe {
        let no = self.page_of(h);
        if let Some(c) = self.cache.get(&no) {
            c.referenced.store(true, Ordering::Relaxed);
            return Probe::Found(c.page.candidates(h, fp));
        }
        match self.meta.map.get(no as usize).copied() {
            Some((off, len)) if len > 0 => Probe::Read(PageRead {
                no,
                generation: self.meta.generation,
                off,
                len,
                reader: Arc::clone(&self.reader),
                dir: Arc::clone(&self.dir),
                stats: Arc::clone(&self.stats),
            }),
            _ => Probe::Load,
        }
    }

    /// Keeps a page read through [`Table::probe`] in memory, as a lookup
    /// under the lock would have, unless it has changed since — it is in
    /// memory already (loaded, perhaps modified), or a newer image of it
    /// was written (the page map moved on, or a new page file began) — or
    /// making room would mean writing out a dirty page: a lookup does no
    /// write while it holds the table. Returns whether the page was kept.
    pub fn install(&mut self, read: &PageRead, page: Page) -> bool {
        if read.generation != self.meta.generation
            || self.meta.map.get(read.no as usize) != Some(&(read.off, read.len))
            || self.cache.contains_key(&read.no)
            || !matches!(self.evict_for_one(true), Ok(true))
        {
            return false;
        }
        self.cache.insert(
            read.no,
            Cached {
                page,
                changed: 0,
                referenced: AtomicBool::new(true),
            },
        );
        self.order.push_back(read.no);
        true
    }

    /// Replaces the node of `h`'s bucket at `old` with `new` (same key);
    /// false when no node is at `old`.
    pub fn replace(&mut self, h: u64, old: &ValuePointer, new: ValuePointer) -> Result<bool> {
        let no = self.page_of(h);
        let c = self.load(no)?;
        let bucket = (h as usize) % BUCKETS_PER_PAGE;
        match c.page.buckets[bucket].find_mut(old) {
            Some(n) => {
                n.ptr = new;
                c.changed |= 1 << bucket;
                Ok(true)
            }
            None => Ok(false),
        }
    }

    /// Adds a node for a key not in the table, then splits one page when a
    /// doubling is due or under way.
    pub fn insert(&mut self, h: u64, fp: u32, ptr: ValuePointer) -> Result<()> {
        let no = self.page_of(h);
        let c = self.load(no)?;
        let bucket = (h as usize) % BUCKETS_PER_PAGE;
        c.page.buckets[bucket].insert(Node {
            home: (h >> 6) as u32,
            fp,
            ptr,
        });
        c.changed |= 1 << bucket;
        self.meta.count += 1;
        if !self.resizing && self.load_factor() > MAX_LOAD && self.meta.base_pages < 1 << 31 {
            self.resizing = true;
        }
        if self.resizing {
            self.split_one()?;
        }
        Ok(())
    }

    /// Removes the node of `h`'s bucket at `ptr`; false when none is there.
    pub fn remove(&mut self, h: u64, ptr: &ValuePointer) -> Result<bool> {
        let no = self.page_of(h);
        let c = self.load(no)?;
        let bucket = (h as usize) % BUCKETS_PER_PAGE;
        let ok = c.page.buckets[bucket].remove(ptr);
        if ok {
            c.changed |= 1 << bucket;
            self.meta.count -= 1;
        }
        Ok(ok)
    }

    fn load_factor(&self) -> f64 {
        let buckets = self.meta.map.len() as f64 * BUCKETS_PER_PAGE as f64;
        self.meta.count as f64 / (2.0 * buckets)
    }

    /// Splits the next page of the old size into itself and its twin.
    fn split_one(&mut self) -> Result<()> {
        let base = self.meta.base_pages;
        let from = self.meta.split;
        let twin = from + base;
        let old = self.load(from)?.page.clone();
        self.meta.split += 1;
        self.meta.map.push((0, 0));
        let (mut low, mut high) = (Page::new(), Page::new());
        for (i, b) in old.buckets.iter().enumerate() {
            for n in b.iter() {
                if self.page_of_home(n.home) == from {
                    low.buckets[i].insert(*n);
                } else {
                    high.buckets[i].insert(*n);
                }
            }
        }
        for (no, page) in [(from, low), (twin, high)] {
            self.evict_for_one(false)?;
            if !self.cache.contains_key(&no) {
                self.order.push_back(no);
            }
            self.cache.insert(
                no,
                Cached {
                    page,
                    changed: u64::MAX,
                    referenced: AtomicBool::new(true),
                },
            );
        }
        if self.meta.split == base {
            self.meta.base_pages = 2 * base;
            self.meta.split = 0;
            self.resizing = false;
        }
        Ok(())
    }

    /// The first half of a checkpoint, under the table's lock: appends every
    /// dirty page (and rewrites the page file when most of it is stale),
    /// and returns the rest — the page file's sync and the meta file naming
    /// the pages, with the bands' replay position `ckpt` and `bands_state`
    /// (the caller has made the bands durable up to `ckpt`) — for
    /// [`CheckpointSync::finish`] to do without the lock, then
    /// [`Table::checkpoint_done`]. Pages are never overwritten, so pages
    /// evicted meanwhile go to new places and leave the checkpoint's intact.
    ///
    /// # Errors
    /// `Io`; the previous checkpoint then stays in force.
    pub fn checkpoint_write(
        &mut self,
        ckpt: (u64, u64),
        bands_state: Vec<u8>,
    ) -> Result<CheckpointSync> {
        let mut dirty: Vec<u64> = self
            .cache
            .iter()
            .filter(|(_, c)| c.changed != 0)
            .map(|(&n, _)| n)
            .collect();
        dirty.sort_unstable();
        for no in dirty {
            let mut c = self.cache.remove(&no).expect("a dirty page is cached");
            let r = self.write_page(no, &mut c.page, c.changed);
            if r.is_ok() {
                c.changed = 0;
            }
            self.cache.insert(no, c);
            r?;
        }
        let live: u64 =
            self.meta.map.iter().map(|x| x.1 as u64).sum::<u64>() + self.live_delta_bytes;
        if self.file_len > 4 * live + PAGE_FILE_SLACK {
            self.rewrite_pages()?;
        }
        let path = self.path();
        // A file system without separate sync handles syncs here.
        let handle = self.writer.get_mut().sync_handle();
        if handle.is_none() {
            self.writer.get_mut().sync().ctx(&path)?;
        }
        self.meta.ckpt = ckpt;
        self.meta.bands_state = bands_state;
        // Without a `HASHMETA` (a new table) there is nothing to extend;
        // past a table's bytes of regions, open would read more records
        // than the pages hold, and `HASHMETA` is written whole instead.
        let region = (self.region_start, self.file_len);
        // The bytes of the table written whole.
        let whole = self.meta.count * (NODE_LEN as u64 + 1) + self.meta.map.len() as u64 * 16;
        let edit = checkpoint_edit(&self.durable, &self.meta, region)
            .filter(|_| {
                self.base_len > 0
                    && self.regions_len + (region.1 - region.0) <= whole.max(REGIONS_MIN_COMPACT)
            })
            .and_then(|e| self.fits_edit_log(edit_record(self.base_hash, &e)));
        Ok(CheckpointSync {
            handle,
            pages: path,
            meta: self.meta.clone(),
            edit,
            region_end: self.file_len,
            file: self.meta_file(),
        })
    }

    /// The last half of a checkpoint, under the lock again: its meta is
    /// now the durable one, and a page file it replaced goes.
    pub fn checkpoint_done(&mut self, done: Checkpointed) {
        match done.edit_len {
            Some(n) => {
                self.edits_len += n;
                self.regions_len += done.region_end.saturating_sub(self.region_start);
            }
            None => {
                self.based_on(&done.meta);
                self.regions_len = 0;
            }
        }
        self.region_start = done.region_end;
        self.durable = done.meta;
        if let Some(old) = self.pending_remove.take() {
            let _ = self.fs.remove(&old);
        }
    }

    /// A whole checkpoint under the caller's hold of the table
    /// ([`Table::checkpoint_write`], [`CheckpointSync::finish`],
    /// [`Table::checkpoint_done`]).
    ///
    /// # Errors
    /// `Io`; the previous checkpoint then stays in force.
    #[cfg(test)]
    pub fn checkpoint(&mut self, ckpt: (u64, u64), bands_state: Vec<u8>) -> Result<()> {
        let meta = self.checkpoint_write(ckpt, bands_state)?.finish()?;
        self.checkpoint_done(meta);
        Ok(())
    }

    fn meta_file(&self) -> MetaFile {
        MetaFile {
            fs: Arc::clone(&self.fs),
            path: self.dir.join(META),
            stats: Arc::clone(&self.stats),
        }
    }

    /// `meta` was written whole as `HASHMETA`: the edit log starts over.
    fn based_on(&mut self, meta: &Meta) {
        let b = meta.encode();
        self.base_hash = xxhash_rust::xxh3::xxh3_64(&b);
        self.base_len = b.len() as u64;
        self.edits_len = 0;
    }

    /// The last checkpoint's meta with `bands_state` in place of its bands
    /// state, and how to persist it — for [`StateWrite::write`] without
    /// the table's lock, then [`Table::bands_state_persisted`]: as an edit
    /// of the changed entries appended to the edit log, or, once the log
    /// would pass the size of `HASHMETA` (at least
    /// `EDITS_MIN_COMPACT`), or when the old state does not decode, as a
    /// whole new `HASHMETA`.
    pub fn with_bands_state(&self, bands_state: Vec<u8>) -> StateWrite {
        let edit = crate::vstore::index_log::state_edit(&self.durable.bands_state, &bands_state)
            .and_then(|edit| self.fits_edit_log(edit_record(self.base_hash, &edit)));
        let mut meta = self.durable.clone();
        meta.bands_state = bands_state;
        StateWrite {
            meta,
            edit,
            file: self.meta_file(),
        }
    }

    /// `rec` when appending it keeps the edit log within the size of
    /// `HASHMETA` (at least `EDITS_MIN_COMPACT`).
    fn fits_edit_log(&self, rec: Vec<u8>) -> Option<Vec<u8>> {
        let limit = self.base_len.max(EDITS_MIN_COMPACT);
        (self.edits_len + rec.len() as u64 <= limit).then_some(rec)
    }

    /// The bands state `HASHMETA` and the edit log hold together.
    #[cfg(test)]
    pub fn durable_bands_state(&self) -> &[u8] {
        &self.durable.bands_state
    }

    /// `w`, from [`Table::with_bands_state`], is durable.
    pub fn bands_state_persisted(&mut self, w: StateWrite) {
        match &w.edit {
            Some(rec) => self.edits_len += rec.len() as u64,
            None => self.based_on(&w.meta),
        }
        self.meta.bands_state = w.meta.bands_state.clone();
        self.durable = w.meta;
    }

    /// Copies the live pages into the next generation's page file.
    fn rewrite_pages(&mut self) -> Result<()> {
        let gen = self.meta.generation + 1;
        let path = pages_path(&self.dir, gen);
        let mut w = self.fs.create(&path).ctx(&path)?;
        let mut map = Vec::with_capacity(self.meta.map.len());
        let mut len = 0u64;
        for (no, &(off, l)) in self.meta.map.iter().enumerate() {
            if l == 0 {
                map.push((0, 0));
                continue;
            }
            let page = read_page(
                &*self.reader,
                || self.path(),
                &self.stats,
                no as u64,
                off,
                l,
            )?;
            let b = page.encode(no as u64);
            w.append(&b).ctx(&path)?;
            map.push((len, b.len() as u32));
            len += b.len() as u64;
        }
        w.flush().and_then(|_| w.sync()).ctx(&path)?;
        self.fs.sync_dir(&self.dir).ctx(&self.dir)?;
        self.stats.add_written(IoCategory::Flush, len);
        let old = self.path();
        self.meta.generation = gen;
        self.meta.map = map;
        self.reader = Arc::from(self.fs.open_read(&path).ctx(&path)?);
        *self.writer.get_mut() = w;
        self.file_len = len;
        self.live_delta_bytes = 0;
        for c in self.cache.values_mut() {
            c.page.chain = Chain::default();
        }
        // The old file goes once the meta naming the new one is written;
        // the next open removes it if a crash comes first.
        self.pending_remove = Some(old);
        Ok(())
    }

    /// What [`PageCheck::run`] reads: every page the working page map names.
    pub fn page_check(&self) -> PageCheck {
        PageCheck {
            map: self.meta.map.clone(),
            reader: Arc::clone(&self.reader),
            path: self.path(),
            stats: Arc::clone(&self.stats),
        }
    }

    /// Figures for `stats`.
    pub fn figures(&self) -> TableFigures {
        let mut f = TableFigures {
            buckets: self.meta.map.len() as u64 * BUCKETS_PER_PAGE as u64,
            nodes: self.meta.count,
            cached_pages: self.cache.len() as u64,
            resizing: self.resizing,
            ..Default::default()
        };
        f.load = f.nodes as f64 / (2.0 * f.buckets.max(1) as f64);
        for c in self.cache.values() {
            f.dirty_pages += (c.changed != 0) as u64;
            for b in &c.page.buckets {
                if !b.chain.is_empty() {
                    f.overflow_chains += 1;
                    f.overflow_nodes += b.chain.len() as u64;
                }
            }
        }
        f
    }

    /// Estimated bytes the cached pages take.
    pub fn cached_bytes(&self) -> usize {
        self.cache.values().map(|c| c.page.bytes_estimate()).sum()
    }
}
