//! The trie over key prefixes (KT-Store §3.1–3.3) and its persistence
//! (§3.5).
//!
//! # The trie
//! Each node is named by its key prefix. A **leaf** owns one active
//! TrieTable, which receives the values of every key under the prefix; all
//! **internal** nodes share one table, TT_IN, which receives keys that end
//! exactly at an internal node (KT-Store §3.2). Leaves hold disjoint key
//! ranges, so tables are in key order across the trie and in write order
//! within themselves (§3.1).
//!
//! Routing a key ([`Trie::place`]) follows the longest matching prefix
//! from the root and creates what is missing on first use (§3.3): a leaf
//! for a next byte no child covers, or an internal node where the key
//! leaves a compressed edge. Edges are compressed (a child's prefix may be
//! several bytes longer than its parent's), so long shared prefixes such
//! as YCSB's `user` cost one node, not one per byte.
//!
//! **Adaptive splitting** (the paper's §3.5 future work): when a leaf's
//! table passes the table size, [`Trie::split`] turns the leaf into an
//! internal node; if the table's keys share a longer prefix than the node
//! (the common prefix of its smallest and largest key), an internal node
//! for that prefix is inserted below, so the next level fans out on the
//! first byte where the keys differ. New writes then go to children created
//! on first use; the old table is sealed and keeps the values it holds. A
//! leaf whose keys are all one key cannot split; its table is rolled.
//!
//! **Fixed levels** (the paper's own §3.5 shape, `trie_fixed_levels`): the
//! store splits a leaf only while it has fewer than the fixed number of
//! nodes above it ([`Trie::level`]) and only when a second key reaches
//! it, so each level fans out on the first byte where keys differ; leaves
//! at the fixed depth never split. The nodes are the same as above, so the
//! trie file needs nothing new.
//!
//! # Persistence: the trie file
//! The trie and the catalog of tables change at append time, where the
//! store has no handle on the index's manifest, so they live in a file of
//! their own, `TRIE`: a log of checksummed records ([`crate::format::record`]
//! framing), each one atomic group of [`Edit`]s. A change is appended and
//! handed to the OS before any value is appended under it (a process crash
//! keeps both); [`ValueStore::sync`](crate::vstore::ValueStore::sync) syncs
//! the trie file after the tables and before the engine syncs its WAL, so
//! the trie is durable before any durable pointer depends on it. When the
//! log grows to four times the size of the state it describes (and at least
//! 64 KiB), it is rewritten as one snapshot record: written to `TRIE.new`,
//! synced, renamed over `TRIE`, directory synced.
//!
//! ```text
//! TRIE    := record*                         (format::record framing)
//! payload := version:u8 (1 or 2)  count:varint32  edit*
//! edit    := 1 prefix:varint32-prefixed  kind:u8  table:varint64 (0 = none)  [rolled:varint64]
//!          | 2 table:varint64                (TT_IN's active table, 0 = none)
//!          | 3 id:varint64  state:u8 (0 active, 1 sealed, 2 sealed in key order)  len:varint64
//!          | 4 id:varint64                   (table deleted)
//!          | 5 next_id:varint64              (ids below are taken)
//! ```
//! For an active table `len` is a length known to be durable (recovery
//! scans on from there); for a sealed one it is the table's final length.
//! Node kinds: 0 a leaf that has rolled nothing, 1 internal, 2 a leaf with
//! `rolled` bytes in tables it sealed by rolling (only in version 2
//! payloads). A payload is written as version 1 unless it holds a kind 2
//! node, so files of stores that never roll a leaf stay readable by
//! binaries that know only version 1; those refuse a version 2 record as
//! malformed. Frozen: format versions 1 and 2.

use crate::error::{Error, IoContext, Result};
use crate::format::coding::{
    get_length_prefixed, get_varint32, get_varint64, put_length_prefixed, put_varint32,
    put_varint64,
};
use crate::format::record::{encode_record, LogEnd, RecordReader, RecordWriter};
use crate::fs::{read_all, FileSystem, IoCategory, IoStats};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Name of the trie file.
pub const TRIE_FILE: &str = "TRIE";
/// Name of the trie file while it is rewritten.
pub const TRIE_TMP: &str = "TRIE.new";

/// A trie node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Node {
    /// Owns the active table of its key range (`None` until first use).
    Leaf {
        /// The active table.
        table: Option<u64>,
        /// Bytes of the tables this leaf sealed by rolling them (its
        /// earlier runs); with the active table's length, what the leaf
        /// took since it was made, which decides when it splits.
        rolled: u64,
    },
    /// Routes to children; keys ending here go to TT_IN.
    Internal,
}

impl Node {
    /// A new leaf: no table yet, nothing rolled.
    pub const EMPTY_LEAF: Node = Node::Leaf {
        table: None,
        rolled: 0,
    };
}

/// Where a key's value goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Place {
    /// The leaf with this prefix.
    Leaf(Vec<u8>),
    /// TT_IN, the table shared by internal nodes.
    Internal,
}

/// The trie. Not thread-safe by itself; the store guards it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Trie {
    nodes: BTreeMap<Vec<u8>, Node>,
    internal_table: Option<u64>,
}

