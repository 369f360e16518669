//! Cursor-style internal iterators over internal keys, and the merging
//! iterator that composes them.
//!
//! An iterator is positioned at an entry or invalid. Errors make it invalid
//! and are reported by [`InternalIterator::status`]; an iterator that stops
//! with an error must never be mistaken for one that reached the end.
//! Iterators are used by one thread at a time.

use crate::error::Result;

/// A cursor over `(internal key, value)` entries in internal-key order.
pub trait InternalIterator: Send {
    /// True when positioned at an entry.
    fn valid(&self) -> bool;
    /// Positions at the first entry.
    fn seek_to_first(&mut self);
    /// Positions at the last entry.
    fn seek_to_last(&mut self);
    /// Positions at the first entry whose internal key is `>= target`.
    fn seek(&mut self, target: &[u8]);
    /// Moves to the next entry. Requires `valid()`.
    fn next(&mut self);
    /// Moves to the previous entry. Requires `valid()`.
    fn prev(&mut self);
    /// Internal key of the current entry. Requires `valid()`.
    fn key(&self) -> &[u8];
    /// Value of the current entry. Requires `valid()`.
    fn value(&self) -> &[u8];
    /// The first error met, if any.
    fn status(&self) -> Result<()>;
    /// A hint: about `n` entries will be read forward from the next seek
    /// (a scan told its length, [`crate::Scan::limit`]), so an iterator
    /// that fetches values ahead may fetch that many at once. The default
    /// ignores it.
    fn expect_forward(&mut self, _n: usize) {}
}

impl<T: InternalIterator + ?Sized> InternalIterator for Box<T> {
    fn valid(&self) -> bool {
        (**self).valid()
    }
    fn seek_to_first(&mut self) {
        (**self).seek_to_first()
    }
    fn seek_to_last(&mut self) {
        (**self).seek_to_last()
    }
    fn seek(&mut self, target: &[u8]) {
        (**self).seek(target)
    }
    fn next(&mut self) {
        (**self).next()
    }
    fn prev(&mut self) {
        (**self).prev()
    }
    fn key(&self) -> &[u8] {
        (**self).key()
    }
    fn value(&self) -> &[u8] {
        (**self).value()
    }
    fn status(&self) -> Result<()> {
        (**self).status()
    }
    fn expect_forward(&mut self, n: usize) {
        (**self).expect_forward(n)
    }
}
