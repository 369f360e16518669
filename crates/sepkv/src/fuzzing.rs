//! Entry points for fuzzing the on-disk decoders (hidden; not a stable API).
//!
//! One function per decoder takes untrusted bytes and drives the decoder the
//! way the engine does when it reads them from disk: [`data_block`],
//! [`index_block`], [`filter_block`], [`footer`], [`table`] (a whole SSTable
//! opened from the bytes), [`log_records`] (WAL and manifest framing),
//! [`version_edit`], [`manifest`] (a whole manifest replayed), [`write_batch`],
//! [`vlog_records`], [`vlog_state`], [`hashkv_records`], [`hashkv_table`],
//! [`hashkv_journal`], [`identity`] and [`value_pointer`].
//!
//! # Contract
//! Whatever the bytes, none of these functions panics, hangs or allocates
//! much more than its input. Every error is [`Error::Corruption`] naming a
//! file and an offset, except [`identity`], which reports a file without the
//! sepkv magic line as [`Error::NotADatabase`], as the engine does. `None`
//! (from the decoders that answer with an `Option`) means "malformed".
//!
//! # Checksums
//! Most formats are checksummed, so random bytes stop at the first checksum.
//! [`Target::seal`] recomputes the checksums of a (possibly damaged)
//! encoding at the places its own structure names — record framing, block
//! trailers reached from the footer and the index, the footer, value-store
//! records, the segment table, IDENTITY — so fuzzers and tests reach the
//! decoders behind them. [`Target::sample`] builds valid encodings to start
//! from (seed corpora, mutation tests), and [`Target::fuzz`] is the body of
//! every fuzz target under `fuzz/` (the raw and the sealed input, and the
//! contract as oracle).

use crate::batch::decode_batch;
use crate::error::{Error, Result};
use crate::format::checksum::{crc, crc_parts, mask};
use crate::format::record::{encode_record, RecordReader, HEADER_LEN as LOG_HEADER_LEN};
use crate::format::value_record::{self, legacy, Codec, DecodeError};
use crate::fs::{FileSystem, IoCategory, IoStats, MemFs};
use crate::identity::Identity;
use crate::index::cache::BlockCache;
use crate::index::compaction::picker::{self, PickerConfig};
use crate::index::filename::{manifest_name, table_path, CURRENT};
use crate::index::iter::InternalIterator;
use crate::index::key::{compare_internal, internal_key, parse_internal_key, user_key, ValueType};
use crate::index::sstable::{
    Block, BlockBuilder, BlockHandle, BlockIter, BloomFilter, FilterBuilder, Footer, ReadCtx,
    Table, TableBuilder, TableOptions, BLOCK_TRAILER_LEN, FILTER_META_NAME, FOOTER_LEN,
};
use crate::index::version::set::{apply, counters_in_range, total_size};
use crate::index::version::{FileMeta, Version, VersionEdit, VersionSet};
use crate::options::{IndexKind, ValueLayout};
use crate::vstore::hashkv::journal::{self, GroupIntent, Place};
use crate::vstore::hashkv::segment::{Alloc, Geometry, Seg, SegKind, Table as SegTable};
use crate::vstore::hashkv::{HashKvOptions, HashKvStore};
use crate::vstore::vlog::{self, VlogOptions, VlogStore};
use crate::vstore::{ValuePointer, ValueRecord, ValueStore};
use crate::WriteBatch;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

/// Levels of the version the manifest targets replay into.
const LEVELS: usize = 7;
/// Most entries any wrapper visits in one direction (bounds the work on
/// large inputs; every loop below terminates anyway).
const MAX_STEPS: usize = 100_000;

fn corruption(file: &str, offset: u64, reason: impl Into<String>) -> Error {
    Error::corruption(file, offset, reason)
}

fn bytewise(a: &[u8], b: &[u8]) -> std::cmp::Ordering {
    a.cmp(b)
}

/// Walks a block forward, backward and by seeks; returns the entries seen
/// forward. `check(key, value)` validates each entry forward.
fn walk_block(
    data: &[u8],
    file: &str,
    cmp: crate::index::sstable::Cmp,
    mut check: impl FnMut(&[u8], &[u8]) -> Result<()>,
) -> Result<usize> {
    let block = Arc::new(Block::new(data.to_vec()).map_err(|r| corruption(file, 0, r))?);
    let mut it = BlockIter::new(block.clone(), cmp);
    let fail = |it: &BlockIter| it.corruption().map(|r| corruption(file, 0, r));
    it.seek_to_first();
    let mut keys = Vec::new();
    while it.valid() && keys.len() < MAX_STEPS {
        check(it.key(), it.value())?;
        keys.push(it.key().to_vec());
        it.next();
    }
    if let Some(e) = fail(&it) {
        return Err(e);
    }
    it.seek_to_last();
    let mut back = 0;
    while it.valid() && back < MAX_STEPS.min(keys.len() + 1) {
        let _ = it.value();
        it.prev();
        back += 1;
    }
    if let Some(e) = fail(&it) {
        return Err(e);
    }
    let probes = [
        keys.first().cloned(),
        keys.get(keys.len() / 2).cloned(),
        keys.last().cloned(),
        Some(Vec::new()),
        Some(vec![0xff; 12]),
    ];
    for target in probes.into_iter().flatten() {
        let mut it = BlockIter::new(block.clone(), cmp);
        it.seek(&target);
        if it.valid() {
            it.prev();
            it.next();
            it.next();
        }
        if let Some(e) = fail(&it) {
            return Err(e);
        }
    }
    Ok(keys.len())
}

/// Decodes the contents of a data block (internal keys to values, no
/// trailer): every entry forward, then backward, then seeks. Returns the
/// number of entries.
///
/// # Errors
/// `Corruption` for a malformed block or entry.
pub fn data_block(data: &[u8]) -> Result<usize> {
    walk_block(data, "data block", compare_internal, |k, _| {
        parse_internal_key(k)
            .map(|_| ())
            .ok_or_else(|| corruption("data block", 0, "unparsable internal key"))
    })
}