impl Default for Trie {
    fn default() -> Self {
        Self::new()
    }
}

fn lcp_len(a: &[u8], b: &[u8]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

impl Trie {
    /// A trie of one empty leaf, the root.
    pub fn new() -> Self {
        let mut nodes = BTreeMap::new();
        nodes.insert(Vec::new(), Node::EMPTY_LEAF);
        Trie {
            nodes,
            internal_table: None,
        }
    }

    /// The child of an internal node on the byte ending `probe` (the
    /// node's prefix plus that byte): the shortest node whose prefix starts
    /// with `probe`. Nodes under `probe` form one contiguous key range
    /// starting at it, the shortest first.
    fn child(&self, probe: &[u8]) -> Option<&[u8]> {
        use std::ops::Bound;
        let (k, _) = self
            .nodes
            .range::<[u8], _>((Bound::Included(probe), Bound::Unbounded))
            .next()?;
        k.starts_with(probe).then_some(k.as_slice())
    }

    /// Where `key` goes, creating the nodes it needs on first use (§3.3);
    /// each change is pushed to `edits`.
    pub fn place(&mut self, key: &[u8], edits: &mut Vec<Edit>) -> Place {
        match self.leaf_of(key) {
            Some(leaf) => Place::Leaf(leaf.to_vec()),
            None => self.place_with_level(key, edits).0,
        }
    }

    /// The existing leaf `key` routes to, found with one lookup: the
    /// greatest node not above `key`, when it is a leaf whose prefix
    /// starts the key. Every node between a prefix of `key` and `key`
    /// itself extends that prefix, and nothing lies below a leaf, so a
    /// leaf that starts the key is that greatest node. `None` when the key
    /// routes to TT_IN or [`Trie::place`] would create a node.
    pub fn leaf_of(&self, key: &[u8]) -> Option<&[u8]> {
        use std::ops::Bound;
        let (p, n) = self
            .nodes
            .range::<[u8], _>((Bound::Unbounded, Bound::Included(key)))
            .next_back()?;
        let leaf = (matches!(n, Node::Leaf { .. }) && key.starts_with(p)).then_some(p.as_slice());
        debug_assert!(leaf.is_none() || self.locate(key) == Some(Place::Leaf(p.clone())));
        leaf
    }

    /// [`Trie::place`], with the level of the place: for a leaf, how many
    /// nodes lie above it ([`Trie::level`] of its prefix), counted on the
    /// way down; for TT_IN, the level of the internal node the key ends
    /// at.
    pub fn place_with_level(&mut self, key: &[u8], edits: &mut Vec<Edit>) -> (Place, usize) {
        // The walk only visits prefixes of the key: `key[..p]`. Every node
        // whose prefix is a prefix of the key lies on it (a node's
        // children are its shortest descendants), so the internal nodes
        // it passes are the leaf's ancestors.
        let mut p = 0;
        let mut level = 0;
        loop {
            match self.nodes.get(&key[..p]).copied() {
                Some(Node::Leaf { .. }) => return (Place::Leaf(key[..p].to_vec()), level),
                // The root always exists and every walk step lands on a
                // node; treat a missing one as a leaf to create.
                None => {
                    self.set_node(&key[..p], Node::EMPTY_LEAF, edits);
                    return (Place::Leaf(key[..p].to_vec()), level);
                }
                Some(Node::Internal) => {}
            }
            if key.len() == p {
                return (Place::Internal, level);
            }
            level += 1;
            match self.child(&key[..p + 1]) {
                None => {
                    self.set_node(&key[..p + 1], Node::EMPTY_LEAF, edits);
                    return (Place::Leaf(key[..p + 1].to_vec()), level);
                }
                Some(c) if key.starts_with(c) => p = c.len(),
                Some(c) => {
                    // The key leaves the compressed edge to `c`: insert an
                    // internal node where they part.
                    p = lcp_len(key, c);
                    self.set_node(&key[..p], Node::Internal, edits);
                }
            }
        }
    }

    /// Where `key` goes without changing the trie; `None` when
    /// [`Trie::place`] would create a node.
    pub fn locate(&self, key: &[u8]) -> Option<Place> {
        let mut p: &[u8] = &[];
        loop {
            match self.nodes.get(p)? {
                Node::Leaf { .. } => return Some(Place::Leaf(p.to_vec())),
                Node::Internal => {}
            }
            if key.len() == p.len() {
                return Some(Place::Internal);
            }
            let c = self.child(&key[..p.len() + 1])?;
            if !key.starts_with(c) {
                return None;
            }
            p = &key[..c.len()];
        }
    }

    fn set_node(&mut self, prefix: &[u8], node: Node, edits: &mut Vec<Edit>) {
        self.nodes.insert(prefix.to_vec(), node);
        edits.push(Edit::Node {
            prefix: prefix.to_vec(),
            node,
        });
    }

    /// The active table of `place`.
    pub fn table(&self, place: &Place) -> Option<u64> {
        match place {
            Place::Internal => self.internal_table,
            Place::Leaf(p) => match self.nodes.get(p) {
                Some(Node::Leaf { table, .. }) => *table,
                _ => None,
            },
        }
    }

    /// Bytes the leaf at `place` sealed by rolling its tables (0 for TT_IN
    /// or a node that is not a leaf).
    pub fn rolled(&self, place: &Place) -> u64 {
        match place {
            Place::Leaf(p) => match self.nodes.get(p) {
                Some(Node::Leaf { rolled, .. }) => *rolled,
                _ => 0,
            },
            Place::Internal => 0,
        }
    }

    /// Sets the active table of `place`; a leaf keeps its rolled bytes.
    pub fn set_table(&mut self, place: &Place, table: Option<u64>, edits: &mut Vec<Edit>) {
        let rolled = self.rolled(place);
        self.set_place(place, table, rolled, edits);
    }

    /// Detaches the active table of `place` (the caller seals it), so the
    /// next write makes a new one; a leaf's rolled bytes become `rolled`.
    pub fn roll(&mut self, place: &Place, rolled: u64, edits: &mut Vec<Edit>) {
        self.set_place(place, None, rolled, edits);
    }

    fn set_place(&mut self, place: &Place, table: Option<u64>, rolled: u64, edits: &mut Vec<Edit>) {
        match place {
            Place::Internal => {
                self.internal_table = table;
                edits.push(Edit::InternalTable(table));
            }
            Place::Leaf(p) => self.set_node(p, Node::Leaf { table, rolled }, edits),
        }
    }

    /// The place whose active table is `id`, if any.
    pub fn owner(&self, id: u64) -> Option<Place> {
        if self.internal_table == Some(id) {
            return Some(Place::Internal);
        }
        self.nodes.iter().find_map(|(p, n)| match n {
            Node::Leaf { table: Some(t), .. } if *t == id => Some(Place::Leaf(p.clone())),
            _ => None,
        })
    }

    /// Splits leaf `prefix`, whose table holds keys from `lo` to `hi`
    /// (beyond the paper: adaptive splitting). The leaf becomes internal
    /// (its table is detached; the caller seals it); when `lo` and `hi`
    /// share a longer prefix than the node, an internal node for it is
    /// added so the next level fans out where the keys differ. Returns
    /// false, changing nothing, when the keys are all one key or `prefix`
    /// is not a leaf.
    pub fn split(&mut self, prefix: &[u8], lo: &[u8], hi: &[u8], edits: &mut Vec<Edit>) -> bool {
        if lo == hi || !matches!(self.nodes.get(prefix), Some(Node::Leaf { .. })) {
            return false;
        }
        debug_assert!(lo.starts_with(prefix) && hi.starts_with(prefix));
        self.set_node(prefix, Node::Internal, edits);
        let l = lcp_len(lo, hi);
        if l > prefix.len() {
            self.set_node(&lo[..l], Node::Internal, edits);
        }
        true
    }

    /// The level of node `prefix`: how many nodes lie above it (the
    /// root is at level 0, its children at 1). With compressed edges a
    /// level may span several key bytes.
    pub fn level(&self, prefix: &[u8]) -> usize {
        (0..prefix.len())
            .filter(|&i| self.nodes.contains_key(&prefix[..i]))
            .count()
    }

    /// Number of nodes.
    pub fn nodes(&self) -> usize {
        self.nodes.len()
    }

    /// The leaves: `(prefix, active table)`, in key order.
    pub fn leaves(&self) -> impl Iterator<Item = (&[u8], Option<u64>)> {
        self.nodes.iter().filter_map(|(p, n)| match n {
            Node::Leaf { table, .. } => Some((p.as_slice(), *table)),
            Node::Internal => None,
        })
    }

    /// Levels of the deepest node (a lone root is depth 1).
    pub fn depth(&self) -> usize {
        self.nodes
            .keys()
            .map(|p| {
                1 + (0..p.len())
                    .filter(|&i| self.nodes.contains_key(&p[..i]))
                    .count()
            })
            .max()
            .unwrap_or(0)
    }

    /// Every active table: TT_IN's and the leaves'.
    pub fn active_tables(&self) -> Vec<u64> {
        self.internal_table
            .into_iter()
            .chain(self.leaves().filter_map(|(_, t)| t))
            .collect()
    }

    /// Edits that rebuild this trie from an empty one.
    fn snapshot(&self, out: &mut Vec<Edit>) {
        for (p, n) in &self.nodes {
            out.push(Edit::Node {
                prefix: p.clone(),
                node: *n,
            });
        }
        out.push(Edit::InternalTable(self.internal_table));
    }
}

/// A table as the trie file records it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Persisted {
    /// Active; at least `durable` bytes are synced.
    Active {
        /// Bytes known durable.
        durable: u64,
    },
    /// Sealed at `len` bytes.
    Sealed {
        /// Final length.
        len: u64,
        /// Its records are in ascending key order (GC's output, or keys
        /// that arrived in order).
        sorted: bool,
    },
}

