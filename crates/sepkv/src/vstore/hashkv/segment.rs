//! Storage management (HashKV §3.2, §3.8): segments, segment groups, the
//! in-memory segment table, its persisted encoding, and the segment files.
//!
//! # Geometry
//! `value_capacity` bytes are split into a main part, `(1 - reserved_ratio)`
//! of it, cut into `groups = main part / main_segment_size` (at least 1)
//! **main segments**, and a **reserved space** of `reserved_ratio` of it cut
//! into **log segments** of `log_segment_size` bytes ("units"). `hash(key)`
//! (xxh3) modulo `groups` picks the key's **segment group**: its main segment
//! plus the log segments it has been given. The geometry is fixed when the
//! store is created; later options do not change it.
//!
//! # Physical layout
//! Every segment is one append-only file named by a segment id that is never
//! reused; a segment is created lazily on its first write, so an unused
//! capacity costs nothing:
//!
//! ```text
//! NNNNNN.hseg   one segment (main or log), records back to back from byte 0
//! +--------+--------+-----+--------+- - - - - - - - - - - -+
//! | record | record | ... | record |  (room up to the cap)  |
//! +--------+--------+-----+--------+- - - - - - - - - - - -+
//! 0                                len                     cap
//!   cap = main_segment_size for a main segment,
//!         units * log_segment_size for a log segment (units > 1 only for a
//!         record larger than one log segment)
//!
//! segment group g:  [main segment] -> [log segment] -> [log segment] ...
//!                   appends go to the end of the last segment; the order of
//!                   the list is the order of writing (newest last)
//! ```
//! A [`ValuePointer`](crate::vstore::ValuePointer) for a segment record is
//! `(file_id = segment id, offset, length = record length, aux = 0)`.
//!
//! # The segment table
//! [`Table`] holds, per group, its segment list, whether it is sealed (a GC
//! is collecting its segments: the next record placed in the group, a user's
//! or a GC copy, opens the group's next main segment), the bytes written to
//! it since its last GC (the greedy GC score) and the garbage the engine
//! reported for it. Every append finds its position here without an index
//! lookup. The table is persisted with [`Table::encode`]:
//!
//! ```text
//! table := "HKVT" version:u8=2 epoch:u64 next_seg:u64
//!          journal_num:u64 journal_off:u64
//!          groups:u32 main_size:u64 log_size:u64 reserved_units:u64
//!          has_cold:u8 [cold_len:varint cold_state]
//!          group*  crc:u32
//! group := nsegs:varint write_volume:varint hot_seq:varint seg*
//! seg   := id:varint kind:u8 (0 main, 1 log) units:varint cap:varint len:varint
//! crc   := masked CRC-32C of every byte before it (all fixed-width ints LE)
//! ```
//! Version 1 tables (written before `hot_seq` existed) have no `hot_seq`
//! and are read with 0 there: the first GC of each group then classifies
//! by the records alone. `journal_num/journal_off` is where write-journal
//! replay starts; the `epoch` orders the copies kept in the manifest and in
//! the store's own checkpoint file (the newer wins on open).

use crate::error::{Error, IoContext, Result};
use crate::format::checksum::{crc, mask, unmask};
use crate::format::coding::{get_varint32, get_varint64, put_varint32, put_varint64};
use crate::fs::{Advice, FileSystem, IoCategory, IoStats, RandomAccessFile, WritableFile};
use crate::spin::{SpinMutex, SpinMutexGuard};
use parking_lot::{Mutex, RwLock};
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Largest segment id, next id, epoch and journal number a persisted table
/// or journal may hold: far beyond any real store, far from overflow.
pub const MAX_SEG_ID: u64 = 1 << 48;

/// Largest byte count (segment size, capacity or length, write volume) a
/// persisted table may hold: counters below it cannot overflow as appends
/// add to them.
pub const MAX_SEG_BYTES: u64 = 1 << 48;

/// Path of segment `id`.
pub fn seg_path(dir: &Path, id: u64) -> PathBuf {
    dir.join(format!("{id:06}.hseg"))
}

/// Parses a segment file name.
pub fn parse_seg_name(name: &str) -> Option<u64> {
    name.strip_suffix(".hseg")?.parse().ok()
}

/// Main or log segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SegKind {
    /// The fixed-size segment a group starts with.
    Main,
    /// A segment of the reserved space.
    Log,
}

impl SegKind {
    /// Encoding byte.
    pub fn byte(self) -> u8 {
        match self {
            SegKind::Main => 0,
            SegKind::Log => 1,
        }
    }

    /// Decodes the encoding byte.
    pub fn from_byte(b: u8) -> Option<SegKind> {
        match b {
            0 => Some(SegKind::Main),
            1 => Some(SegKind::Log),
            _ => None,
        }
    }
}

/// One segment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seg {
    /// Owning group.
    pub group: u32,
    /// Main or log.
    pub kind: SegKind,
    /// Log-segment units of the reserved space it occupies (0 for main).
    pub units: u32,
    /// Capacity in bytes.
    pub cap: u64,
    /// Bytes of records placed in it (including those still in the write
    /// cache).
    pub len: u64,
}

/// One segment group.
#[derive(Debug, Clone, Default)]
pub struct Group {
    /// Segment ids, oldest first; appends go to the last one.
    pub segs: Vec<u64>,
    /// The segments take no more appends (a GC is collecting them): the
    /// next placement opens a fresh main segment.
    pub sealed: bool,
    /// Bytes appended since the group's last GC.
    pub write_volume: u64,
    /// Bytes the engine reported as garbage in the group since its last GC.
    pub noted_garbage: u64,
    /// The highest sequence number among the values GC copied back to the
    /// group as hot. A value alone in its group with a sequence number at
    /// most this is taken to have survived an earlier GC as hot — its pair
    /// updated since its insert — and stays hot (HashKV §3.4); 0 before the
    /// group's first GC that kept a hot value. One number cannot tell
    /// every such value apart: a cold value kept in the group for lack of
    /// cold-log room, or restored with an older sequence number, that is
    /// older than a hot copy is taken for hot too (more copies, never a
    /// lost value).
    pub hot_seq: u64,
}

/// The fixed geometry of a store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Geometry {
    /// Number of segment groups (= main segments).
    pub groups: u32,
    /// Main segment size (bytes).
    pub main_size: u64,
    /// Log segment size (bytes).
    pub log_size: u64,
    /// Log segments in the reserved space.
    pub reserved_units: u64,
}

impl Geometry {
    /// The geometry for a capacity (bytes) and reserved ratio.
    pub fn new(capacity: u64, main_size: u64, log_size: u64, reserved_ratio: f64) -> Geometry {
        let main_part = (capacity as f64 * (1.0 - reserved_ratio)) as u64;
        // Rounded up, so that the main segments hold at least the main
        // part (data sized to it must not spill into the reserve).
        let groups = main_part
            .div_ceil(main_size.max(1))
            .clamp(1, u32::MAX as u64) as u32;
        let reserved_units = (capacity as f64 * reserved_ratio) as u64 / log_size.max(1);
        Geometry {
            groups,
            main_size,
            log_size,
            reserved_units,
        }
    }

    /// Log segments user writes leave free for GC's copies: a sixteenth of
    /// the reserve, at most one main segment's worth.
    pub fn gc_headroom(&self) -> u64 {
        (self.reserved_units / 16).min(self.main_size.div_ceil(self.log_size.max(1)))
    }