/// Decodes the contents of an index block: every separator key with the
/// block handle it maps to. Returns the number of entries.
///
/// # Errors
/// `Corruption` for a malformed block, entry or handle.
pub fn index_block(data: &[u8]) -> Result<usize> {
    walk_block(data, "index block", compare_internal, |_, v| {
        BlockHandle::decode_exact(v)
            .map(|_| ())
            .ok_or_else(|| corruption("index block", 0, "malformed block handle in index block"))
    })
}

/// Decodes a bloom filter block and asks it about a few keys. Returns how
/// many of them it may contain.
///
/// # Errors
/// `Corruption` for a malformed filter.
pub fn filter_block(data: &[u8]) -> Result<usize> {
    let f = BloomFilter::parse(data.to_vec()).map_err(|r| corruption("filter block", 0, r))?;
    let keys: [&[u8]; 5] = [b"", b"a", b"key-00000001", b"\xff\xff", data];
    Ok(keys.iter().filter(|k| f.may_contain(k)).count())
}

/// Decodes a table footer (exactly `FOOTER_LEN` bytes, or the last ones
/// of a longer input). Returns `(metaindex offset, index offset)`.
///
/// # Errors
/// `Corruption` for a malformed footer.
pub fn footer(data: &[u8]) -> Result<(u64, u64)> {
    let bytes = &data[data.len().saturating_sub(FOOTER_LEN)..];
    let f = Footer::decode(bytes).map_err(|r| corruption("footer", 0, r))?;
    Ok((f.metaindex.offset, f.index.offset))
}

/// Opens `data` as a whole SSTable (through the in-memory file system and
/// the block cache) and reads it: every entry forward and backward, seeks and
/// point lookups of some of its keys, and a full verification. Returns the
/// number of entries seen forward.
///
/// # Errors
/// `Corruption` naming the table file and the offset of the damage.
pub fn table(data: &[u8]) -> Result<usize> {
    let fs = MemFs::new();
    let dir = Path::new("db");
    let path = table_path(dir, 7);
    write_file(&fs, &path, data)?;
    let file = fs.open_read(&path).map_err(|e| Error::io(&path, e))?;
    let stats = Arc::new(IoStats::default());
    let cache = Arc::new(BlockCache::new(1 << 20));
    let t = Arc::new(Table::open(
        Arc::from(file),
        path,
        7,
        data.len() as u64,
        Some(cache),
        stats,
        IoCategory::UserRead,
    )?);
    let ctx = ReadCtx {
        category: IoCategory::UserRead,
        fill_cache: true,
    };
    let mut it = t.iter(ctx);
    it.seek_to_first();
    let mut keys = Vec::new();
    while it.valid() && keys.len() < MAX_STEPS {
        keys.push(it.key().to_vec());
        it.next();
    }
    it.status()?;
    it.seek_to_last();
    let mut back = 0;
    while it.valid() && back < MAX_STEPS.min(keys.len() + 1) {
        it.prev();
        back += 1;
    }
    it.status()?;
    let probes = [
        keys.first(),
        keys.get(keys.len() / 2),
        keys.last(),
        Some(&Vec::new()),
    ];
    for k in probes.into_iter().flatten() {
        let mut it = t.iter(ctx);
        it.seek(k);
        it.prev();
        it.status()?;
        t.get(k, ctx)?;
        t.get(
            &crate::index::key::seek_key(user_key(k), crate::index::key::MAX_SEQ),
            ctx,
        )?;
    }
    t.verify()?;
    Ok(keys.len())
}

/// Reads every record of a log (manifest framing) up to its end or torn
/// tail, then reads it again as a WAL (log records, which a recycled file
/// follows with an older log's). Returns the number of records of the
/// first reading.
///
/// # Errors
/// `Corruption` with the offset of a damaged record.
pub fn log_records(data: &[u8]) -> Result<usize> {
    let path = Path::new("000001.log");
    let mut r = RecordReader::new(data, path);
    let mut n = 0;
    while r.next_record()?.is_some() {
        n += 1;
    }
    // Read again as WAL 1, which may be a recycled file (log records).
    let mut r = RecordReader::for_log(data, path, 1);
    while r.next_record()?.is_some() {}
    Ok(n)
}

/// Decodes a manifest record payload (a version edit), checks its counters
/// and applies it to an empty version, as manifest replay does. Returns the number of files the
/// edit adds.
///
/// # Errors
/// `Corruption` for a malformed or inconsistent edit.
pub fn version_edit(data: &[u8]) -> Result<usize> {
    let file = "MANIFEST-000001";
    let edit = VersionEdit::decode(data).map_err(|r| corruption(file, 0, r))?;
    if !counters_in_range(&edit) {
        return Err(corruption(file, 0, "version edit counter out of range"));
    }
    let v = apply(&Version::empty(LEVELS), &edit, LEVELS).map_err(|r| corruption(file, 0, r))?;
    exercise_version(&v);
    Ok(edit.added.len())
}

/// Replays `data` as a whole manifest (records of version edits) through
/// the version set's recovery, then runs the compaction picker over the
/// recovered version. Returns the number of files in it.
///
/// # Errors
/// `Corruption` for damaged framing or a malformed or inconsistent edit.
pub fn manifest(data: &[u8]) -> Result<usize> {
    let fs = Arc::new(MemFs::new());
    let dir = Path::new("db");
    write_file(
        fs.as_ref(),
        &dir.join(CURRENT),
        format!("{}\n", manifest_name(1)).as_bytes(),
    )?;
    write_file(fs.as_ref(), &dir.join(manifest_name(1)), data)?;
    let vs = VersionSet::recover(dir, fs, Arc::new(IoStats::default()), LEVELS)?;
    let v = vs.current();
    exercise_version(&v);
    Ok(v.files.iter().map(Vec::len).sum())
}