/// One change to the trie or the catalog of tables.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Edit {
    /// Node `prefix` is now `node` (created or changed).
    Node {
        /// The node's prefix.
        prefix: Vec<u8>,
        /// Its kind and table.
        node: Node,
    },
    /// TT_IN's active table.
    InternalTable(Option<u64>),
    /// Table `id` exists in state `state`.
    Table {
        /// Table id (at least 1).
        id: u64,
        /// Its state.
        state: Persisted,
    },
    /// Table `id` was deleted.
    DropTable(u64),
    /// Table ids below this are taken.
    NextId(u64),
}

/// Payload version without rolled leaves.
const VERSION: u8 = 1;
/// Payload version that may hold leaves with rolled bytes (node kind 2).
const VERSION_ROLLED: u8 = 2;

fn put_table(dst: &mut Vec<u8>, t: Option<u64>) {
    put_varint64(dst, t.unwrap_or(0));
}

fn get_table(src: &mut &[u8]) -> Option<Option<u64>> {
    let v = get_varint64(src)?;
    Some((v != 0).then_some(v))
}

/// Encodes a group of edits as one record payload.
pub fn encode_edits(edits: &[Edit]) -> Vec<u8> {
    let rolled = edits.iter().any(|e| {
        matches!(
            e,
            Edit::Node {
                node: Node::Leaf { rolled: 1.., .. },
                ..
            }
        )
    });
    let mut v = vec![if rolled { VERSION_ROLLED } else { VERSION }];
    put_varint32(&mut v, edits.len() as u32);
    for e in edits {
        match e {
            Edit::Node { prefix, node } => {
                v.push(1);
                put_length_prefixed(&mut v, prefix);
                match node {
                    Node::Leaf { table, rolled: 0 } => {
                        v.push(0);
                        put_table(&mut v, *table);
                    }
                    Node::Leaf { table, rolled } => {
                        v.push(2);
                        put_table(&mut v, *table);
                        put_varint64(&mut v, *rolled);
                    }
                    Node::Internal => {
                        v.push(1);
                        put_table(&mut v, None);
                    }
                }
            }
            Edit::InternalTable(t) => {
                v.push(2);
                put_table(&mut v, *t);
            }
            Edit::Table { id, state } => {
                v.push(3);
                put_varint64(&mut v, *id);
                let (s, len) = match state {
                    Persisted::Active { durable } => (0, *durable),
                    Persisted::Sealed { len, sorted } => (1 + u8::from(*sorted), *len),
                };
                v.push(s);
                put_varint64(&mut v, len);
            }
            Edit::DropTable(id) => {
                v.push(4);
                put_varint64(&mut v, *id);
            }
            Edit::NextId(n) => {
                v.push(5);
                put_varint64(&mut v, *n);
            }
        }
    }
    v
}

