//! [`TableIterator`]: the two-level cursor over a [`Table`] (the index
//! block selects a data block, a block iterator walks it) and the scan's
//! read-ahead. An iterator that meets an error becomes invalid for good
//! and reports the error from `status()`; later seeks do not clear it. It
//! is used by one thread at a time and keeps its table alive.

use super::*;
/// First read-ahead window of a scan (bytes), issued when a cursor loads
/// the data block after [`READ_AHEAD_AFTER`] loaded in file order. Device
/// bound (400 MB memory limit, 1 M × 1 KiB, 20,000 `seekrandom` scans of
/// 100 entries), starting at 64 KiB after one block scanned 1.05–1.10× as
/// fast as starting at 16 KiB after two.
pub(crate) const READ_AHEAD_MIN: u64 = 64 << 10;

/// Farthest a scan reads ahead of the block it loads (bytes): each hint
/// reaches twice as far past that block as the last one, up to this.
pub(crate) const READ_AHEAD_MAX: u64 = 256 << 10;

/// Data blocks a cursor loads one after another in file order before it
/// reads ahead: a seek that reads one block issues no hint.
pub(crate) const READ_AHEAD_AFTER: u32 = 1;

/// A scan's read-ahead over one table (user scans only; flushes and
/// compactions stream whole tables with the kernel's own read-ahead).
///
/// While blocks of mapped tables are read from the device (the map gauge,
/// [`super::map_gauge`]), a cursor that walks data blocks in file order
/// asks the kernel to read the bytes after the current block
/// (`POSIX_FADV_WILLNEED`) in one request, as RocksDB's iterators read
/// ahead (8 KiB doubling to 256 KiB there): the blocks a scan reaches next
/// then come from memory instead of one system call each on a file handle
/// every reader shares. A hint is issued when the scan reaches halfway
/// into the range the last one covered, and covers what lies between that
/// range's end and [`READ_AHEAD_MIN`] past the block, doubled at each
/// hint up to [`READ_AHEAD_MAX`]; it may reach past the data blocks into
/// the filter and index blocks, never past the footer. When mapped
/// reads are served from memory no hint is issued (a system call that
/// would find every page cached); neither without a mapping
/// (`mmap_reads` off: buffered reads get the kernel's own read-ahead, and
/// direct reads bypass the page cache the hint would fill).
#[derive(Debug, Default)]
struct ReadAhead {
    /// File offset just past the last data block loaded (its trailer
    /// included): where the next block starts when the scan goes on in
    /// file order.
    next: u64,
    /// Data blocks loaded one after another in file order.
    run: u32,
    /// How far past the loaded block the next hint reaches (bytes).
    window: u64,
    /// File offset the hints issued so far reach.
    until: u64,
    /// File offset a loaded block must reach for the next hint: halfway
    /// into the last window hinted (0: none hinted yet).
    trigger: u64,
    /// First window of a run (bytes; 0: [`READ_AHEAD_MIN`]).
    first: u64,
}

/// Where a cursor stands in its table's index.
enum IndexPos {
    /// A cursor over the index block.
    Block(BlockIter),
    /// For a table whose index is decoded ([`IndexSearch`]): the ordinal
    /// of the current entry, always below the entry count; `None` when
    /// positioned nowhere.
    Decoded(Option<usize>),
}

/// A two-level cursor over a table: the index block selects a data block,
/// loaded lazily through the block cache; empty blocks are skipped.
pub struct TableIterator {
    table: Arc<Table>,
    ctx: ReadCtx,
    index: IndexPos,
    /// Iterator over the data block the index points at, if loaded.
    data: Option<BlockIter>,
    /// File offset of the block of `data`.
    data_offset: u64,
    /// The first error met; the iterator stays invalid once set.
    err: Option<Error>,
    /// Read-ahead state of forward scans.
    ahead: ReadAhead,
}

impl TableIterator {
    fn fail(&mut self, e: Error) {
        if self.err.is_none() {
            self.err = Some(e);
        }
        self.data = None;
    }

    /// Records a corruption of the index block, if the index iterator met
    /// one.
    fn check_index(&mut self) {
        if let IndexPos::Block(b) = &self.index {
            if let Some(r) = b.corruption() {
                let e = self.table.index_corruption(r);
                self.fail(e);
            }
        }
    }

    /// The decoded index of the table, if this cursor uses it.
    fn decoded(&self) -> Option<&IndexSearch> {
        match self.index {
            IndexPos::Decoded(_) => self.table.index_search.as_ref(),
            IndexPos::Block(_) => None,
        }
    }