    /// The group `key` hashes to.
    pub fn group_of(&self, key: &[u8]) -> u32 {
        (xxhash_rust::xxh3::xxh3_64(key) % self.groups as u64) as u32
    }
}

/// A segment allocated by a placement (recorded in the write journal).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Alloc {
    /// Segment id.
    pub id: u64,
    /// The segment.
    pub seg: Seg,
}

/// How to undo one step of a placement.
#[derive(Debug)]
pub enum Undo {
    /// Restore a segment's length.
    Len(u64, u64),
    /// Remove a newly allocated segment; restore the group's seal flag.
    NewSeg(u64, bool),
}

/// Why a placement failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PlaceError {
    /// The reserved space has no room (the store-full message).
    Full(String),
    /// A group lists segment `id`, which the table does not know: the
    /// table is inconsistent.
    Unknown(u64),
}

/// The segment table. See the module docs.
#[derive(Debug, Clone)]
pub struct Table {
    /// Geometry.
    pub geo: Geometry,
    /// One entry per group.
    pub groups: Vec<Group>,
    /// Every segment whose file may be read: those in group lists, those GC
    /// is writing, and those retired by GC but not yet freed.
    pub segs: HashMap<u64, Seg>,
    /// Next segment id (ids are never reused).
    pub next_seg: u64,
    /// Reserved-space units in use (including retired, not yet freed ones).
    pub used_units: u64,
    /// Persisted-copy counter.
    pub epoch: u64,
    /// Write-journal position replay starts at: `(file number, offset)`.
    pub journal_pos: (u64, u64),
    /// The cold data log's persisted state.
    pub cold_state: Option<Vec<u8>>,
    /// Log-segment units the cold data log's span takes (in memory,
    /// refreshed after open and every GC step): the cold log lives inside
    /// the capacity.
    pub cold_units: u64,
    /// Log-segment units of room the main segments leave unfilled
    /// ([`Table::main_slack`]), as counted with `cold_units`. The cold data
    /// log takes this room first and the reserve only for the rest: the
    /// values it holds left their groups' main segments, as in the paper,
    /// where the cold log has a region of its own (HashKV §3.4, §3.8).
    pub main_slack_units: u64,
    /// Bytes appended since `main_slack_units` was counted to main
    /// segments it counted (ids below `counted_below`): that room is no
    /// longer free, and [`Table::free_units`] takes it off until the next
    /// count. Main segments allocated since were not counted, so their
    /// appends take nothing off.
    pub main_appended: u64,
    /// `next_seg` when `main_slack_units` was counted.
    pub counted_below: u64,
    /// How far past the reserve GC's copies may take log segments during
    /// the running step, in units, counting what the store is over it
    /// already ([`Table::over_units`]); 0 outside a step, never persisted.
    /// Set when one group's copies would not fit otherwise (see
    /// `gc::copies_fit`).
    pub gc_overdraft: u64,
    /// Segments numbered below this hold the format-1 record codec (in
    /// memory, set at open; never persisted): they take no more records,
    /// so a group whose last segment is one continues in a new segment.
    pub legacy_below: u64,
}

/// Message of the store-full error.
pub fn full_message(geo: &Geometry, used: u64, need: u64) -> String {
    format!(
        "hashkv value store is full: {need} more log segment(s) of {} bytes needed, {} of {} reserved in use; \
         run GC (Db::gc) after deleting or overwriting data; a hashkv store keeps the value_capacity it was created with",
        geo.log_size, used, geo.reserved_units
    )
}

impl Table {
    /// An empty table.
    pub fn new(geo: Geometry) -> Table {
        Table {
            geo,
            groups: vec![Group::default(); geo.groups as usize],
            segs: HashMap::new(),
            next_seg: 1,
            used_units: 0,
            epoch: 0,
            journal_pos: (1, 0),
            cold_state: None,
            cold_units: 0,
            main_slack_units: 0,
            main_appended: 0,
            counted_below: 0,
            gc_overdraft: 0,
            legacy_below: 0,
        }
    }

    /// Free log segments of the reserved space: what log segments and the
    /// part of the cold data log the main segments' free room does not
    /// cover leave.
    ///
    /// In bytes this is the capacity less what the store holds —
    /// `value_capacity` minus the main segments' lengths, the log
    /// segments and the cold log — whenever the cold log is larger than
    /// the main segments' free room, and the reserve's own free room
    /// otherwise. The free room is counted after open and at each GC step
    /// ([`Table::count_main_slack`]); appends to the main segments counted
    /// take their bytes off it at once, and main segments allocated since
    /// add nothing until the next count. What it may credit beyond the
    /// truth is the unfilled room of a main segment a GC step is
    /// replacing, the one extra main segment per group under collection
    /// that the design allows.
    pub fn free_units(&self) -> u64 {
        self.geo
            .reserved_units
            .saturating_sub(self.reserve_taken(self.main_appended))
    }

    /// Log-segment units by which the groups' log segments and the part of
    /// the cold data log the main segments' room does not cover pass the
    /// reserve (0 while within it): what a GC overdraft, or retired
    /// segments a reader still holds after one, take beyond it.
    pub fn over_units(&self) -> u64 {
        self.reserve_taken(self.main_appended)
            .saturating_sub(self.geo.reserved_units)
    }

    /// Log-segment units the groups' log segments and the part of the cold
    /// data log the main segments' room does not cover take, with
    /// `main_appended` bytes appended to the main segments counted.
    fn reserve_taken(&self, main_appended: u64) -> u64 {
        self.used_units
            + self
                .cold_units
                .saturating_sub(self.room_left(main_appended))
    }

    /// Log-segment units of the main segments' free room as
    /// [`Table::free_units`] credits it: the last count less what was
    /// appended to the segments counted since.
    pub fn main_room_left_units(&self) -> u64 {
        self.room_left(self.main_appended)
    }

    /// The main segments' room left with `main_appended` bytes appended
    /// since the count, in log-segment units.
    fn room_left(&self, main_appended: u64) -> u64 {
        self.main_slack_units
            .saturating_sub(main_appended.div_ceil(self.geo.log_size.max(1)))
    }

    /// How hard user writes are paced, from 0 (no pause) to 1: 0 while at
    /// least half of the way from GC's headroom to `low_watermark` is free,
    /// growing linearly to 1 at the headroom, where user appends are
    /// refused.
    pub fn pause_depth(&self, low_watermark: u64) -> f64 {
        let head = self.geo.gc_headroom();
        let soft = head + low_watermark.saturating_sub(head) / 2;
        let free = self.free_units();
        if free >= soft {
            return 0.0;
        }
        ((soft - free) as f64 / (soft - head).max(1) as f64).min(1.0)
    }

    /// Counts the main segments' free room ([`Table::main_slack`]) into
    /// `main_slack_units` and starts `main_appended` over.
    pub fn count_main_slack(&mut self) {
        self.main_slack_units = self.main_slack() / self.geo.log_size.max(1);
        self.main_appended = 0;
        self.counted_below = self.next_seg;
    }