/// Decodes a record payload; `None` when malformed.
pub fn decode_edits(mut src: &[u8]) -> Option<Vec<Edit>> {
    let (&ver, rest) = src.split_first()?;
    if ver != VERSION && ver != VERSION_ROLLED {
        return None;
    }
    src = rest;
    let n = get_varint32(&mut src)? as usize;
    let mut out = Vec::with_capacity(n.min(1 << 16));
    for _ in 0..n {
        let (&tag, rest) = src.split_first()?;
        src = rest;
        out.push(match tag {
            1 => {
                let prefix = get_length_prefixed(&mut src)?.to_vec();
                let (&kind, rest) = src.split_first()?;
                src = rest;
                let table = get_table(&mut src)?;
                let node = match (kind, table) {
                    (0, table) => Node::Leaf { table, rolled: 0 },
                    (1, None) => Node::Internal,
                    (2, table) if ver == VERSION_ROLLED => {
                        let rolled = get_varint64(&mut src)?;
                        if rolled == 0 {
                            return None;
                        }
                        Node::Leaf { table, rolled }
                    }
                    _ => return None,
                };
                Edit::Node { prefix, node }
            }
            2 => Edit::InternalTable(get_table(&mut src)?),
            3 => {
                let id = get_varint64(&mut src)?;
                let (&s, rest) = src.split_first()?;
                src = rest;
                let len = get_varint64(&mut src)?;
                let state = match s {
                    0 => Persisted::Active { durable: len },
                    1 | 2 => Persisted::Sealed {
                        len,
                        sorted: s == 2,
                    },
                    _ => return None,
                };
                if id == 0 {
                    return None;
                }
                Edit::Table { id, state }
            }
            4 => Edit::DropTable(get_varint64(&mut src)?),
            5 => Edit::NextId(get_varint64(&mut src)?),
            _ => return None,
        });
    }
    src.is_empty().then_some(out)
}

/// The persisted state: the trie, the tables and the next table id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Catalog {
    /// The trie.
    pub trie: Trie,
    /// Every table, by id.
    pub tables: BTreeMap<u64, Persisted>,
    /// Ids below this are taken.
    pub next_id: u64,
}

impl Default for Catalog {
    fn default() -> Self {
        Catalog {
            trie: Trie::new(),
            tables: BTreeMap::new(),
            next_id: 1,
        }
    }
}