    /// True when the index cursor is at an entry.
    fn index_valid(&self) -> bool {
        match &self.index {
            IndexPos::Block(b) => b.valid(),
            IndexPos::Decoded(at) => at.is_some(),
        }
    }

    /// The current index entry's data-block handle and ordinal.
    fn index_entry(&self) -> Result<(BlockHandle, usize)> {
        match &self.index {
            IndexPos::Block(b) => Ok((self.table.data_handle(b.value())?, b.restart_index())),
            IndexPos::Decoded(at) => at
                .and_then(|i| Some((self.decoded()?.handle(i)?, i)))
                .ok_or_else(|| self.table.index_corruption("index entry out of range")),
        }
    }

    fn index_next(&mut self) {
        let len = self.decoded().map_or(0, IndexSearch::len);
        match &mut self.index {
            IndexPos::Block(b) => b.next(),
            IndexPos::Decoded(at) => *at = at.map(|i| i + 1).filter(|&i| i < len),
        }
    }

    fn index_prev(&mut self) {
        match &mut self.index {
            IndexPos::Block(b) => b.prev(),
            IndexPos::Decoded(at) => *at = at.and_then(|i| i.checked_sub(1)),
        }
    }

    fn index_seek_to_first(&mut self) {
        let len = self.decoded().map_or(0, IndexSearch::len);
        match &mut self.index {
            IndexPos::Block(b) => b.seek_to_first(),
            IndexPos::Decoded(at) => *at = (len > 0).then_some(0),
        }
    }

    fn index_seek_to_last(&mut self) {
        let len = self.decoded().map_or(0, IndexSearch::len);
        match &mut self.index {
            IndexPos::Block(b) => b.seek_to_last(),
            IndexPos::Decoded(at) => *at = len.checked_sub(1),
        }
    }

    fn index_seek(&mut self, target: &[u8]) {
        let found = match (&mut self.index, self.table.index_search.as_ref()) {
            (IndexPos::Block(b), _) => {
                b.seek(target);
                return;
            }
            (IndexPos::Decoded(_), None) => Err("index entry out of range".to_string()),
            (IndexPos::Decoded(_), Some(d)) => d
                .find(&self.table.index, target)
                .map(|i| (i < d.len()).then_some(i)),
        };
        match found {
            Ok(at) => self.index = IndexPos::Decoded(at),
            Err(r) => {
                self.index = IndexPos::Decoded(None);
                let e = self.table.index_corruption(r);
                self.fail(e);
            }
        }
    }

    /// Records a corruption of the current data block, if any; true when
    /// the iterator is still healthy.
    fn check_data(&mut self) -> bool {
        let reason = self
            .data
            .as_ref()
            .and_then(|d| d.corruption())
            .map(str::to_string);
        if let Some(r) = reason {
            let e = self.table.src.corruption(self.data_offset, r);
            self.fail(e);
        }
        self.err.is_none()
    }

    /// Loads the data block the index iterator points at.
    fn init_data_block(&mut self) {
        if !self.index_valid() {
            self.check_index();
            self.data = None;
            return;
        }
        let (handle, ordinal) = match self.index_entry() {
            Ok(h) => h,
            Err(e) => return self.fail(e),
        };
        if self.data.is_some() && self.data_offset == handle.offset {
            return;
        }
        self.read_ahead(handle);
        match (self.table).data_block_at(handle, ordinal, self.ctx) {
            Ok(block) => {
                self.data = Some(BlockIter::new(block, compare_internal));
                self.data_offset = handle.offset;
            }
            Err(e) => self.fail(e),
        }
    }

    /// Before the block at `handle` is loaded: counts blocks loaded in
    /// file order and, past [`READ_AHEAD_AFTER`] of them while mapped reads
    /// reach the device, hints the kernel to read the next window ahead
    /// ([`ReadAhead`]). Any other block starts the count again.
    fn read_ahead(&mut self, handle: BlockHandle) {
        if self.ctx.category != IoCategory::UserRead {
            return;
        }
        let a = &mut self.ahead;
        let end = handle
            .offset
            .saturating_add(handle.size)
            .saturating_add(BLOCK_TRAILER_LEN as u64);
        // The next block in file order starts where this one ended, or at
        // the next boundary of an aligned table.
        let in_order = handle.offset >= a.next
            && handle.offset - a.next < crate::index::sstable::builder::ALIGN;
        if in_order && a.run > 0 {
            a.run += 1;
        } else {
            a.run = 1;
            a.window = if a.first == 0 {
                READ_AHEAD_MIN
            } else {
                a.first
            };
            a.until = 0;
            a.trigger = 0;
        }
        a.next = end;
        if a.run <= READ_AHEAD_AFTER || end < a.trigger {
            return;
        }
        let src = &self.table.src;
        if src.map.is_none() {
            return;
        }
        let device = self.table.cache.as_ref().map(|c| c.map_gauge());
        if !device.is_some_and(|g| g.reaching_device()) {
            return;
        }
        let from = a.until.max(end);
        let to = end.saturating_add(a.window).min(src.footer_offset);
        if to > from {
            src.file.advise(from, to - from, Advice::WillNeed);
        }
        a.until = a.until.max(to);
        a.trigger = from + (to.saturating_sub(from)) / 2;
        a.window = (a.window * 2).min(READ_AHEAD_MAX);
    }