/// What the engine computes from a recovered version before it reads a
/// table: level sizes and the compaction picker's choice.
fn exercise_version(v: &Version) {
    let cfg = PickerConfig {
        levels: LEVELS,
        l0_trigger: 4,
        max_bytes_base: 10 << 20,
        multiplier: 10,
        target_file_size: 2 << 20,
    };
    for l in 0..LEVELS {
        let _ = v.level_bytes(l);
        let _ = total_size(&v.files[l]);
    }
    let _ = picker::pick(v, &cfg, &[]);
    for l in 0..LEVELS - 1 {
        let _ = picker::pick_range(v, &cfg, l, Some(b"a"), Some(b"m"));
    }
    let _ = picker::level_for_flush(v, &cfg, b"a", b"z");
}

/// Decodes a write-ahead-log record payload (a write batch). Returns the
/// number of entries, `None` when malformed.
pub fn write_batch(data: &[u8]) -> Option<usize> {
    let b = decode_batch(data)?;
    Some(b.entries.len())
}

/// Decodes format-1 value-log records ([`legacy::decode_vlog`], the codec
/// of the value-log files a format-1 database wrote) back to back from the
/// start of `data`, as recovery's scan does. Returns the number of intact records before the
/// first truncated, zeroed or damaged one.
///
/// # Errors
/// `Corruption` when the first record is damaged (not truncated or zero).
pub fn vlog_records(data: &[u8]) -> Result<usize> {
    let mut pos = 0;
    let mut n = 0;
    loop {
        match Codec::VlogV1.decode(&data[pos..]) {
            Ok(r) => {
                let _ = (r.kind.holds_value(), r.flags, r.seq);
                pos += r.len;
                n += 1;
            }
            Err(DecodeError::Checksum) if n == 0 => {
                return Err(corruption("000001.vlog", 0, "value-log record damaged"));
            }
            Err(_) => return Ok(n),
        }
    }
}

/// Decodes the value log's persisted state (tail and checkpoint), then
/// opens a small value log with it and reads from it. Returns the number of
/// values still readable.
///
/// # Errors
/// `Corruption` for a malformed state.
pub fn vlog_state(data: &[u8]) -> Result<usize> {
    vlog::decode_state(data).ok_or_else(|| corruption("MANIFEST", 0, "bad value-log state"))?;
    let dir = Path::new("db");
    let fs = mem_fs(dir)?;
    let ptrs = {
        let s = VlogStore::open(
            dir,
            fs.clone(),
            Arc::new(IoStats::default()),
            vlog_opts(),
            None,
        )?;
        let ptrs = s.append(&sample_values(6, 300))?;
        s.sync()?;
        ptrs
    };
    let s = VlogStore::open(
        dir,
        fs,
        Arc::new(IoStats::default()),
        vlog_opts(),
        Some(data),
    )?;
    let vals = sample_values(6, 300);
    let mut n = 0;
    for (v, p) in vals.iter().zip(&ptrs) {
        if s.read(v.key, p)?.is_some() {
            n += 1;
        }
        let _ = s.contains(p);
    }
    // Enough to fill the active file and start the next one.
    s.append(&sample_values(8, 300))?;
    let _ = s.space();
    Ok(n)
}

/// Decodes format-1 HashKV segment records ([`legacy::decode_hashkv`],
/// the codec of the segments a format-1 database wrote) back to back from
/// the start of `data`, as recovery and GC scans do. Returns the number of intact records.
///
/// # Errors
/// `Corruption` when the first record is damaged (not truncated or zero).
pub fn hashkv_records(data: &[u8]) -> Result<usize> {
    let mut pos = 0;
    let mut n = 0;
    loop {
        let rest = &data[pos..];
        let _ = Codec::HashKvV1.announced_len(rest);
        match Codec::HashKvV1.decode(rest) {
            Ok(r) => {
                let _ = (r.kind, r.seq);
                pos += r.len;
                n += 1;
            }
            Err(DecodeError::Checksum) if n == 0 => {
                return Err(corruption("000001.hseg", 0, "hashkv record damaged"));
            }
            Err(_) => return Ok(n),
        }
    }
}

/// Decodes a HashKV segment table, works on it as the store does (encode,
/// views, placements), then opens a store whose manifest holds it. Returns
/// the number of groups.
///
/// # Errors
/// `Corruption` for a malformed or inconsistent table.
pub fn hashkv_table(data: &[u8]) -> Result<usize> {
    let mut t = SegTable::decode(data)
        .ok_or_else(|| corruption("MANIFEST", 0, "bad hashkv segment table"))?;
    let enc = t.encode().map_err(|id| {
        corruption(
            "MANIFEST",
            0,
            format!("segment table lists unknown segment {id}"),
        )
    })?;
    let again = SegTable::decode(&enc)
        .ok_or_else(|| corruption("MANIFEST", 0, "segment table does not re-encode"))?;
    let groups = again.groups.len();
    let _ = (t.listed(), t.free_units(), t.geo.gc_headroom());
    for g in 0..t.geo.groups.min(64) {
        let _ = t.group_lens(g);
    }
    let mut allocs = Vec::new();
    let mut undo = Vec::new();
    for g in 0..t.geo.groups.min(8) {
        let _ = t.place(g, 100, 0, &mut allocs, &mut undo);
        // A record larger than any segment of the sample geometries (record
        // lengths are below 4 GiB).
        let _ = t.place(g, 1 << 20, 0, &mut allocs, &mut undo);
    }
    t.rollback(undo);
    let dir = Path::new("db");
    let s = HashKvStore::open(
        dir,
        mem_fs(dir)?,
        Arc::new(IoStats::default()),
        hashkv_opts(),
        Some(data),
    )?;
    // Appends place records by the decoded geometry, which may well have no
    // room left: that is a full store, not damage.
    match s.append(&sample_values(4, 200)) {
        Ok(_) | Err(Error::ValueStoreFull(_)) => {}
        Err(e) => return Err(e),
    }
    let _ = (s.space(), s.figures());
    Ok(groups)
}