impl Catalog {
    /// Applies one edit.
    pub fn apply(&mut self, e: &Edit) {
        match e {
            Edit::Node { prefix, node } => {
                self.trie.nodes.insert(prefix.clone(), *node);
            }
            Edit::InternalTable(t) => self.trie.internal_table = *t,
            Edit::Table { id, state } => {
                self.tables.insert(*id, *state);
                self.next_id = self.next_id.max(id + 1);
            }
            Edit::DropTable(id) => {
                self.tables.remove(id);
            }
            Edit::NextId(n) => self.next_id = self.next_id.max(*n),
        }
    }

    /// Edits that rebuild this catalog from an empty one.
    pub fn snapshot(&self) -> Vec<Edit> {
        let mut v = vec![Edit::NextId(self.next_id)];
        self.trie.snapshot(&mut v);
        for (&id, &state) in &self.tables {
            v.push(Edit::Table { id, state });
        }
        v
    }
}

/// The open trie file.
pub struct TrieLog {
    dir: PathBuf,
    fs: Arc<dyn FileSystem>,
    stats: Arc<IoStats>,
    writer: RecordWriter,
    /// Size of the last snapshot written (bytes).
    snapshot_len: u64,
    /// True while it holds records not yet synced.
    dirty: bool,
}

impl TrieLog {
    /// Opens the trie file in `dir` and replays it, or creates one holding
    /// `Catalog::default()` when `create` is set and there is none. Returns
    /// the catalog and whether the store is new.
    ///
    /// # Errors
    /// `Corruption` for a damaged trie file (file and offset) or a missing
    /// one when `create` is off; `Io`.
    pub fn open(
        dir: &Path,
        fs: Arc<dyn FileSystem>,
        stats: Arc<IoStats>,
        create: bool,
    ) -> Result<(Catalog, TrieLog, bool)> {
        let path = dir.join(TRIE_FILE);
        let tmp = dir.join(TRIE_TMP);
        if fs.exists(&tmp) {
            fs.remove(&tmp).ctx(&tmp)?;
        }
        if !fs.exists(&path) {
            if !create {
                return Err(Error::corruption(
                    &path,
                    0,
                    "the trie file is missing while TrieTables exist",
                ));
            }
            let cat = Catalog::default();
            let log = Self::rewrite_file(dir, fs, stats, &cat)?;
            return Ok((cat, log, true));
        }
        let data = read_all(fs.as_ref(), &path).ctx(&path)?;
        stats.add_read(IoCategory::ValueStore, data.len() as u64);
        let mut cat = Catalog::default();
        let mut reader = RecordReader::new(&data, &path);
        while let Some((off, payload)) = reader.next_record()? {
            let edits = decode_edits(payload)
                .ok_or_else(|| Error::corruption(&path, off, "malformed trie-file record"))?;
            for e in &edits {
                cat.apply(e);
            }
        }
        let torn = matches!(reader.end(), Some(LogEnd::Torn(_)));
        let log = if torn {
            // Appending after torn bytes would bury them mid-file.
            Self::rewrite_file(dir, fs, stats, &cat)?
        } else {
            let writer = RecordWriter::new(
                fs.open_append(&path).ctx(&path)?,
                path.clone(),
                stats.clone(),
                IoCategory::ValueStore,
            );
            TrieLog {
                dir: dir.to_path_buf(),
                fs,
                stats,
                writer,
                // What a rewrite would take: record header and snapshot.
                snapshot_len: 12 + encode_edits(&cat.snapshot()).len() as u64,
                dirty: false,
            }
        };
        Ok((cat, log, false))
    }

    /// Writes `cat` as the whole trie file, atomically.
    fn rewrite_file(
        dir: &Path,
        fs: Arc<dyn FileSystem>,
        stats: Arc<IoStats>,
        cat: &Catalog,
    ) -> Result<TrieLog> {
        let path = dir.join(TRIE_FILE);
        let tmp = dir.join(TRIE_TMP);
        let mut rec = Vec::new();
        encode_record(&mut rec, &encode_edits(&cat.snapshot()));
        {
            let mut f = fs.create(&tmp).ctx(&tmp)?;
            f.append(&rec).ctx(&tmp)?;
            f.sync().ctx(&tmp)?;
        }
        stats.add_written(IoCategory::ValueStore, rec.len() as u64);
        fs.rename(&tmp, &path).ctx(&path)?;
        fs.sync_dir(dir).ctx(dir)?;
        let writer = RecordWriter::new(
            fs.open_append(&path).ctx(&path)?,
            path,
            stats.clone(),
            IoCategory::ValueStore,
        );
        Ok(TrieLog {
            dir: dir.to_path_buf(),
            fs,
            stats,
            writer,
            snapshot_len: rec.len() as u64,
            dirty: false,
        })
    }

    /// Appends one atomic group of edits and hands it to the OS.
    ///
    /// # Errors
    /// `Io`.
    pub fn append(&mut self, edits: &[Edit]) -> Result<()> {
        if edits.is_empty() {
            return Ok(());
        }
        self.writer.add_record(&encode_edits(edits))?;
        self.writer.flush()?;
        self.dirty = true;
        Ok(())
    }