    /// Bytes the groups' current main segments — each group's last listed
    /// one; a group without one has a whole segment's room — have not
    /// filled yet. Visits every group.
    ///
    /// A main segment a GC step is replacing (listed before the new one
    /// until the step commits, and after a step that gave up until the
    /// group's next GC) and retired ones not deleted yet are left out:
    /// they are the one extra main segment per group under collection
    /// that the store's design allows beyond `value_capacity` (see
    /// [`super::gc`]). A main segment in the format-1 record codec
    /// (numbered below `legacy_below`) has no room: it takes no more
    /// records.
    pub fn main_slack(&self) -> u64 {
        self.groups
            .iter()
            .map(|g| {
                let len = g
                    .segs
                    .iter()
                    .rev()
                    .filter_map(|id| Some((*id, self.segs.get(id)?)))
                    .find(|(_, s)| s.kind == SegKind::Main)
                    // A segment of the format-1 codec takes no more
                    // records: its room is not free.
                    .map_or(0, |(id, s)| {
                        if id < self.legacy_below {
                            self.geo.main_size
                        } else {
                            s.len
                        }
                    });
                self.geo.main_size.saturating_sub(len)
            })
            .sum()
    }

    /// True when appending `len` bytes to a counted main segment would
    /// fill room the cold data log has taken and leave fewer than
    /// `headroom` free units: the append is refused as a log segment
    /// would be, so that the groups and the cold log stay within
    /// `value_capacity`. GC's copies (`headroom` 0) are never refused here.
    fn takes_cold_room(&self, len: u64, headroom: u64) -> bool {
        if headroom == 0 {
            return false;
        }
        let after = self
            .geo
            .reserved_units
            .saturating_sub(self.reserve_taken(self.main_appended + len));
        after < self.free_units() && after < headroom
    }

    /// Log-segment units a record of `len` bytes needs.
    pub fn units_for(&self, len: u64) -> u32 {
        len.div_ceil(self.geo.log_size).max(1) as u32
    }

    /// Allocates a segment for `group` able to hold `len` bytes: a main
    /// segment when one is due (`main`: the group has none yet, or a GC is
    /// replacing its segments) and the record fits, else a log segment from
    /// the reserved space. `None` when a log segment would leave fewer than
    /// `headroom` units free; a main segment takes nothing from the reserve.
    pub fn alloc(&mut self, group: u32, len: u64, main: bool, headroom: u64) -> Option<Alloc> {
        let (kind, units, cap) = if main && len <= self.geo.main_size {
            (SegKind::Main, 0, self.geo.main_size)
        } else {
            let u = self.units_for(len);
            (SegKind::Log, u, u as u64 * self.geo.log_size)
        };
        // GC's copies (no headroom) may also take what is left of its
        // overdraft.
        let overdraft = if headroom == 0 {
            self.gc_overdraft.saturating_sub(self.over_units())
        } else {
            0
        };
        if units > 0 && units as u64 + headroom > self.free_units() + overdraft {
            return None;
        }
        let id = self.next_seg;
        self.next_seg += 1;
        self.used_units += units as u64;
        let seg = Seg {
            group,
            kind,
            units,
            cap,
            len: 0,
        };
        self.segs.insert(id, seg.clone());
        Some(Alloc { id, seg })
    }

    /// Places a record of `len` bytes at the end of `group`, allocating a
    /// segment when the last one is full, or a fresh main segment when the
    /// group is sealed (a GC is collecting its segments; the records placed
    /// from then on, the GC's copies and new writes alike, form the group
    /// that the GC leaves behind). A log segment is allocated only while it
    /// leaves `headroom` units of the reserved space free. Returns
    /// `(segment, offset)`; new segments are pushed to `allocs`, undo steps
    /// to `undo`.
    ///
    /// # Errors
    /// [`PlaceError::Full`] when the reserved space has no room;
    /// [`PlaceError::Unknown`] when the group lists a segment the table
    /// does not know.
    pub fn place(
        &mut self,
        group: u32,
        len: u64,
        headroom: u64,
        allocs: &mut Vec<Alloc>,
        undo: &mut Vec<Undo>,
    ) -> std::result::Result<(u64, u64), PlaceError> {
        let g = &self.groups[group as usize];
        if !g.sealed {
            if let Some(&last) = g.segs.last() {
                let s = self.segs.get(&last).ok_or(PlaceError::Unknown(last))?;
                if s.len + len <= s.cap && last >= self.legacy_below {
                    let counted = s.kind == SegKind::Main && last < self.counted_below;
                    if counted && self.takes_cold_room(len, headroom) {
                        let in_use = self.geo.reserved_units - self.free_units();
                        return Err(PlaceError::Full(full_message(&self.geo, in_use, 1)));
                    }
                    let s = self.segs.get_mut(&last).ok_or(PlaceError::Unknown(last))?;
                    undo.push(Undo::Len(last, s.len));
                    let off = s.len;
                    s.len += len;
                    if counted {
                        self.main_appended += len;
                    }
                    return Ok((last, off));
                }
            }
        }
        let main = g.segs.is_empty() || g.sealed;
        let was_sealed = g.sealed;
        let Some(mut a) = self.alloc(group, len, main, headroom) else {
            let need = self.units_for(len) as u64;
            return Err(PlaceError::Full(full_message(
                &self.geo,
                self.used_units,
                need,
            )));
        };
        if let Some(s) = self.segs.get_mut(&a.id) {
            s.len = len;
        }
        a.seg.len = 0;
        let g = &mut self.groups[group as usize];
        g.segs.push(a.id);
        g.sealed = false;
        undo.push(Undo::NewSeg(a.id, was_sealed));
        let id = a.id;
        allocs.push(a);
        Ok((id, 0))
    }

    /// Undoes placements (in reverse order).
    pub fn rollback(&mut self, undo: Vec<Undo>) {
        for u in undo.into_iter().rev() {
            match u {
                Undo::Len(id, len) => {
                    if let Some(s) = self.segs.get_mut(&id) {
                        s.len = len;
                    }
                }
                Undo::NewSeg(id, sealed) => {
                    if let Some(s) = self.segs.remove(&id) {
                        self.used_units -= s.units as u64;
                        let g = &mut self.groups[s.group as usize];
                        g.segs.pop();
                        g.sealed = sealed;
                    }
                }
            }
        }
    }

    /// Attaches a segment allocated elsewhere (journal replay) to the end of
    /// its group. Ignored when the id is known, or below `snapshot_next`
    /// (the table's `next_seg` when it was persisted: such a segment was
    /// allocated before and is listed, or was freed since).
    pub fn attach(&mut self, a: &Alloc, snapshot_next: u64) -> bool {
        if self.segs.contains_key(&a.id) || a.id < snapshot_next || a.seg.group >= self.geo.groups {
            return false;
        }
        self.next_seg = self.next_seg.max(a.id + 1);
        self.used_units += a.seg.units as u64;
        self.segs.insert(a.id, a.seg.clone());
        self.groups[a.seg.group as usize].segs.push(a.id);
        true
    }

    /// Ids of every segment in a group list.
    pub fn listed(&self) -> HashSet<u64> {
        self.groups
            .iter()
            .flat_map(|g| g.segs.iter().copied())
            .collect()
    }

    /// The segment `id`; `Err(id)` when the table does not know it (a group
    /// lists a segment that is not in the table: the table is inconsistent).
    pub fn seg(&self, id: u64) -> std::result::Result<&Seg, u64> {
        self.segs.get(&id).ok_or(id)
    }

    /// Group `g`'s segments with their lengths, oldest first.
    ///
    /// # Errors
    /// `Err(id)` for a listed segment the table does not know.
    pub fn group_lens(&self, g: u32) -> std::result::Result<Vec<(u64, u64)>, u64> {
        self.groups[g as usize]
            .segs
            .iter()
            .map(|&id| self.seg(id).map(|s| (id, s.len)))
            .collect()
    }