/// Replays HashKV journals. `data` is a list of journal entries, each
/// `journal:u8 len:u16le payload[len]` (the last one may be cut short): an
/// even `journal` appends the payload to the GC journal, an odd one to the
/// write journal, each framed as the engine frames it (damage to the framing
/// itself is [`log_records`]' business). Every entry is decoded, then a
/// store is opened over the two journals, which replays them. Returns the
/// number of entries.
///
/// # Errors
/// `Corruption` for a malformed entry or one inconsistent with the store.
pub fn hashkv_journal(data: &[u8]) -> Result<usize> {
    let (gc, write, n) = frame_journals(data);
    for (name, log) in [(journal::GC_JOURNAL, &gc), ("000001.hjnl", &write)] {
        let path = Path::new(name);
        let mut r = RecordReader::new(log, path);
        while let Some((off, rec)) = r.next_record()? {
            if journal::decode(rec).is_none() {
                return Err(Error::corruption(path, off, "malformed journal entry"));
            }
        }
    }
    let dir = Path::new("db");
    let fs = mem_fs(dir)?;
    if !gc.is_empty() {
        write_file(fs.as_ref(), &dir.join(journal::GC_JOURNAL), &gc)?;
    }
    write_file(fs.as_ref(), &journal::journal_path(dir, 1), &write)?;
    let s = HashKvStore::open(dir, fs, Arc::new(IoStats::default()), hashkv_opts(), None)?;
    match s.append(&sample_values(4, 200)) {
        Ok(_) | Err(Error::ValueStoreFull(_)) => {}
        Err(e) => return Err(e),
    }
    let _ = (s.space(), s.figures());
    Ok(n)
}

/// Splits [`hashkv_journal`]'s input into the framed GC and write journals;
/// also returns the number of entries.
fn frame_journals(mut data: &[u8]) -> (Vec<u8>, Vec<u8>, usize) {
    let (mut gc, mut write, mut n) = (Vec::new(), Vec::new(), 0);
    while let Some((&which, rest)) = data.split_first() {
        let (len, rest) = match rest {
            [a, b, rest @ ..] => (u16::from_le_bytes([*a, *b]) as usize, rest),
            _ => (0, &[][..]),
        };
        let (payload, rest) = rest.split_at(len.min(rest.len()));
        encode_record(if which % 2 == 0 { &mut gc } else { &mut write }, payload);
        n += 1;
        data = rest;
    }
    (gc, write, n)
}

/// Decodes an `IDENTITY` file.
///
/// # Errors
/// `NotADatabase` without the magic line or for an older format version;
/// `FormatTooNew` for a newer one; `Corruption` otherwise.
pub fn identity(data: &[u8]) -> Result<String> {
    Identity::decode(Path::new("db/IDENTITY"), data).map(|id| id.describe())
}

/// Decodes a value pointer, then resolves it in a small value log and a
/// small HashKV store (one read, a batch read, the containment check, the
/// garbage note). Returns the values found; `None` when the pointer is
/// malformed.
///
/// # Errors
/// `Corruption` when the pointer addresses damaged or foreign bytes.
pub fn value_pointer(data: &[u8]) -> Option<Result<usize>> {
    let p = ValuePointer::decode(data)?;
    Some(resolve(&p))
}

/// The key every pointer is resolved for.
const POINTER_KEY: &[u8] = b"key-0000";
/// A pointer to `POINTER_KEY`'s value in both pointer stores.
const POINTER_SAMPLE: ValuePointer = ValuePointer {
    file_id: 1,
    offset: 0,
    length: 728,
    aux: 0,
};

fn resolve(p: &ValuePointer) -> Result<usize> {
    let stores = pointer_stores()?;
    let mut found = 0;
    for s in [&stores.vlog as &dyn ValueStore, &stores.hashkv] {
        found += usize::from(s.read(POINTER_KEY, p)?.is_some());
        let reqs = vec![(POINTER_KEY.to_vec(), *p); 2];
        found += s.read_many(&reqs)?.iter().flatten().count();
        let _ = s.contains(p);
        s.note_garbage(p);
    }
    Ok(found)
}

struct PointerStores {
    vlog: VlogStore,
    hashkv: HashKvStore,
}

/// The stores pointers are resolved in, built once. Each starts with
/// `POINTER_KEY`'s value at [`POINTER_SAMPLE`] (a 728-byte record at
/// offset 0 of file or segment 1), then holds a few more values; the last
/// ones of the HashKV store stay in its write cache.
fn pointer_stores() -> Result<&'static PointerStores> {
    static STORES: OnceLock<std::result::Result<PointerStores, Error>> = OnceLock::new();
    STORES
        .get_or_init(|| {
            let fs = mem_fs(Path::new("v"))?;
            fs.create_dir_all(Path::new("h"))
                .map_err(|e| Error::io("h", e))?;
            let stats = Arc::new(IoStats::default());
            let vlog =
                VlogStore::open(Path::new("v"), fs.clone(), stats.clone(), vlog_opts(), None)?;
            let mut o = hashkv_opts();
            o.write_cache_size = 2000;
            let hashkv = HashKvStore::open(Path::new("h"), fs, stats, o, None)?;
            let values = sample_values(8, 300);
            let (first, rest) = values.split_at(1);
            let value = [b'v'; 700];
            // One record codec: 22 header bytes, an 8-byte key, 698 bytes.
            for (s, len) in [(&vlog as &dyn ValueStore, 698), (&hashkv, 698)] {
                let head = ValueRecord {
                    value: &value[..len],
                    ..first[0]
                };
                let p = s.append(&[head])?;
                if p != [POINTER_SAMPLE] {
                    return Err(corruption("v", 0, "pointer stores laid out unexpectedly"));
                }
                s.append(rest)?;
            }
            Ok(PointerStores { vlog, hashkv })
        })
        .as_ref()
        .map_err(Clone::clone)
}

fn vlog_opts() -> VlogOptions {
    VlogOptions::new(2048, 4096)
}

fn hashkv_opts() -> HashKvOptions {
    HashKvOptions {
        value_threshold: 1,
        capacity: 64 << 10,
        main_segment_size: 8 << 10,
        log_segment_size: 2 << 10,
        reserved_ratio: 0.25,
        write_cache_size: 0,
        hotness: true,
        journal: true,
        journal_values: true,
        journal_size: 1 << 20,
        cold_file_size: 4096,
        cold_gc_chunk_size: 4096,
        gc_step_bytes: 4 << 20,
        cold_gc_ratio: 0.5,
        legacy_below: Some(0),
        cold_legacy_below: Some(0),
    }
}