    /// Makes every appended edit durable.
    ///
    /// # Errors
    /// `Io`.
    pub fn sync(&mut self) -> Result<()> {
        if self.dirty {
            self.writer.sync()?;
            self.dirty = false;
        }
        Ok(())
    }

    /// Rewrites the file as one snapshot of `cat` when the log has grown
    /// to four times the snapshot (and at least 64 KiB). Returns true when
    /// it did.
    ///
    /// # Errors
    /// `Io`.
    pub fn maybe_compact(&mut self, cat: &Catalog) -> Result<bool> {
        if self.writer.len() < (64 << 10).max(4 * self.snapshot_len) {
            return Ok(false);
        }
        *self = Self::rewrite_file(&self.dir, self.fs.clone(), self.stats.clone(), cat)?;
        Ok(true)
    }

    /// Bytes in the file.
    pub fn len(&self) -> u64 {
        self.writer.len()
    }

    /// True when the file is empty (never, once opened).
    pub fn is_empty(&self) -> bool {
        self.writer.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::MemFs;
    use std::collections::HashMap;

    /// Routes `keys` through a trie that splits a leaf once it holds
    /// `cap` keys (a table of `cap` values), as the store does by bytes.
    /// Returns the trie and the keys each leaf received after it was
    /// created.
    fn fill(keys: impl Iterator<Item = Vec<u8>>, cap: usize) -> (Trie, HashMap<Vec<u8>, usize>) {
        let mut t = Trie::new();
        let mut load: HashMap<Vec<u8>, (usize, Vec<u8>, Vec<u8>)> = HashMap::new();
        let mut received: HashMap<Vec<u8>, usize> = HashMap::new();
        let mut edits = Vec::new();
        for k in keys {
            match t.place(&k, &mut edits) {
                Place::Internal => {}
                Place::Leaf(p) => {
                    *received.entry(p.clone()).or_default() += 1;
                    let e = load.entry(p.clone()).or_insert((0, k.clone(), k.clone()));
                    e.0 += 1;
                    if k < e.1 {
                        e.1 = k.clone();
                    }
                    if k > e.2 {
                        e.2 = k.clone();
                    }
                    if e.0 >= cap {
                        let (_, lo, hi) = load.remove(&p).unwrap();
                        t.split(&p, &lo, &hi, &mut edits);
                    }
                }
            }
        }
        (t, received)
    }

    fn check_disjoint_and_routed(t: &Trie, keys: &[Vec<u8>]) {
        let leaves: Vec<&[u8]> = t.leaves().map(|(p, _)| p).collect();
        for w in leaves.windows(2) {
            assert!(
                !w[1].starts_with(w[0]),
                "leaf {:?} under leaf {:?}",
                w[1],
                w[0]
            );
        }
        // A key routes to a leaf of its own prefix (a key whose leaf split
        // after it was written may need a child created first).
        let mut t = t.clone();
        for k in keys {
            match t.place(k, &mut Vec::new()) {
                Place::Leaf(p) => assert!(k.starts_with(&p)),
                Place::Internal => assert!(t.nodes.contains_key(k)),
            }
        }
    }

    #[test]
    fn routing_creates_nodes_on_first_use_and_keeps_ranges_disjoint() {
        let mut t = Trie::new();
        let mut e = Vec::new();
        assert_eq!(t.place(b"abc", &mut e), Place::Leaf(vec![]));
        assert!(e.is_empty(), "the root exists already");
        assert!(t.split(b"", b"ab1", b"ab9", &mut e));
        // Root internal, compressed child "ab" internal.
        assert_eq!(t.nodes(), 2);
        assert_eq!(t.place(b"ab5x", &mut e), Place::Leaf(b"ab5".to_vec()));
        assert_eq!(t.place(b"ab", &mut e), Place::Internal);
        assert_eq!(t.place(b"", &mut e), Place::Internal);
        // A key leaving the compressed edge inserts an internal node.
        assert_eq!(t.place(b"ac", &mut e), Place::Leaf(b"ac".to_vec()));
        assert!(t.nodes.contains_key(&b"a"[..]));
        assert_eq!(t.nodes[&b"a"[..]], Node::Internal);
        assert_eq!(t.place(b"a", &mut e), Place::Internal);
        assert_eq!(t.place(b"b", &mut e), Place::Leaf(b"b".to_vec()));
        assert_eq!(t.locate(b"ab5"), Some(Place::Leaf(b"ab5".to_vec())));
        assert_eq!(t.locate(b"zz"), None);
        // The edits rebuild the same trie.
        let mut c = Catalog::default();
        for x in &e {
            c.apply(x);
        }
        assert_eq!(c.trie, t);
        check_disjoint_and_routed(&t, &[b"ab5x".to_vec(), b"ac".to_vec(), b"a".to_vec()]);
        // One key only: cannot split.
        assert!(!t.split(b"b", b"bq", b"bq", &mut e));
        // Levels count nodes above, not bytes: "ab5" is below the root,
        // "a" and "ab".
        assert_eq!(t.level(b""), 0);
        assert_eq!(t.level(b"a"), 1);
        assert_eq!(t.level(b"ab5"), 3);
        assert_eq!(t.level(b"b"), 1);
        // Routing counts the same levels on its way down.
        for (key, place, level) in [
            (&b"ab5x"[..], Place::Leaf(b"ab5".to_vec()), 3),
            (b"b", Place::Leaf(b"b".to_vec()), 1),
            (b"ab", Place::Internal, 2),
            (b"", Place::Internal, 0),
        ] {
            assert_eq!(t.place_with_level(key, &mut e), (place, level), "{key:?}");
        }
    }

    /// The level [`Trie::place_with_level`] counts on its way down is
    /// [`Trie::level`] of the leaf, whatever splits and compressed edges
    /// the keys made.
    #[test]
    fn place_counts_the_leaf_level() {
        let mut t = Trie::new();
        let mut e = Vec::new();
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        for i in 0..4_000u32 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            // Keys with a shared stem and digits, some prefixes of others.
            let key = format!("k{:0w$}", x % 100_000, w = 1 + (x % 6) as usize).into_bytes();
            let (place, level) = t.place_with_level(&key, &mut e);
            match &place {
                Place::Leaf(p) => {
                    assert_eq!(level, t.level(p), "{key:?}");
                    assert_eq!(t.leaf_of(&key), Some(p.as_slice()), "{key:?}");
                    // Split now and then, so levels grow deeper.
                    if i % 7 == 0 && key.len() > p.len() + 1 {
                        let mut hi = key.clone();
                        *hi.last_mut().unwrap() ^= 1;
                        let (lo, hi) = if hi < key {
                            (hi, key.clone())
                        } else {
                            (key.clone(), hi)
                        };
                        t.split(p, &lo, &hi, &mut e);
                    }
                }
                Place::Internal => {
                    assert_eq!(level, t.level(&key), "{key:?}");
                    assert_eq!(t.leaf_of(&key), None, "{key:?}");
                }
            }
        }
        // A key below no leaf yet (a new child byte) has no leaf to find.
        assert_eq!(t.leaf_of(b"z"), None);
        assert!(t.depth() > 3, "the keys built a deep trie");
    }