    /// Encodes the table (see the module docs).
    ///
    /// # Errors
    /// `Err(id)` when a group lists segment `id`, which the table does not
    /// know.
    pub fn encode(&self) -> std::result::Result<Vec<u8>, u64> {
        let mut v = Vec::with_capacity(64 + self.groups.len() * 16);
        v.extend_from_slice(b"HKVT");
        v.push(2);
        for x in [
            self.epoch,
            self.next_seg,
            self.journal_pos.0,
            self.journal_pos.1,
        ] {
            v.extend_from_slice(&x.to_le_bytes());
        }
        v.extend_from_slice(&self.geo.groups.to_le_bytes());
        for x in [
            self.geo.main_size,
            self.geo.log_size,
            self.geo.reserved_units,
        ] {
            v.extend_from_slice(&x.to_le_bytes());
        }
        match &self.cold_state {
            Some(c) => {
                v.push(1);
                put_varint64(&mut v, c.len() as u64);
                v.extend_from_slice(c);
            }
            None => v.push(0),
        }
        for g in &self.groups {
            put_varint64(&mut v, g.segs.len() as u64);
            put_varint64(&mut v, g.write_volume);
            put_varint64(&mut v, g.hot_seq);
            for &id in &g.segs {
                let s = self.seg(id)?;
                put_varint64(&mut v, id);
                v.push(s.kind.byte());
                put_varint32(&mut v, s.units);
                put_varint64(&mut v, s.cap);
                put_varint64(&mut v, s.len);
            }
        }
        let c = mask(crc(&v));
        v.extend_from_slice(&c.to_le_bytes());
        Ok(v)
    }

    /// Decodes a table; `None` when malformed.
    pub fn decode(b: &[u8]) -> Option<Table> {
        if b.len() < 4 + 1 + 32 + 28 + 1 + 4 || &b[..4] != b"HKVT" || !(1..=2).contains(&b[4]) {
            return None;
        }
        let (body, tail) = b.split_at(b.len() - 4);
        if unmask(u32::from_le_bytes(tail.try_into().ok()?)) != crc(body) {
            return None;
        }
        let version = b[4];
        let mut src = &body[5..];
        let u64f = |s: &mut &[u8]| -> Option<u64> {
            let (h, t) = s.split_at_checked(8)?;
            *s = t;
            Some(u64::from_le_bytes(h.try_into().ok()?))
        };
        let epoch = u64f(&mut src)?;
        let next_seg = u64f(&mut src)?;
        let journal_pos = (u64f(&mut src)?, u64f(&mut src)?);
        let (h, t) = src.split_at_checked(4)?;
        src = t;
        let groups = u32::from_le_bytes(h.try_into().ok()?);
        let geo = Geometry {
            groups,
            main_size: u64f(&mut src)?,
            log_size: u64f(&mut src)?,
            reserved_units: u64f(&mut src)?,
        };
        // Ids, epochs and journal numbers count up from 1, and sizes are far
        // below 2^48: larger values are damage, and adding to them would
        // overflow.
        if groups == 0
            || geo.main_size == 0
            || geo.log_size == 0
            || geo.main_size > MAX_SEG_BYTES
            || geo.log_size > MAX_SEG_BYTES
            || next_seg > MAX_SEG_ID
            || epoch > MAX_SEG_ID
            || journal_pos.0 > MAX_SEG_ID
        {
            return None;
        }
        let (&flag, t) = src.split_first()?;
        src = t;
        let cold_state = match flag {
            0 => None,
            1 => {
                let n = get_varint64(&mut src)? as usize;
                let (c, t) = src.split_at_checked(n)?;
                src = t;
                Some(c.to_vec())
            }
            _ => return None,
        };
        // Every group takes at least two bytes: a count claiming more groups
        // than the bytes left can describe is damage, not a reason to
        // allocate them.
        if groups as usize > src.len() / 2 {
            return None;
        }
        let mut t = Table::new(geo);
        t.epoch = epoch;
        t.next_seg = next_seg;
        t.journal_pos = journal_pos;
        t.cold_state = cold_state;
        for gi in 0..groups {
            let n = get_varint64(&mut src)?;
            let wv = get_varint64(&mut src)?;
            let hot_seq = if version >= 2 {
                get_varint64(&mut src)?
            } else {
                0
            };
            if wv > MAX_SEG_BYTES {
                return None;
            }
            t.groups[gi as usize].write_volume = wv;
            t.groups[gi as usize].hot_seq = hot_seq;
            for _ in 0..n {
                let id = get_varint64(&mut src)?;
                let (&k, r) = src.split_first()?;
                src = r;
                let kind = SegKind::from_byte(k)?;
                let units = get_varint32(&mut src)?;
                let cap = get_varint64(&mut src)?;
                let len = get_varint64(&mut src)?;
                if id >= next_seg
                    || t.segs.contains_key(&id)
                    || cap > MAX_SEG_BYTES
                    || len > MAX_SEG_BYTES
                {
                    return None;
                }
                t.used_units += units as u64;
                t.segs.insert(
                    id,
                    Seg {
                        group: gi,
                        kind,
                        units,
                        cap,
                        len,
                    },
                );
                t.groups[gi as usize].segs.push(id);
            }
        }
        src.is_empty().then_some(t)
    }
}

/// Writable handles kept open at once (the rest are reopened on demand).
/// Appends go straight to their group's tail segment, so this covers one
/// per group at the default geometry (716 groups): with 64, a 300k × 1000 B
/// `fillrandom` reopened a file for most appends and ran at 85–88 kops/s
/// against 125–139 with 1024.
const MAX_WRITERS: usize = 1024;
/// Segments to sync from which [`SegFiles::sync_dirty`] syncs the file
/// system in one call, where it can.
const SYNC_FILE_SYSTEM_AT: usize = 16;
/// Readable handles kept open at once.
const MAX_READERS: usize = 1024;

/// The segment files' handles, locked for a run of appends
/// ([`SegFiles::appends`]).
pub struct Appends<'a> {
    files: &'a SegFiles,
    w: SpinMutexGuard<'a, Writers>,
}

impl Appends<'_> {
    /// See [`SegFiles::append`].
    pub fn append(&mut self, id: u64, off: u64, data: &[u8], cat: IoCategory) -> Result<()> {
        self.files.append_locked(&mut self.w, id, off, data, cat)
    }
}

struct Writers {
    open: HashMap<u64, Box<dyn WritableFile>>,
    /// Segments written since their last sync.
    dirty: HashSet<u64>,
    /// Segment files created since the directory's last sync.
    dir_dirty: bool,
}

/// The segment files: cached handles, appends, syncs, reads.
pub struct SegFiles {
    /// Database directory.
    pub dir: PathBuf,
    /// File system.
    pub fs: Arc<dyn FileSystem>,
    /// I/O accounting.
    pub stats: Arc<IoStats>,
    writers: SpinMutex<Writers>,
    /// Serialises syncs (held across their fsyncs; appends never take it).
    sync_lock: Mutex<()>,
    readers: RwLock<HashMap<u64, Arc<dyn RandomAccessFile>>>,
}