/// Values `key-NNNN` of `len` bytes each.
fn sample_values(n: usize, len: usize) -> Vec<ValueRecord<'static>> {
    static KEYS: OnceLock<Vec<Vec<u8>>> = OnceLock::new();
    static VALUE: [u8; 1024] = [b'v'; 1024];
    let keys = KEYS.get_or_init(|| {
        (0..64)
            .map(|i| format!("key-{i:04}").into_bytes())
            .collect()
    });
    keys.iter()
        .take(n)
        .enumerate()
        .map(|(i, k)| ValueRecord {
            key: k,
            seq: i as u64 + 1,
            value: &VALUE[..len.min(VALUE.len())],
        })
        .collect()
}

/// An in-memory file system holding the directory `dir`.
fn mem_fs(dir: &Path) -> Result<Arc<MemFs>> {
    let fs = Arc::new(MemFs::new());
    fs.create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    Ok(fs)
}

fn write_file(fs: &dyn FileSystem, path: &Path, data: &[u8]) -> Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    fs.create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    let mut f = fs.create(path).map_err(|e| Error::io(path, e))?;
    f.append(data).map_err(|e| Error::io(path, e))
}

/// The decoders, for loops over all of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// [`data_block`].
    DataBlock,
    /// [`index_block`].
    IndexBlock,
    /// [`filter_block`].
    FilterBlock,
    /// [`footer`].
    Footer,
    /// [`table`].
    Table,
    /// [`log_records`].
    LogRecords,
    /// [`version_edit`].
    VersionEdit,
    /// [`manifest`].
    Manifest,
    /// [`write_batch`].
    WriteBatch,
    /// [`vlog_records`].
    VlogRecords,
    /// [`vlog_state`].
    VlogState,
    /// [`hashkv_records`].
    HashkvRecords,
    /// [`hashkv_table`].
    HashkvTable,
    /// [`hashkv_journal`].
    HashkvJournal,
    /// [`identity`].
    Identity,
    /// [`value_pointer`].
    ValuePointer,
}

impl Target {
    /// Every decoder.
    pub const ALL: [Target; 16] = [
        Target::DataBlock,
        Target::IndexBlock,
        Target::FilterBlock,
        Target::Footer,
        Target::Table,
        Target::LogRecords,
        Target::VersionEdit,
        Target::Manifest,
        Target::WriteBatch,
        Target::VlogRecords,
        Target::VlogState,
        Target::HashkvRecords,
        Target::HashkvTable,
        Target::HashkvJournal,
        Target::Identity,
        Target::ValuePointer,
    ];