    /// YCSB keys are `user` and a decimal hash: the first split skips the
    /// shared `user` at once, and the trie fans out on digits below it.
    #[test]
    fn adapts_to_ycsb_keys() {
        let keys: Vec<Vec<u8>> = (0..60_000u64)
            .map(|i| {
                // FNV-64 of the record number, as YCSB's key names.
                let mut h: i64 = 0xCBF2_9CE4_8422_2325u64 as i64;
                let mut v = i as i64;
                for _ in 0..8 {
                    h ^= v & 0xff;
                    v >>= 8;
                    h = h.wrapping_mul(1_099_511_628_211);
                }
                format!("user{}", h.wrapping_abs()).into_bytes()
            })
            .collect();
        let (t, received) = fill(keys.iter().cloned(), 1000);
        check_disjoint_and_routed(&t, &keys);
        assert!(
            t.nodes.contains_key(&b"user"[..]),
            "no compressed `user` node"
        );
        assert!(!t.nodes.contains_key(&b"u"[..]) && !t.nodes.contains_key(&b"use"[..]));
        let leaves: Vec<_> = t.leaves().map(|(p, _)| p.to_vec()).collect();
        assert!(leaves.len() >= 60, "only {} leaves", leaves.len());
        for p in &leaves {
            assert!(p.starts_with(b"user") && p[4..].iter().all(u8::is_ascii_digit));
        }
        // Splits keep every leaf's share near the cap: no leaf took more
        // than the cap plus what its fan-out spreads.
        let max = received.values().max().unwrap();
        assert!(*max <= 1000, "a leaf received {max} keys");
        assert!(t.depth() >= 3);
    }

    /// db_bench keys are zero-padded decimals: the shared zeros are one
    /// compressed edge and the digits below fan out by ten.
    #[test]
    fn adapts_to_zero_padded_decimal_keys() {
        let n = 50_000u64;
        let mut x = 12345u64;
        let keys: Vec<Vec<u8>> = (0..n)
            .map(|_| {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                format!("{:016}", (x >> 33) % n).into_bytes()
            })
            .collect();
        let (t, received) = fill(keys.iter().cloned(), 800);
        check_disjoint_and_routed(&t, &keys);
        // "00000000000" (11 zeros) is shared by every key below 100000.
        assert!(t.nodes.contains_key(&b"00000000000"[..]));
        let leaves: Vec<_> = t.leaves().map(|(p, _)| p.to_vec()).collect();
        assert!(leaves.len() >= 50, "only {} leaves", leaves.len());
        for p in &leaves {
            assert!(p.len() >= 12, "leaf {p:?} above the shared zeros");
        }
        assert!(*received.values().max().unwrap() <= 800);
        // Sequential keys split too (each leaf fills, then its range fans out).
        let seq: Vec<Vec<u8>> = (0..20_000u64)
            .map(|i| format!("{i:016}").into_bytes())
            .collect();
        let (t2, _) = fill(seq.iter().cloned(), 500);
        check_disjoint_and_routed(&t2, &seq);
        assert!(t2.leaves().count() >= 10);
    }