impl SegFiles {
    /// Segment files in `dir`.
    pub fn new(dir: &Path, fs: Arc<dyn FileSystem>, stats: Arc<IoStats>) -> SegFiles {
        SegFiles {
            dir: dir.to_path_buf(),
            fs,
            stats,
            writers: SpinMutex::new(Writers {
                open: HashMap::new(),
                dirty: HashSet::new(),
                dir_dirty: false,
            }),
            sync_lock: Mutex::new(()),
            readers: RwLock::new(HashMap::new()),
        }
    }

    /// Path of segment `id`.
    pub fn path(&self, id: u64) -> PathBuf {
        seg_path(&self.dir, id)
    }

    fn writer<'a>(&self, w: &'a mut Writers, id: u64) -> Result<&'a mut Box<dyn WritableFile>> {
        if !w.open.contains_key(&id) {
            if w.open.len() >= MAX_WRITERS {
                // Dropping a handle hands its data to the OS; a dirty
                // segment stays in `dirty` and is synced by reopening it.
                if let Some(&victim) = w.open.keys().find(|&&k| k != id) {
                    w.open.remove(&victim);
                }
            }
            let path = self.path(id);
            let f = if self.fs.exists(&path) {
                self.fs.open_append(&path).ctx(&path)?
            } else {
                // The directory entry is made durable by the next
                // `sync_dirty` / `sync_dir`, before anything relies on it.
                let f = self.fs.create(&path).ctx(&path)?;
                w.dir_dirty = true;
                f
            };
            w.open.insert(id, f);
        }
        Ok(w.open.get_mut(&id).expect("just opened"))
    }

    /// Appends `data` at offset `off` of segment `id` (creating it) and
    /// hands it to the OS. The file must end exactly at `off`: anything else
    /// means it lost data the table counts on (it is then left untouched).
    pub fn append(&self, id: u64, off: u64, data: &[u8], cat: IoCategory) -> Result<()> {
        self.appends().append(id, off, data, cat)
    }

    /// Takes the handles' lock for a run of appends. The store places
    /// records under its state lock and takes this before it lets that go,
    /// so appends reach each file in the order they were placed while
    /// readers, which need the state lock alone, do not wait for the
    /// writes.
    pub fn appends(&self) -> Appends<'_> {
        Appends {
            files: self,
            w: self.writers.lock(),
        }
    }

    /// [`SegFiles::append`] with the handles' lock held.
    fn append_locked(
        &self,
        w: &mut Writers,
        id: u64,
        off: u64,
        data: &[u8],
        cat: IoCategory,
    ) -> Result<()> {
        if data.is_empty() {
            return Ok(());
        }
        let path = self.path(id);
        let f = self.writer(w, id)?;
        if f.len() != off {
            return Err(Error::io(
                &path,
                std::io::Error::other(format!(
                    "segment file ends at {} where the segment table expects {off}",
                    f.len()
                )),
            ));
        }
        f.append(data).and_then(|_| f.flush()).ctx(&path)?;
        w.dirty.insert(id);
        self.stats.add_written(cat, data.len() as u64);
        Ok(())
    }

    /// Counts segment `id` as written since its last sync (its content may
    /// be only in the OS, e.g. written before a process crash).
    pub fn mark_dirty(&self, id: u64) {
        self.writers.lock().dirty.insert(id);
    }

    /// Makes segment `id` durable. The fsync runs without the handles'
    /// lock, so appends to other segments (and this one) go on meanwhile.
    pub fn sync(&self, id: u64) -> Result<()> {
        let _order = self.sync_lock.lock();
        self.sync_ids(&[id], false)
    }

    /// Makes every written segment durable, and the directory entries of
    /// new ones. With `SYNC_FILE_SYSTEM_AT` segments or more to sync, and
    /// a file system that can, in one call
    /// ([`FileSystem::sync_file_system`]): every append was handed to the
    /// OS when it was made. A store of many groups writes to hundreds of
    /// segments between two checkpoints of its journal, and syncing them
    /// one by one took most of a load's time. The fsyncs run without the
    /// handles' lock: appends go on meanwhile (a segment appended to during
    /// its sync stays counted as written).
    pub fn sync_dirty(&self) -> Result<()> {
        let _order = self.sync_lock.lock();
        let ids: Vec<u64> = {
            let w = self.writers.lock();
            let mut ids: Vec<u64> = w.dirty.iter().copied().collect();
            ids.sort_unstable();
            ids
        };
        if ids.len() >= SYNC_FILE_SYSTEM_AT {
            let (dir_dirty, open) = {
                let mut w = self.writers.lock();
                let mut open = Vec::new();
                for id in &ids {
                    w.dirty.remove(id);
                    // The segments still open take appends: their settled
                    // pages are written out first, so that the `syncfs`
                    // leaves an append waiting on a locked last page only
                    // for a few pages' write (`SyncHandle::write_back`).
                    if let Some(h) = w.open.get(id).and_then(|f| f.sync_handle()) {
                        open.push((*id, h));
                    }
                }
                (std::mem::take(&mut w.dir_dirty), open)
            };
            let written = open
                .iter()
                .try_for_each(|(id, h)| h.write_back().map_err(|e| (*id, e)));
            if let Err((id, e)) = written {
                let mut w = self.writers.lock();
                w.dirty.extend(ids.iter().copied());
                w.dir_dirty |= dir_dirty;
                return Err(Error::io(self.path(id), e));
            }
            match self.fs.sync_file_system(&self.dir) {
                Ok(true) => return Ok(()),
                r => {
                    let mut w = self.writers.lock();
                    w.dirty.extend(ids.iter().copied());
                    w.dir_dirty |= dir_dirty;
                    r.ctx(&self.dir)?;
                }
            }
        }
        self.sync_ids(&ids, true)
    }

    /// Syncs the segments of `ids` still counted as written (and the
    /// directory when `dir` says so and it has new entries): under the
    /// handles' lock each file's handle is taken and the segment counted
    /// clean; the fsyncs run after it is let go; a failed one counts its
    /// segment written again. Called under `sync_lock`, so that no other
    /// sync returns while a segment it counted on is still being synced.
    fn sync_ids(&self, ids: &[u64], dir: bool) -> Result<()> {
        let mut handles = Vec::with_capacity(ids.len());
        let dir_dirty = {
            let mut w = self.writers.lock();
            for &id in ids {
                if !w.dirty.contains(&id) {
                    continue;
                }
                let path = self.path(id);
                let f = self.writer(&mut w, id)?;
                f.flush().ctx(&path)?;
                match f.sync_handle() {
                    Some(h) => handles.push((id, h)),
                    // No handle: synced under the lock.
                    None => f.sync().ctx(&path)?,
                }
                w.dirty.remove(&id);
            }
            dir && std::mem::take(&mut w.dir_dirty)
        };
        let mut failed = None;
        for (id, h) in &handles {
            if let Err(e) = h.sync() {
                failed = Some((*id, e));
                break;
            }
        }
        if let Some((id, e)) = failed {
            let mut w = self.writers.lock();
            w.dirty.extend(handles.iter().map(|(id, _)| *id));
            w.dir_dirty |= dir_dirty;
            return Err(Error::io(self.path(id), e));
        }
        if dir_dirty {
            if let Err(e) = self.fs.sync_dir(&self.dir) {
                self.writers.lock().dir_dirty = true;
                return Err(Error::io(&self.dir, e));
            }
        }
        Ok(())
    }

    /// Makes the directory entries of new segments durable.
    pub fn sync_dir(&self) -> Result<()> {
        let _order = self.sync_lock.lock();
        self.sync_ids(&[], true)
    }

    /// A reader of segment `id`.
    pub fn reader(&self, id: u64) -> Result<Arc<dyn RandomAccessFile>> {
        if let Some(h) = self.readers.read().get(&id) {
            return Ok(h.clone());
        }
        let path = self.path(id);
        let h: Arc<dyn RandomAccessFile> = Arc::from(self.fs.open_read(&path).ctx(&path)?);
        // On the handle itself: a random-access hint holds for the open
        // file it is given on only.
        h.advise(0, 0, Advice::Random);
        let mut r = self.readers.write();
        if r.len() >= MAX_READERS {
            r.clear();
        }
        r.insert(id, h.clone());
        Ok(h)
    }

    /// Reads `buf.len()` bytes of segment `id` at `off`.
    /// An empty read succeeds without touching the file: a segment the
    /// table lists may have no file yet (segments are created on their first
    /// write, and a crash can drop an unsynced new file's directory entry,
    /// which recovery then counts as an empty segment).
    pub fn read_exact(&self, id: u64, off: u64, buf: &mut [u8], cat: IoCategory) -> Result<()> {
        if buf.is_empty() {
            return Ok(());
        }
        let h = self.reader(id)?;
        h.read_exact_at(off, buf)
            .map_err(|e| Error::io(self.path(id), e))?;
        self.stats.add_read(cat, buf.len() as u64);
        Ok(())
    }

    /// Length of segment `id`'s file (0 when it does not exist).
    pub fn file_len(&self, id: u64) -> Result<u64> {
        let path = self.path(id);
        if let Some(f) = self.writers.lock().open.get(&id) {
            return Ok(f.len());
        }
        if !self.fs.exists(&path) {
            return Ok(0);
        }
        self.fs.file_size(&path).ctx(&path)
    }

    /// Forgets the handles of segment `id`.
    pub fn forget(&self, id: u64) {
        let mut w = self.writers.lock();
        w.open.remove(&id);
        w.dirty.remove(&id);
        drop(w);
        self.readers.write().remove(&id);
    }

    /// Removes segment `id`'s file (a missing file is not an error). The
    /// caller syncs the directory.
    pub fn remove(&self, id: u64) -> Result<()> {
        self.forget(id);
        let path = self.path(id);
        match self.fs.remove(&path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(Error::io(&path, e)),
        }
    }

    /// Cuts segment `id`'s file to its first `keep` bytes (copy, sync,
    /// rename over it, sync the directory).
    pub fn truncate(&self, id: u64, keep: u64) -> Result<()> {
        let path = self.path(id);
        let mut data = vec![0u8; keep as usize];
        if keep > 0 {
            let f = self.fs.open_read(&path).ctx(&path)?;
            f.read_exact_at(0, &mut data).ctx(&path)?;
            self.stats.add_read(IoCategory::ValueStore, keep);
        }
        self.forget(id);
        let tmp = self.dir.join(format!("{id:06}.hseg.new"));
        {
            let mut f = self.fs.create(&tmp).ctx(&tmp)?;
            f.append(&data).and_then(|_| f.sync()).ctx(&tmp)?;
        }
        self.stats.add_written(IoCategory::ValueStore, keep);
        self.fs.rename(&tmp, &path).ctx(&path)?;
        self.fs.sync_dir(&self.dir).ctx(&self.dir)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Segment files on a file system whose per-file syncs of segments
    /// all fail, so that a sync of the segments succeeds only in one call.
    fn files_without_segment_syncs() -> (crate::fs::FaultFs, SegFiles) {
        use crate::fs::{FaultFs, FaultKind, FaultOp, FaultRule};
        let fs = FaultFs::new();
        let dir = Path::new("/segs");
        fs.create_dir_all(dir).unwrap();
        fs.add_rule(FaultRule {
            path_contains: Some(".hseg".into()),
            ..FaultRule::new(FaultOp::Sync, FaultKind::Eio)
        });
        let files = SegFiles::new(dir, Arc::new(fs.clone()), Arc::new(IoStats::default()));
        (fs, files)
    }

    /// The fsyncs of `sync_dirty` run outside the handles' lock; one that
    /// fails counts its segments written again, so the next sync makes them
    /// durable, as a power loss then shows.
    #[test]
    fn a_failed_segment_sync_leaves_its_segments_to_the_next() {
        use crate::fs::{FaultFs, FaultKind, FaultOp, FaultRule};
        let fs = FaultFs::new();
        let dir = Path::new("/segs");
        fs.create_dir_all(dir).unwrap();
        let files = SegFiles::new(dir, Arc::new(fs.clone()), Arc::new(IoStats::default()));
        for id in 0..3 {
            files
                .append(id, 0, b"abcd", IoCategory::ValueStore)
                .unwrap();
        }
        fs.add_rule(FaultRule {
            path_contains: Some(".hseg".into()),
            skip: 1,
            times: Some(1),
            ..FaultRule::new(FaultOp::Sync, FaultKind::Eio)
        });
        assert!(files.sync_dirty().is_err());
        assert!(!files.writers.lock().dirty.is_empty());
        files.sync_dirty().unwrap();
        let w = files.writers.lock();
        assert!(w.dirty.is_empty() && !w.dir_dirty);
        drop(w);
        fs.crash();
        for id in 0..3 {
            assert_eq!(fs.durable_len(&files.path(id)), Some(4), "segment {id}");
        }
    }

    #[test]
    fn many_dirty_segments_sync_in_one_call() {
        let (fs, files) = files_without_segment_syncs();
        // More segments than writers kept open: one file-system sync for
        // all of them, which a power loss then keeps.
        let n = MAX_WRITERS as u64 + 8;
        for id in 0..n {
            files
                .append(id, 0, b"abcd", IoCategory::ValueStore)
                .unwrap();
        }
        files.sync_dirty().unwrap();
        let w = files.writers.lock();
        assert!(w.dirty.is_empty() && !w.dir_dirty);
        drop(w);
        fs.crash();
        for id in 0..n {
            assert_eq!(fs.durable_len(&files.path(id)), Some(4), "segment {id}");
        }
    }

    #[test]
    fn a_few_dirty_segments_sync_one_by_one() {
        let (_fs, files) = files_without_segment_syncs();
        for id in 0..3u64 {
            files.append(id, 0, b"abc", IoCategory::ValueStore).unwrap();
        }
        // The per-segment sync is taken, and fails.
        assert!(files.sync_dirty().is_err());
        assert_eq!(files.writers.lock().dirty.len(), 3);
    }

    #[test]
    fn place_rollback_and_encoding() {
        let geo = Geometry::new(1 << 20, 64 << 10, 16 << 10, 0.25);
        assert_eq!(geo.groups, 12);
        assert_eq!(geo.reserved_units, 16);
        let mut t = Table::new(geo);
        let (mut allocs, mut undo) = (Vec::new(), Vec::new());
        let h = geo.gc_headroom();
        let (s, o) = t.place(3, 1000, h, &mut allocs, &mut undo).unwrap();
        assert_eq!((o, allocs.len()), (0, 1));
        assert_eq!(allocs[0].seg.kind, SegKind::Main);
        let (s2, o2) = t.place(3, 1000, h, &mut allocs, &mut undo).unwrap();
        assert_eq!((s2, o2), (s, 1000));
        // Overflow into a log segment.
        let (s3, o3) = t.place(3, 64 << 10, h, &mut allocs, &mut undo).unwrap();
        assert_ne!(s3, s);
        assert_eq!(o3, 0);
        assert_eq!(t.used_units, 4);
        let enc = t.encode().unwrap();
        let d = Table::decode(&enc).unwrap();
        assert_eq!(d.groups[3].segs, t.groups[3].segs);
        assert_eq!(d.segs, t.segs);
        assert_eq!(d.used_units, 4);
        t.rollback(undo);
        assert!(t.segs.is_empty());
        assert_eq!(t.used_units, 0);
        assert!(t.groups[3].segs.is_empty());
        let mut bad = enc.clone();
        bad[10] ^= 1;
        assert!(Table::decode(&bad).is_none());
    }

    /// The cold data log takes the main segments' unfilled room before the
    /// reserve's.
    #[test]
    fn the_cold_log_takes_the_main_segments_free_room_first() {
        // 12 groups of 64 KiB main segments, 16 log segments of 16 KiB.
        let geo = Geometry::new(1 << 20, 64 << 10, 16 << 10, 0.25);
        let mut t = Table::new(geo);
        let (mut allocs, mut undo) = (Vec::new(), Vec::new());
        // Every main segment 48 KiB full: 12 × 16 KiB of room, 12 units.
        for g in 0..12 {
            t.place(g, 48 << 10, 0, &mut allocs, &mut undo).unwrap();
        }
        assert_eq!(t.main_slack(), 12 * (16 << 10));
        // One log segment in use; a cold log of 14 units.
        t.place(0, 20 << 10, 0, &mut allocs, &mut undo).unwrap();
        assert_eq!(t.used_units, 2);
        t.cold_units = 14;
        // Counted against the reserve alone it would leave nothing.
        assert_eq!(t.free_units(), 0);
        t.count_main_slack();
        // 14 - 12 units over the main segments' room: 16 - 2 - 2 free.
        assert_eq!(t.free_units(), 12);
        // Appends to the main segments counted take their room off at
        // once (4 KiB: one unit).
        t.place(7, 4 << 10, 0, &mut allocs, &mut undo).unwrap();
        assert_eq!(t.main_appended, 4 << 10);
        assert_eq!(t.free_units(), 11);
        // A GC step opens group 5's next main segment: not counted, its
        // appends take nothing off.
        t.groups[5].sealed = true;
        t.place(5, 4 << 10, 0, &mut allocs, &mut undo).unwrap();
        assert_eq!(t.main_appended, 4 << 10);
        // Its new main segment is its current one; the one the GC
        // replaces is the extra segment a collection may take.
        assert_eq!(t.main_slack(), 10 * (16 << 10) + (12 << 10) + (60 << 10));
    }

    /// A user append into main-segment room the cold data log holds is
    /// refused once it would leave less than GC's headroom free, as a log
    /// segment is; GC's copies are not.
    #[test]
    fn appends_into_room_the_cold_log_holds_are_refused_at_the_headroom() {
        // 12 groups of 64 KiB main segments, 16 log segments of 16 KiB;
        // GC's headroom is one unit.
        let geo = Geometry::new(1 << 20, 64 << 10, 16 << 10, 0.25);
        assert_eq!(geo.gc_headroom(), 1);
        let mut t = Table::new(geo);
        let (mut allocs, mut undo) = (Vec::new(), Vec::new());
        for g in 0..12 {
            t.place(g, 48 << 10, 0, &mut allocs, &mut undo).unwrap();
        }
        // The cold log spans the main segments' 12 units of room and 14 of
        // the reserve: 2 units free.
        t.cold_units = 26;
        t.count_main_slack();
        assert_eq!(t.free_units(), 2);
        let h = geo.gc_headroom();
        // Bytes appended since the count take their units rounded up: the
        // first KiB takes one unit, one is left.
        t.place(3, 1 << 10, h, &mut allocs, &mut undo).unwrap();
        assert_eq!(t.free_units(), 1);
        // Up to 16 KiB in all: nothing more taken.
        t.place(3, 15 << 10, h, &mut allocs, &mut undo).unwrap();
        assert_eq!(t.free_units(), 1);
        // The next unit would leave none: refused, nothing changed.
        let before = t.segs[&t.groups[4].segs[0]].len;
        let e = t.place(4, 4 << 10, h, &mut allocs, &mut undo);
        assert!(matches!(e, Err(PlaceError::Full(_))), "{e:?}");
        assert_eq!(t.segs[&t.groups[4].segs[0]].len, before);
        assert_eq!(t.free_units(), 1);
        // GC's copies may use it.
        t.place(4, 4 << 10, 0, &mut allocs, &mut undo).unwrap();
        assert_eq!(t.free_units(), 0);
        // With the cold log inside the main segments' room, appends take
        // nothing from the reserve and are never refused.
        t.cold_units = 0;
        t.place(5, 4 << 10, h, &mut allocs, &mut undo).unwrap();
    }

    /// GC's overdraft lets its copies take log segments past the reserve,
    /// up to the overdraft in all, counting what the store is over already;
    /// user appends never take it.
    #[test]
    fn gc_overdraft_caps_how_far_copies_pass_the_reserve() {
        // 12 groups of 64 KiB, 16 log segments of 16 KiB.
        let geo = Geometry::new(1 << 20, 64 << 10, 16 << 10, 0.25);
        let mut t = Table::new(geo);
        let (mut allocs, mut undo) = (Vec::new(), Vec::new());
        // Group 0: its main segment, then the whole reserve.
        t.place(0, 64 << 10, 0, &mut allocs, &mut undo).unwrap();
        for _ in 0..16 {
            t.place(0, 16 << 10, 0, &mut allocs, &mut undo).unwrap();
        }
        assert_eq!((t.free_units(), t.over_units()), (0, 0));
        assert!(t.place(0, 16 << 10, 0, &mut allocs, &mut undo).is_err());
        t.gc_overdraft = 4;
        for _ in 0..3 {
            t.place(0, 16 << 10, 0, &mut allocs, &mut undo).unwrap();
        }
        assert_eq!(t.over_units(), 3);
        // A user append does not take it.
        assert!(t.place(0, 16 << 10, 1, &mut allocs, &mut undo).is_err());
        t.place(0, 16 << 10, 0, &mut allocs, &mut undo).unwrap();
        assert_eq!(t.over_units(), 4);
        assert!(t.place(0, 16 << 10, 0, &mut allocs, &mut undo).is_err());
        // The next step's overdraft counts the units still over.
        t.gc_overdraft = 0;
        assert!(t.place(0, 16 << 10, 0, &mut allocs, &mut undo).is_err());
        t.gc_overdraft = 4;
        assert!(t.place(0, 16 << 10, 0, &mut allocs, &mut undo).is_err());
    }

    /// Writers are paced over the last half of the way from the low
    /// watermark to GC's headroom.
    #[test]
    fn writers_are_paced_as_the_reserve_runs_out() {
        // 32 log segments; headroom 2, low watermark 8: paced below 5 free.
        let geo = Geometry::new(1 << 20, 64 << 10, 16 << 10, 0.5);
        assert_eq!((geo.reserved_units, geo.gc_headroom()), (32, 2));
        let mut t = Table::new(geo);
        let depth_at = |t: &mut Table, free: u64| {
            t.used_units = 32 - free;
            t.pause_depth(8)
        };
        assert_eq!(depth_at(&mut t, 32), 0.0);
        assert_eq!(depth_at(&mut t, 5), 0.0);
        assert!((depth_at(&mut t, 4) - 1.0 / 3.0).abs() < 1e-9);
        assert!((depth_at(&mut t, 3) - 2.0 / 3.0).abs() < 1e-9);
        assert_eq!(depth_at(&mut t, 2), 1.0);
        assert_eq!(depth_at(&mut t, 0), 1.0);
    }

    /// Groups keep the hotness bound their last GC set; a version 1 table,
    /// which has none, reads with 0.
    #[test]
    fn hot_seq_roundtrips_and_version_1_reads_without_it() {
        let geo = Geometry::new(1 << 20, 64 << 10, 16 << 10, 0.25);
        let mut t = Table::new(geo);
        t.groups[5].hot_seq = 123_456;
        t.groups[5].write_volume = 7;
        let d = Table::decode(&t.encode().unwrap()).unwrap();
        assert_eq!(
            (d.groups[5].hot_seq, d.groups[5].write_volume),
            (123_456, 7)
        );
        assert!(d
            .groups
            .iter()
            .enumerate()
            .all(|(i, g)| i == 5 || g.hot_seq == 0));

        // The same table as version 1 wrote it: no hot_seq per group.
        t.groups[5].hot_seq = 0;
        let v2 = t.encode().unwrap();
        let groups_at = v2.len() - 4 - 3 * geo.groups as usize;
        let mut v1 = v2[..groups_at].to_vec();
        v1[4] = 1;
        for g in &t.groups {
            put_varint64(&mut v1, g.segs.len() as u64);
            put_varint64(&mut v1, g.write_volume);
        }
        let c = mask(crc(&v1));
        v1.extend_from_slice(&c.to_le_bytes());
        let d = Table::decode(&v1).unwrap();
        assert_eq!(d.groups[5].write_volume, 7);
        assert!(d.groups.iter().all(|g| g.hot_seq == 0));
        // A version this build does not know is refused, its checksum
        // intact.
        let mut v3 = v2[..v2.len() - 4].to_vec();
        v3[4] = 3;
        let c = mask(crc(&v3));
        v3.extend_from_slice(&c.to_le_bytes());
        assert!(Table::decode(&v3).is_none());
    }

    #[test]
    fn a_sealed_group_continues_in_a_fresh_main_segment() {
        // 4 groups of 64 KiB, 2 log segments of 16 KiB.
        let geo = Geometry::new(288 << 10, 64 << 10, 16 << 10, 32.0 / 288.0);
        assert_eq!((geo.groups, geo.reserved_units), (4, 2));
        let mut t = Table::new(geo);
        let (mut a, mut u) = (Vec::new(), Vec::new());
        let (m1, _) = t.place(1, 60 << 10, 0, &mut a, &mut u).unwrap();
        let (l1, _) = t.place(1, 10 << 10, 0, &mut a, &mut u).unwrap();
        assert_eq!(
            (t.segs[&m1].kind, t.segs[&l1].kind),
            (SegKind::Main, SegKind::Log)
        );
        // Sealed, with the log segment's room unused: the next record, and
        // those after it, go to a new main segment; the reserve is not
        // touched, even when its headroom is all that is left.
        t.groups[1].sealed = true;
        u.clear();
        let before = t.used_units;
        let (m2, o) = t.place(1, 1000, 1, &mut a, &mut u).unwrap();
        assert_eq!((t.segs[&m2].kind, o), (SegKind::Main, 0));
        assert_eq!(t.place(1, 1000, 1, &mut a, &mut u).unwrap(), (m2, 1000));
        assert_eq!(t.used_units, before);
        assert!(!t.groups[1].sealed);
        assert_eq!(t.groups[1].segs, vec![m1, l1, m2]);
        // Undone in reverse: the group is sealed again.
        t.rollback(std::mem::take(&mut u));
        assert!(t.groups[1].sealed);
        assert_eq!(t.groups[1].segs, vec![m1, l1]);
        assert_eq!(t.used_units, before);
    }

    #[test]
    fn segments_of_the_older_codec_take_no_more_records() {
        // 4 groups of 64 KiB, 2 log segments of 16 KiB.
        let geo = Geometry::new(288 << 10, 64 << 10, 16 << 10, 32.0 / 288.0);
        let mut t = Table::new(geo);
        let (mut a, mut u) = (Vec::new(), Vec::new());
        let (m1, _) = t.place(1, 1000, 0, &mut a, &mut u).unwrap();
        assert_eq!(t.place(1, 1000, 0, &mut a, &mut u).unwrap(), (m1, 1000));
        assert_eq!(t.main_slack(), 4 * (64 << 10) - 2000);
        // An upgraded store: `m1` is in the older codec. Its room is not
        // free, and the group continues in a new (log) segment.
        t.legacy_below = t.next_seg;
        assert_eq!(t.main_slack(), 3 * (64 << 10));
        let (l1, o) = t.place(1, 1000, 0, &mut a, &mut u).unwrap();
        assert_eq!((t.segs[&l1].kind, o), (SegKind::Log, 0));
        assert!(l1 >= t.legacy_below);
        assert_eq!(t.place(1, 1000, 0, &mut a, &mut u).unwrap(), (l1, 1000));
        // Other groups are untouched until they write.
        let (m2, _) = t.place(2, 1000, 0, &mut a, &mut u).unwrap();
        assert_eq!(t.segs[&m2].kind, SegKind::Main);
    }

    #[test]
    fn an_inconsistent_table_is_an_error_not_a_panic() {
        let geo = Geometry::new(256 << 10, 64 << 10, 16 << 10, 0.25);
        let mut t = Table::new(geo);
        t.groups[2].segs.push(41);
        t.next_seg = 42;
        let (mut a, mut u) = (Vec::new(), Vec::new());
        assert_eq!(
            t.place(2, 100, 0, &mut a, &mut u),
            Err(PlaceError::Unknown(41))
        );
        assert_eq!(t.encode(), Err(41));
        assert_eq!(t.group_lens(2), Err(41));
        assert_eq!(t.group_lens(1), Ok(vec![]));
    }

    #[test]
    fn a_listed_segment_without_a_file_reads_as_empty() {
        let fs: Arc<dyn FileSystem> = Arc::new(crate::fs::MemFs::new());
        fs.create_dir_all(Path::new("/db")).unwrap();
        let files = SegFiles::new(Path::new("/db"), fs, Arc::new(IoStats::default()));
        assert_eq!(files.file_len(7).unwrap(), 0);
        files
            .read_exact(7, 0, &mut [], IoCategory::ValueStore)
            .unwrap();
        let mut one = [0u8; 1];
        assert!(files
            .read_exact(7, 0, &mut one, IoCategory::ValueStore)
            .is_err());
    }

    #[test]
    fn full_reserve_is_an_error() {
        let geo = Geometry::new(256 << 10, 64 << 10, 16 << 10, 0.25);
        let mut t = Table::new(geo);
        let (mut a, mut u) = (Vec::new(), Vec::new());
        let mut err = None;
        for _ in 0..100 {
            if let Err(e) = t.place(0, 10 << 10, 0, &mut a, &mut u) {
                err = Some(e);
                break;
            }
        }
        assert!(matches!(err, Some(PlaceError::Full(m)) if m.contains("full")));
        assert_eq!(t.used_units, geo.reserved_units);
    }
}