    /// The name of the fuzz target (`snake_case`).
    pub fn name(self) -> &'static str {
        match self {
            Target::DataBlock => "data_block",
            Target::IndexBlock => "index_block",
            Target::FilterBlock => "filter_block",
            Target::Footer => "footer",
            Target::Table => "table",
            Target::LogRecords => "log_records",
            Target::VersionEdit => "version_edit",
            Target::Manifest => "manifest",
            Target::WriteBatch => "write_batch",
            Target::VlogRecords => "vlog_records",
            Target::VlogState => "vlog_state",
            Target::HashkvRecords => "hashkv_records",
            Target::HashkvTable => "hashkv_table",
            Target::HashkvJournal => "hashkv_journal",
            Target::Identity => "identity",
            Target::ValuePointer => "value_pointer",
        }
    }

    /// Runs the decoder: `Ok(true)` when it accepted the bytes, `Ok(false)`
    /// when an `Option` decoder answered `None`, the error otherwise.
    pub fn run(self, data: &[u8]) -> Result<bool> {
        match self {
            Target::DataBlock => data_block(data).map(|_| true),
            Target::IndexBlock => index_block(data).map(|_| true),
            Target::FilterBlock => filter_block(data).map(|_| true),
            Target::Footer => footer(data).map(|_| true),
            Target::Table => table(data).map(|_| true),
            Target::LogRecords => log_records(data).map(|_| true),
            Target::VersionEdit => version_edit(data).map(|_| true),
            Target::Manifest => manifest(data).map(|_| true),
            Target::WriteBatch => Ok(write_batch(data).is_some()),
            Target::VlogRecords => vlog_records(data).map(|_| true),
            Target::VlogState => vlog_state(data).map(|_| true),
            Target::HashkvRecords => hashkv_records(data).map(|_| true),
            Target::HashkvTable => hashkv_table(data).map(|_| true),
            Target::HashkvJournal => hashkv_journal(data).map(|_| true),
            Target::Identity => identity(data).map(|_| true),
            Target::ValuePointer => value_pointer(data).transpose().map(|r| r.is_some()),
        }
    }

    /// The body of the fuzz target: runs the decoder on `data` as given and
    /// once more sealed ([`Target::seal`]), and checks the contract.
    ///
    /// # Panics
    /// When the decoder fails with an error the contract does not allow (a
    /// panic inside the decoder propagates too): this is the fuzzer's
    /// oracle.
    pub fn fuzz(self, data: &[u8]) {
        self.expect_allowed(data);
        let mut sealed = data.to_vec();
        self.seal(&mut sealed);
        if sealed != data {
            self.expect_allowed(&sealed);
        }
    }

    fn expect_allowed(self, data: &[u8]) {
        match self.run(data) {
            Ok(_) | Err(Error::Corruption { .. }) => {}
            Err(Error::NotADatabase { .. } | Error::FormatTooNew { .. })
                if self == Target::Identity => {}
            Err(e) => panic!("{}: {e:?} is not a corruption error", self.name()),
        }
    }

    /// A valid encoding for the decoder, varied by `seed`.
    pub fn sample(self, seed: u64) -> Vec<u8> {
        let mut rng = Rng::seeded(seed);
        match self {
            Target::DataBlock => {
                let mut b = BlockBuilder::new(1 + rng.below(4) as usize);
                for (k, v) in sample_entries(&mut rng) {
                    b.add(&k, &v);
                }
                b.finish()
            }
            Target::IndexBlock => {
                let mut b = BlockBuilder::new(1);
                let mut off = 0;
                for (k, _) in sample_entries(&mut rng) {
                    let size = 10 + rng.below(4000);
                    b.add(&k, &BlockHandle { offset: off, size }.encode());
                    off += size + BLOCK_TRAILER_LEN as u64;
                }
                b.finish()
            }
            Target::FilterBlock => {
                let mut f = FilterBuilder::new(1 + rng.below(16) as usize);
                for (k, _) in sample_entries(&mut rng) {
                    f.add_key(user_key(&k));
                }
                f.finish()
            }
            Target::Footer => Footer {
                metaindex: BlockHandle {
                    offset: rng.below(1 << 20),
                    size: rng.below(1 << 12),
                },
                index: BlockHandle {
                    offset: rng.below(1 << 20),
                    size: rng.below(1 << 12),
                },
            }
            .encode()
            .to_vec(),
            Target::Table => sample_table(&mut rng),
            Target::LogRecords => {
                let mut v = Vec::new();
                for _ in 0..1 + rng.below(4) {
                    let n = rng.below(40) as usize;
                    let payload = rng.bytes(n);
                    encode_record(&mut v, &payload);
                }
                v
            }
            Target::VersionEdit => sample_edit(&mut rng, 0).encode(),
            Target::Manifest => {
                let mut v = Vec::new();
                for i in 0..1 + rng.below(3) {
                    encode_record(&mut v, &sample_edit(&mut rng, i * 10).encode());
                }
                v
            }
            Target::WriteBatch => {
                let mut b = WriteBatch::new();
                for (k, v) in sample_entries(&mut rng) {
                    let k = user_key(&k);
                    if k.is_empty() {
                        continue;
                    }
                    let _ = if rng.below(3) == 0 {
                        b.delete(k)
                    } else {
                        b.put(k, &v)
                    };
                }
                let mut out = Vec::new();
                b.encode_into(1 + rng.below(1000), &mut out);
                out
            }
            Target::VlogRecords => {
                let mut v = Vec::new();
                for (i, (k, val)) in sample_entries(&mut rng).into_iter().enumerate() {
                    let kind = match rng.below(5) {
                        0 => value_record::Kind::Value,
                        1 => value_record::Kind::Inline,
                        2 => value_record::Kind::Tombstone,
                        3 => value_record::Kind::Relocation,
                        _ => value_record::Kind::GcCopy,
                    };
                    v.extend(legacy::vlog_v1_bytes(
                        kind,
                        rng.below(2) == 0,
                        user_key(&k),
                        i as u64,
                        &val,
                    ));
                }
                v
            }
            Target::VlogState => {
                let mut v = vec![1 + rng.below(2) as u8];
                for _ in 0..if v[0] == 1 { 2 } else { 4 } {
                    v.extend_from_slice(&rng.below(3).to_le_bytes());
                }
                v
            }
            Target::HashkvRecords => {
                let mut v = Vec::new();
                for (i, (k, val)) in sample_entries(&mut rng).into_iter().enumerate() {
                    v.extend(legacy::hashkv_v1_bytes(
                        rng.below(4) == 0,
                        user_key(&k),
                        i as u64,
                        &val,
                    ));
                }
                v
            }
            Target::HashkvTable => sample_seg_table(&mut rng)
                .encode()
                .expect("a sample table lists only its own segments"),
            Target::HashkvJournal => sample_journals(&mut rng),
            Target::Identity => Identity {
                format: crate::FORMAT_VERSION,
                index: [IndexKind::Lsm, IndexKind::Lwc, IndexKind::Hash][rng.below(3) as usize],
                layout: [
                    ValueLayout::Inline,
                    ValueLayout::Vlog,
                    ValueLayout::HashKv,
                    ValueLayout::Trie,
                    ValueLayout::Bands,
                ][rng.below(5) as usize],
                wal: [None, Some(true), Some(false)][rng.below(3) as usize],
                legacy: crate::identity::LegacyFiles {
                    vlog_below: rng.below(3),
                    hseg_below: rng.below(3),
                },
            }
            .encode()
            .into_bytes(),
            Target::ValuePointer => {
                // The value itself; the same place in the cold log (empty);
                // a file that does not exist.
                let p = match rng.below(3) {
                    0 => POINTER_SAMPLE,
                    1 => ValuePointer {
                        aux: 1,
                        ..POINTER_SAMPLE
                    },
                    _ => ValuePointer {
                        file_id: 99,
                        ..POINTER_SAMPLE
                    },
                };
                p.encode()
            }
        }
    }

    /// Recomputes the checksums of `data` where its structure places them
    /// (see the module docs); formats without checksums are left alone.
    /// Never panics.
    pub fn seal(self, data: &mut Vec<u8>) {
        match self {
            Target::Footer => seal_footer(data),
            Target::Table => seal_table(data),
            Target::LogRecords | Target::Manifest => seal_log(data),
            Target::VlogRecords => seal_vlog_records(data),
            Target::HashkvRecords => seal_hashkv_records(data),
            Target::HashkvTable => seal_tail_crc(data),
            Target::Identity => seal_identity(data),
            Target::DataBlock
            | Target::IndexBlock
            | Target::FilterBlock
            | Target::VersionEdit
            | Target::WriteBatch
            | Target::VlogState
            | Target::HashkvJournal
            | Target::ValuePointer => {}
        }
    }
}

/// Recomputes the footer checksum of the last [`FOOTER_LEN`] bytes.
fn seal_footer(data: &mut [u8]) {
    let Some(at) = data.len().checked_sub(FOOTER_LEN) else {
        return;
    };
    let f = &mut data[at..];
    let c = mask(crc(&f[..44])).to_le_bytes();
    f[44..48].copy_from_slice(&c);
}