    #[test]
    fn edits_roundtrip() {
        let edits = vec![
            Edit::NextId(9),
            Edit::Node {
                prefix: b"ab".to_vec(),
                node: Node::Leaf {
                    table: Some(3),
                    rolled: 0,
                },
            },
            Edit::Node {
                prefix: vec![],
                node: Node::Internal,
            },
            Edit::Node {
                prefix: b"x".to_vec(),
                node: Node::EMPTY_LEAF,
            },
            Edit::InternalTable(Some(4)),
            Edit::InternalTable(None),
            Edit::Table {
                id: 3,
                state: Persisted::Active { durable: 100 },
            },
            Edit::Table {
                id: 5,
                state: Persisted::Sealed {
                    len: 1 << 40,
                    sorted: true,
                },
            },
            Edit::DropTable(5),
        ];
        let b = encode_edits(&edits);
        assert_eq!(decode_edits(&b), Some(edits.clone()));
        for cut in 0..b.len() {
            assert_eq!(decode_edits(&b[..cut]), None, "cut {cut}");
        }
        let mut extra = b.clone();
        extra.push(0);
        assert_eq!(decode_edits(&extra), None);
        // Without a rolled leaf the payload stays version 1, which older
        // binaries read.
        assert_eq!(b[0], VERSION);
        // A leaf with rolled bytes makes it version 2; a kind 2 node in a
        // version 1 payload is malformed.
        let mut rolled = edits.clone();
        rolled.push(Edit::Node {
            prefix: b"r".to_vec(),
            node: Node::Leaf {
                table: None,
                rolled: 1 << 33,
            },
        });
        let b = encode_edits(&rolled);
        assert_eq!(b[0], VERSION_ROLLED);
        assert_eq!(decode_edits(&b), Some(rolled));
        for cut in 0..b.len() {
            assert_eq!(decode_edits(&b[..cut]), None, "cut {cut}");
        }
        let mut as_v1 = b.clone();
        as_v1[0] = VERSION;
        assert_eq!(decode_edits(&as_v1), None);
    }

    #[test]
    fn trie_file_replays_compacts_and_survives_a_torn_tail() {
        let fs = MemFs::new();
        let dir = Path::new("/t");
        fs.create_dir_all(dir).unwrap();
        let fsa: Arc<dyn FileSystem> = Arc::new(fs.clone());
        let stats = Arc::new(IoStats::default());
        let (mut cat, mut log, fresh) =
            TrieLog::open(dir, fsa.clone(), stats.clone(), true).unwrap();
        assert!(fresh);
        for i in 1..=3000u64 {
            let mut e = Vec::new();
            let place = cat.trie.place(format!("k{i}").as_bytes(), &mut e);
            cat.trie.set_table(&place, Some(i), &mut e);
            e.push(Edit::Table {
                id: i,
                state: Persisted::Sealed {
                    len: i * 10,
                    sorted: i % 2 == 0,
                },
            });
            for x in &e {
                cat.apply(x);
            }
            log.append(&e).unwrap();
            log.maybe_compact(&cat).unwrap();
            if i % 7 == 0 {
                let d = vec![Edit::DropTable(i - 3)];
                cat.apply(&d[0]);
                log.append(&d).unwrap();
            }
        }
        log.sync().unwrap();
        assert!(
            log.len() < 600 << 10,
            "never compacted: {} bytes",
            log.len()
        );
        drop(log);
        let (cat2, log2, fresh) = TrieLog::open(dir, fsa.clone(), stats.clone(), true).unwrap();
        assert!(!fresh);
        assert_eq!(cat2, cat);
        drop(log2);
        // A torn record at the end is dropped, and the file is rewritten so
        // later appends do not follow torn bytes.
        let path = dir.join(TRIE_FILE);
        let mut f = fsa.open_append(&path).unwrap();
        f.append(&[9, 9, 9, 0, 1]).unwrap();
        drop(f);
        let (cat3, mut log3, _) = TrieLog::open(dir, fsa.clone(), stats.clone(), true).unwrap();
        assert_eq!(cat3, cat);
        log3.append(&[Edit::NextId(99_999)]).unwrap();
        drop(log3);
        let (cat4, _, _) = TrieLog::open(dir, fsa.clone(), stats.clone(), true).unwrap();
        assert_eq!(cat4.next_id, 99_999);
        // Damage before valid records is corruption.
        let data = read_all(fsa.as_ref(), &path).unwrap();
        let mut bad = data.clone();
        bad[20] ^= 1;
        let mut f = fsa.create(&path).unwrap();
        f.append(&bad).unwrap();
        drop(f);
        match TrieLog::open(dir, fsa.clone(), stats.clone(), true) {
            Err(e) => assert!(e.is_corruption(), "{e}"),
            Ok(_) => panic!("damage not detected"),
        }
        // A missing trie file is corruption unless the store may be new.
        fsa.remove(&path).unwrap();
        assert!(TrieLog::open(dir, fsa, stats, false).is_err());
    }
}