    /// Moves forward over exhausted or empty data blocks.
    fn skip_forward(&mut self) {
        while self.check_data() {
            if self.data.as_ref().is_some_and(BlockIter::valid) {
                return;
            }
            if !self.index_valid() {
                self.check_index();
                self.data = None;
                return;
            }
            self.index_next();
            self.init_data_block();
            if let Some(d) = &mut self.data {
                d.seek_to_first();
            }
        }
    }

    /// Moves backward over exhausted or empty data blocks.
    fn skip_backward(&mut self) {
        while self.check_data() {
            if self.data.as_ref().is_some_and(BlockIter::valid) {
                return;
            }
            if !self.index_valid() {
                self.check_index();
                self.data = None;
                return;
            }
            self.index_prev();
            self.init_data_block();
            if let Some(d) = &mut self.data {
                d.seek_to_last();
            }
        }
    }
}

impl InternalIterator for TableIterator {
    fn valid(&self) -> bool {
        self.err.is_none() && self.data.as_ref().is_some_and(BlockIter::valid)
    }

    fn seek_to_first(&mut self) {
        if self.err.is_some() {
            return;
        }
        self.index_seek_to_first();
        self.init_data_block();
        if let Some(d) = &mut self.data {
            d.seek_to_first();
        }
        self.skip_forward();
    }

    fn seek_to_last(&mut self) {
        if self.err.is_some() {
            return;
        }
        self.index_seek_to_last();
        self.init_data_block();
        if let Some(d) = &mut self.data {
            d.seek_to_last();
        }
        self.skip_backward();
    }

    fn seek(&mut self, target: &[u8]) {
        if self.err.is_some() {
            return;
        }
        self.index_seek(target);
        self.init_data_block();
        if let Some(d) = &mut self.data {
            d.seek(target);
        }
        self.skip_forward();
    }

    fn next(&mut self) {
        if !self.valid() {
            return;
        }
        if let Some(d) = &mut self.data {
            d.next();
        }
        self.skip_forward();
    }

    fn prev(&mut self) {
        if !self.valid() {
            return;
        }
        if let Some(d) = &mut self.data {
            d.prev();
        }
        self.skip_backward();
    }

    fn key(&self) -> &[u8] {
        self.data.as_ref().map_or(&[], BlockIter::key)
    }

    fn value(&self) -> &[u8] {
        self.data.as_ref().map_or(&[], BlockIter::value)
    }

    fn status(&self) -> Result<()> {
        match &self.err {
            Some(e) => Err(e.clone()),
            None => Ok(()),
        }
    }
}

impl Table {
    /// A cursor over the table's entries (unpositioned).
    pub fn iter(self: &Arc<Self>, ctx: ReadCtx) -> TableIterator {
        TableIterator {
            index: match self.index_search {
                Some(_) => IndexPos::Decoded(None),
                None => IndexPos::Block(BlockIter::new(self.index.clone(), compare_internal)),
            },
            table: self.clone(),
            ctx,
            data: None,
            data_offset: 0,
            err: None,
            ahead: ReadAhead::default(),
        }
    }
}

impl TableIterator {
    /// The table this cursor walks.
    pub(crate) fn table(&self) -> &Arc<Table> {
        &self.table
    }

    /// This cursor's first read-ahead window is `bytes` (clamped to
    /// between one 4 KiB page and [`READ_AHEAD_MAX`]) instead of
    /// [`READ_AHEAD_MIN`]: a DTable gives each segment's cursor a share of
    /// one table's window, as a scan takes from each segment about its
    /// share of the entries.
    pub(crate) fn with_first_read_ahead(mut self, bytes: u64) -> TableIterator {
        self.ahead.first = bytes.clamp(4 << 10, READ_AHEAD_MAX);
        self
    }
}