/// Recomputes the trailer checksum of the block at `h`, if it lies inside
/// `data`.
fn seal_block(data: &mut [u8], h: BlockHandle) {
    let Some((start, end)) = block_range(data, h) else {
        return;
    };
    let Some(trailer) = data.get(end..end + BLOCK_TRAILER_LEN) else {
        return;
    };
    let ty = trailer[0];
    let c = mask(crc_parts(&[&data[start..end], &[ty]])).to_le_bytes();
    data[end + 1..end + BLOCK_TRAILER_LEN].copy_from_slice(&c);
}

/// The byte range of the contents of the block at `h`, if inside `data`.
fn block_range(data: &[u8], h: BlockHandle) -> Option<(usize, usize)> {
    let start = usize::try_from(h.offset).ok()?;
    let end = start.checked_add(usize::try_from(h.size).ok()?)?;
    (end <= data.len()).then_some((start, end))
}

/// Seals every block a reader reaches from the footer, then the footer.
/// Data blocks go first and the index last, so that when blocks overlap the
/// blocks a reader meets first stay valid.
fn seal_table(data: &mut [u8]) {
    let Some(at) = data.len().checked_sub(FOOTER_LEN) else {
        return;
    };
    let mut handles = &data[at..at + 2 * 20];
    let meta = BlockHandle::decode_from(&mut handles);
    let index = BlockHandle::decode_from(&mut handles);
    let region = &mut data[..at];
    if let Some(contents) = index.and_then(|h| block_contents(region, h)) {
        for v in block_values(contents, compare_internal) {
            if let Some(h) = BlockHandle::decode_exact(&v) {
                seal_block(region, h);
            }
        }
    }
    if let Some(contents) = meta.and_then(|h| block_contents(region, h)) {
        if let Ok(block) = Block::new(contents) {
            let mut it = BlockIter::new(Arc::new(block), bytewise);
            it.seek(FILTER_META_NAME.as_bytes());
            if it.valid() && it.key() == FILTER_META_NAME.as_bytes() {
                if let Some(h) = BlockHandle::decode_exact(it.value()) {
                    seal_block(region, h);
                }
            }
        }
    }
    for h in [meta, index].into_iter().flatten() {
        seal_block(region, h);
    }
    seal_footer(data);
}

/// The contents of the block at `h`, if they lie inside `data`.
fn block_contents(data: &[u8], h: BlockHandle) -> Option<Vec<u8>> {
    let (start, end) = block_range(data, h)?;
    Some(data[start..end].to_vec())
}

/// The values of the entries of block contents, in order, up to the first
/// malformed one.
fn block_values(contents: Vec<u8>, cmp: crate::index::sstable::Cmp) -> Vec<Vec<u8>> {
    let Ok(block) = Block::new(contents) else {
        return Vec::new();
    };
    let mut it = BlockIter::new(Arc::new(block), cmp);
    it.seek_to_first();
    let mut out = Vec::new();
    while it.valid() && out.len() < MAX_STEPS {
        out.push(it.value().to_vec());
        it.next();
    }
    out
}

/// Seals every record of a log: header checksums, and the payload checksums
/// of complete records.
fn seal_log(data: &mut [u8]) {
    let mut pos = 0;
    while data.len() - pos >= LOG_HEADER_LEN {
        let rec = &mut data[pos..];
        let len = u32::from_le_bytes([rec[0], rec[1], rec[2], rec[3]]) as usize;
        let end = LOG_HEADER_LEN.saturating_add(len);
        if end <= rec.len() {
            let c = mask(crc(&rec[LOG_HEADER_LEN..end])).to_le_bytes();
            rec[4..8].copy_from_slice(&c);
        }
        let c = mask(crc(&rec[..8])).to_le_bytes();
        rec[8..12].copy_from_slice(&c);
        if end > rec.len() {
            return;
        }
        pos += end;
    }
}

/// Seals value-log records back to back.
fn seal_vlog_records(data: &mut [u8]) {
    let mut pos = 0;
    while data.len() - pos >= legacy::VLOG_HEADER_LEN {
        let rec = &mut data[pos..];
        let word = |i: usize| u32::from_le_bytes([rec[i], rec[i + 1], rec[i + 2], rec[i + 3]]);
        let len = legacy::VLOG_HEADER_LEN
            .saturating_add((word(4) & 0x00ff_ffff) as usize)
            .saturating_add(word(8) as usize);
        if len > rec.len() {
            return;
        }
        let c = mask(crc(&rec[4..len])).to_le_bytes();
        rec[..4].copy_from_slice(&c);
        pos += len;
    }
}

/// Seals HashKV records back to back.
fn seal_hashkv_records(data: &mut [u8]) {
    let mut pos = 0;
    while let Some(len) = legacy::hashkv_announced_len(&data[pos..]) {
        let rec = &mut data[pos..];
        if len > rec.len() {
            return;
        }
        let c = mask(crc(&rec[4..len])).to_le_bytes();
        rec[..4].copy_from_slice(&c);
        pos += len;
    }
}

/// Recomputes a trailing masked CRC-32C of everything before it.
fn seal_tail_crc(data: &mut [u8]) {
    let Some(at) = data.len().checked_sub(4) else {
        return;
    };
    let c = mask(crc(&data[..at])).to_le_bytes();
    data[at..].copy_from_slice(&c);
}

/// Rewrites the `crc=` line of an IDENTITY file for the lines above it.
fn seal_identity(data: &mut Vec<u8>) {
    let at = data
        .windows(4)
        .rposition(|w| w == b"crc=")
        .unwrap_or(data.len());
    data.truncate(at);
    let c = mask(crc(data));
    data.extend_from_slice(format!("crc={c:08x}\n").as_bytes());
}

/// The samples' deterministic generator: `rand`'s seeded standard
/// generator, with the two draws the samples make.
struct Rng(rand::rngs::StdRng);

impl Rng {
    fn seeded(seed: u64) -> Rng {
        Rng(rand::SeedableRng::seed_from_u64(seed))
    }

    fn below(&mut self, n: u64) -> u64 {
        rand::Rng::gen_range(&mut self.0, 0..n.max(1))
    }

    fn bytes(&mut self, n: usize) -> Vec<u8> {
        let mut v = vec![0; n];
        rand::RngCore::fill_bytes(&mut self.0, &mut v);
        v
    }
}

/// Sorted internal keys (small alphabet, shared prefixes) with values.
fn sample_entries(rng: &mut Rng) -> Vec<(Vec<u8>, Vec<u8>)> {
    let n = 1 + rng.below(24) as usize;
    let mut users: Vec<Vec<u8>> = (0..n)
        .map(|_| {
            let len = 1 + rng.below(10) as usize;
            (0..len).map(|_| b'a' + rng.below(4) as u8).collect()
        })
        .collect();
    users.sort();
    users.dedup();
    users
        .into_iter()
        .enumerate()
        .map(|(i, u)| {
            let t =
                [ValueType::Deletion, ValueType::Value, ValueType::Pointer][rng.below(3) as usize];
            let n = rng.below(24) as usize;
            let v = rng.bytes(n);
            (internal_key(&u, 1 + i as u64, t), v)
        })
        .collect()
}

/// An SSTable of a few small blocks, with or without a filter.
fn sample_table(rng: &mut Rng) -> Vec<u8> {
    let fs = MemFs::new();
    let path = PathBuf::from("t.sst");
    let file = match fs.create(&path) {
        Ok(f) => f,
        Err(_) => return Vec::new(),
    };
    let opts = TableOptions {
        block_size: 32 + rng.below(200) as usize,
        restart_interval: 1 + rng.below(4) as usize,
        bloom_bits_per_key: [0, 4, 10][rng.below(3) as usize],
        block_align: rng.below(2) == 0,
    };
    let mut b = TableBuilder::new(
        file,
        path.clone(),
        opts,
        Arc::new(IoStats::default()),
        IoCategory::Flush,
    );
    for (k, v) in sample_entries(rng) {
        if b.add(&k, &v).is_err() {
            return Vec::new();
        }
    }
    if b.finish().is_err() {
        return Vec::new();
    }
    crate::fs::read_all(&fs, &path).unwrap_or_default()
}

/// A version edit adding disjoint files to a few levels.
fn sample_edit(rng: &mut Rng, base: u64) -> VersionEdit {
    let mut e = VersionEdit {
        log_number: Some(base + rng.below(5)),
        next_file_number: Some(base + 100),
        last_sequence: Some(rng.below(1 << 20)),
        ..VersionEdit::default()
    };
    if rng.below(2) == 0 {
        e.value_store_state = Some(rng.bytes(17));
    }
    if rng.below(2) == 0 {
        e.compact_pointers
            .push((1, internal_key(b"m", 3, ValueType::Value)));
    }
    for i in 0..rng.below(4) {
        let lo = format!("{}{}", (b'a' + (2 * i) as u8) as char, base);
        let hi = format!("{}{}", (b'a' + (2 * i + 1) as u8) as char, base);
        e.added.push((
            (base as usize / 10 + 1 + i as usize) % LEVELS,
            FileMeta {
                number: base + i + 1,
                size: rng.below(1 << 20),
                smallest: internal_key(lo.as_bytes(), 5, ValueType::Value),
                largest: internal_key(hi.as_bytes(), 4, ValueType::Deletion),
            },
        ));
    }
    e
}

/// A segment table with a few segments in a few groups.
fn sample_seg_table(rng: &mut Rng) -> SegTable {
    let geo = Geometry {
        groups: 1 + rng.below(6) as u32,
        main_size: 8 << 10,
        log_size: 2 << 10,
        reserved_units: 8,
    };
    let mut t = SegTable::new(geo);
    for g in 0..geo.groups {
        for _ in 0..rng.below(3) {
            let len = 1 + rng.below(2000);
            let _ = t.place(g, len, 0, &mut Vec::new(), &mut Vec::new());
        }
        t.groups[g as usize].write_volume = rng.below(1 << 16);
    }
    t.epoch = rng.below(100);
    if rng.below(2) == 0 {
        let mut cold = vec![1];
        cold.extend_from_slice(&1u64.to_le_bytes());
        cold.extend_from_slice(&0u64.to_le_bytes());
        t.cold_state = Some(cold);
    }
    t
}

/// Journal entries as [`hashkv_journal`] reads them.
fn sample_journals(rng: &mut Rng) -> Vec<u8> {
    let seg = |group: u32, kind: SegKind, units: u32| Seg {
        group,
        kind,
        units,
        cap: if units == 0 {
            8 << 10
        } else {
            units as u64 * (2 << 10)
        },
        len: 0,
    };
    let mut out = Vec::new();
    let mut entry = |journal: u8, payload: Vec<u8>| {
        out.push(journal);
        out.extend_from_slice(&(payload.len() as u16).to_le_bytes());
        out.extend_from_slice(&payload);
    };
    let mut rec = Vec::new();
    value_record::encode(
        &mut rec,
        value_record::Kind::Value,
        0,
        b"key-0000",
        1,
        b"value",
    );
    let allocs = vec![Alloc {
        id: 1,
        seg: seg(0, SegKind::Main, 0),
    }];
    let places = vec![Place {
        seg: 1,
        off: 0,
        len: rec.len() as u32,
    }];
    entry(1, journal::encode_write(&allocs, &places, &rec));
    if rng.below(2) == 0 {
        let places = vec![Place {
            seg: 1,
            off: rec.len() as u64,
            len: rec.len() as u32,
        }];
        entry(1, journal::encode_write(&[], &places, &rec));
    }
    if rng.below(2) == 0 {
        let intent = GroupIntent {
            group: 0,
            old: vec![1],
            new: vec![(
                2,
                Seg {
                    len: rec.len() as u64,
                    ..seg(0, SegKind::Log, 1)
                },
            )],
        };
        entry(0, journal::encode_begin(7, &[intent]));
        if rng.below(2) == 0 {
            entry(0, journal::encode_done(7));
        }
    }
    out
}
