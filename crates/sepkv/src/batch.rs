//! Atomic write batches.
//!
//! A batch is applied all or nothing: it is one WAL record, its entries get
//! consecutive sequence numbers, and recovery replays whole records only.
//!
//! ```text
//! batch   := seq:u64le  count:u32le  entry*
//! entry   := type:u8  key:lenprefixed  [value:lenprefixed]   (no value for deletions)
//!          | 3  key:lenprefixed  pointer:lenprefixed  value:lenprefixed
//! type    := 0 delete | 1 put (inline value) | 2 put (encoded value pointer)
//!          | 3 put (encoded value pointer, and the value it points to)
//! ```
//! Frozen: format version 1. Type 3 exists only in WAL records of synced
//! writes whose values are carried in the WAL (see
//! [`crate::Options::sync_values_in_wal`]); it is read as a pointer entry,
//! and recovery falls back to the carried value when the value store lost
//! the record. Binaries older than type 3 report such a record as
//! corruption rather than misread it.

use crate::error::{Error, Result};
use crate::format::coding::{get_fixed32, get_fixed64, get_length_prefixed, put_length_prefixed};
use crate::options::{MAX_KEY_SIZE, MAX_VALUE_SIZE};
use crate::seqno::SeqNum;
use crate::value_type::ValueType;

const HEADER: usize = 12;

/// Entry type byte of a pointer entry that also carries its value (WAL only).
const CARRIED: u8 = 3;

/// A group of puts and deletes applied atomically by [`crate::Db::write`].
///
/// # Examples
/// ```
/// let mut b = sepkv::WriteBatch::new();
/// b.put("k1", "v1")?;
/// b.put(b"k2", vec![0u8; 3])?;
/// b.delete(String::from("k0"))?;
/// assert_eq!(b.len(), 3);
/// # Ok::<(), sepkv::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriteBatch {
    rep: Vec<u8>,
    count: u32,
    /// Sum of key and value bytes, kept as entries are added.
    user_bytes: u64,
    /// Longest value of a put, kept as entries are added.
    max_value_len: usize,
    /// Pointer entries that do not carry their value (type 2): a WAL
    /// holding them depends on the value store's durability.
    bare_pointers: u32,
    /// Pointer entries that carry their value (type 3).
    carried: u32,
}

impl Default for WriteBatch {
    fn default() -> Self {
        Self::new()
    }
}

/// One decoded entry of a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchEntry<'a> {
    /// Entry type.
    pub vtype: ValueType,
    /// User key.
    pub key: &'a [u8],
    /// Value (inline bytes or encoded pointer; empty for deletions).
    pub value: &'a [u8],
}

pub(crate) fn check_key(key: &[u8]) -> Result<()> {
    if key.is_empty() {
        return Err(Error::InvalidArgument("empty key".into()));
    }
    if key.len() > MAX_KEY_SIZE {
        return Err(Error::InvalidArgument(format!(
            "key of {} bytes exceeds the {MAX_KEY_SIZE} byte limit",
            key.len()
        )));
    }
    Ok(())
}

pub(crate) fn check_value(value: &[u8]) -> Result<()> {
    if value.len() > MAX_VALUE_SIZE {
        return Err(Error::InvalidArgument(format!(
            "value of {} bytes exceeds the {MAX_VALUE_SIZE} byte limit",
            value.len()
        )));
    }
    Ok(())
}

impl WriteBatch {
    /// An empty batch.
    pub fn new() -> Self {
        WriteBatch {
            rep: vec![0; HEADER],
            ..Self::new_empty()
        }
    }

    /// The counters of an empty batch, with no header allocated.
    const fn new_empty() -> Self {
        WriteBatch {
            rep: Vec::new(),
            count: 0,
            user_bytes: 0,
            max_value_len: 0,
            bare_pointers: 0,
            carried: 0,
        }
    }

    /// An empty batch with room for `bytes` bytes of encoded entries, so
    /// that filling it reallocates nothing when `bytes` is enough.
    pub(crate) fn with_capacity(bytes: usize) -> Self {
        let mut rep = Vec::with_capacity(HEADER + bytes);
        rep.resize(HEADER, 0);
        WriteBatch {
            rep,
            ..Self::new_empty()
        }
    }

    /// Adds a put.
    ///
    /// # Errors
    /// `InvalidArgument` for an empty key, a key over
    /// [`crate::options::MAX_KEY_SIZE`] or a value over
    /// [`crate::options::MAX_VALUE_SIZE`] bytes; the batch is unchanged.
    pub fn put(&mut self, key: impl AsRef<[u8]>, value: impl AsRef<[u8]>) -> Result<()> {
        let (key, value) = (key.as_ref(), value.as_ref());
        check_key(key)?;
        check_value(value)?;
        self.push(ValueType::Value, key, value);
        Ok(())
    }

    /// Adds a delete.
    ///
    /// # Errors
    /// `InvalidArgument` for an empty or oversized key.
    pub fn delete(&mut self, key: impl AsRef<[u8]>) -> Result<()> {
        let key = key.as_ref();
        check_key(key)?;
        self.push(ValueType::Deletion, key, &[]);
        Ok(())
    }

    pub(crate) fn push(&mut self, vtype: ValueType, key: &[u8], value: &[u8]) {
        // Tag, two varint lengths (at most 5 bytes each) and the bytes: one
        // reservation instead of a reallocation per part.
        self.rep.reserve(11 + key.len() + value.len());
        self.rep.push(vtype as u8);
        put_length_prefixed(&mut self.rep, key);
        if vtype != ValueType::Deletion {
            put_length_prefixed(&mut self.rep, value);
        }
        self.count += 1;
        self.user_bytes += (key.len() + value.len()) as u64;
        match vtype {
            ValueType::Value => self.max_value_len = self.max_value_len.max(value.len()),
            ValueType::Pointer => self.bare_pointers += 1,
            ValueType::Deletion => {}
        }
    }

    /// Adds a pointer entry that carries its value too (type 3, WAL only):
    /// the index takes `pointer`, and recovery falls back to `value` when
    /// the value store lost the record (`Options::sync_values_in_wal`).
    pub(crate) fn push_carried(&mut self, key: &[u8], pointer: &[u8], value: &[u8]) {
        self.rep.push(CARRIED);
        put_length_prefixed(&mut self.rep, key);
        put_length_prefixed(&mut self.rep, pointer);
        put_length_prefixed(&mut self.rep, value);
        self.count += 1;
        self.user_bytes += (key.len() + value.len()) as u64;
        self.carried += 1;
    }

    /// Number of pointer entries without their value: a WAL record of this
    /// batch is replayable only while the value store holds their records.
    pub(crate) fn bare_pointers(&self) -> usize {
        self.bare_pointers as usize
    }

    /// Number of pointer entries that carry their value.
    pub(crate) fn carried(&self) -> usize {
        self.carried as usize
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.count as usize
    }

    /// True when the batch holds nothing.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Removes every entry.
    pub fn clear(&mut self) {
        self.rep.truncate(HEADER);
        self.count = 0;
        self.user_bytes = 0;
        self.max_value_len = 0;
        self.bare_pointers = 0;
        self.carried = 0;
    }

    /// Encoded size in bytes.
    pub fn approximate_size(&self) -> usize {
        self.rep.len()
    }

    /// Sum of key and value bytes (the user bytes of the batch).
    pub fn user_bytes(&self) -> u64 {
        self.user_bytes
    }

    /// Length of the longest value put by the batch (0 when none), so the
    /// write path can tell without decoding whether anything is separated.
    pub(crate) fn max_value_len(&self) -> usize {
        self.max_value_len
    }

    /// Appends `other`'s entries after this batch's (group commit joins the
    /// batches of concurrent writers into one).
    pub(crate) fn append(&mut self, other: &WriteBatch) {
        self.rep.extend_from_slice(&other.rep[HEADER..]);
        self.count += other.count;
        self.user_bytes += other.user_bytes;
        self.max_value_len = self.max_value_len.max(other.max_value_len);
        self.bare_pointers += other.bare_pointers;
        self.carried += other.carried;
    }

    /// Splits the batch into consecutive batches of `counts` entries each
    /// (the inverse of [`WriteBatch::append`]).
    pub(crate) fn split(&self, counts: &[u32]) -> Result<Vec<WriteBatch>> {
        let mut entries = self.entry_iter();
        let mut out = Vec::with_capacity(counts.len());
        for &n in counts {
            let mut b = WriteBatch::new();
            for _ in 0..n {
                let (e, carried) = entries
                    .next()
                    .ok_or_else(|| Error::InvalidArgument("batch split past its end".into()))??;
                match carried {
                    Some(v) => b.push_carried(e.key, e.value, v),
                    None => b.push(e.vtype, e.key, e.value),
                }
            }
            out.push(b);
        }
        Ok(out)
    }

    /// Encodes the batch as a WAL record payload with first sequence
    /// number `seq` into `dst` (cleared first).
    pub(crate) fn encode_into(&self, seq: SeqNum, dst: &mut Vec<u8>) {
        dst.clear();
        dst.extend_from_slice(&seq.to_le_bytes());
        dst.extend_from_slice(&self.count.to_le_bytes());
        dst.extend_from_slice(&self.rep[HEADER..]);
    }

    /// Iterates over the entries. A pointer entry that carries its value
    /// is yielded as a pointer entry (the index's view of it).
    pub fn entries(&self) -> impl Iterator<Item = Result<BatchEntry<'_>>> {
        self.entry_iter().map(|r| r.map(|(e, _)| e))
    }

    fn entry_iter(&self) -> EntryIter<'_> {
        EntryIter {
            rest: &self.rep[HEADER..],
            left: self.count,
        }
    }
}

struct EntryIter<'a> {
    rest: &'a [u8],
    left: u32,
}

impl<'a> Iterator for EntryIter<'a> {
    type Item = Result<(BatchEntry<'a>, Option<&'a [u8]>)>;
    fn next(&mut self) -> Option<Self::Item> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        let r = decode_entry(&mut self.rest);
        if r.is_none() {
            self.left = 0;
        }
        Some(r.ok_or_else(|| Error::InvalidArgument("malformed batch entry".into())))
    }
}

/// Decodes one entry: the index's view of it, and the value a type-3
/// entry carries beside its pointer.
fn decode_entry<'a>(src: &mut &'a [u8]) -> Option<(BatchEntry<'a>, Option<&'a [u8]>)> {
    let (&t, rest) = src.split_first()?;
    *src = rest;
    if t == CARRIED {
        let key = get_length_prefixed(src)?;
        let value = get_length_prefixed(src)?;
        let carried = get_length_prefixed(src)?;
        let e = BatchEntry {
            vtype: ValueType::Pointer,
            key,
            value,
        };
        return Some((e, Some(carried)));
    }
    let vtype = ValueType::from_u8(t)?;
    let key = get_length_prefixed(src)?;
    let value = if vtype == ValueType::Deletion {
        &[][..]
    } else {
        get_length_prefixed(src)?
    };
    Some((BatchEntry { vtype, key, value }, None))
}

/// A batch decoded from a WAL record.
pub(crate) struct DecodedBatch<'a> {
    pub seq: SeqNum,
    pub entries: Vec<BatchEntry<'a>>,
    /// Per entry, the value a pointer entry carries (type 3), if any.
    pub carried: Vec<Option<&'a [u8]>>,
}

/// Decodes a WAL record payload; `None` when malformed.
pub(crate) fn decode_batch(mut data: &[u8]) -> Option<DecodedBatch<'_>> {
    let seq = get_fixed64(&mut data)?;
    let count = get_fixed32(&mut data)?;
    let mut entries = Vec::with_capacity(count.min(1 << 16) as usize);
    let mut carried = Vec::with_capacity(count.min(1 << 16) as usize);
    for _ in 0..count {
        let (e, c) = decode_entry(&mut data)?;
        entries.push(e);
        carried.push(c);
    }
    data.is_empty().then_some(DecodedBatch {
        seq,
        entries,
        carried,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encode_decode() {
        let mut b = WriteBatch::new();
        b.put(b"a", b"1").unwrap();
        b.delete(b"b").unwrap();
        b.put(b"c", b"").unwrap();
        let mut rec = Vec::new();
        b.encode_into(42, &mut rec);
        let d = decode_batch(&rec).unwrap();
        assert_eq!(d.seq, 42);
        assert_eq!(d.entries.len(), 3);
        assert_eq!(d.entries[1].vtype, ValueType::Deletion);
        assert_eq!(d.entries[2].key, b"c");
        assert!(decode_batch(&rec[..rec.len() - 1]).is_none());
        assert_eq!(b.user_bytes(), 4);
    }

    #[test]
    fn append_then_split_round_trips() {
        let mut a = WriteBatch::new();
        a.put(b"a", b"1").unwrap();
        let mut b = WriteBatch::new();
        b.delete(b"b").unwrap();
        b.put(b"c", b"333").unwrap();
        let mut g = a.clone();
        g.append(&b);
        assert_eq!(g.len(), 3);
        assert_eq!(g.user_bytes(), a.user_bytes() + b.user_bytes());
        assert_eq!(g.max_value_len(), 3);
        assert_eq!(g.split(&[1, 2]).unwrap(), vec![a, b]);
        assert!(g.split(&[4]).is_err());
    }

    #[test]
    fn carried_values_round_trip_and_read_as_pointers() {
        let mut b = WriteBatch::new();
        b.push(ValueType::Pointer, b"a", b"ptr-a");
        b.push_carried(b"b", b"ptr-b", b"value of b");
        b.delete(b"c").unwrap();
        assert_eq!((b.bare_pointers(), b.carried()), (1, 1));
        let seen: Vec<_> = b.entries().map(|e| e.unwrap()).collect();
        assert_eq!(seen[1].vtype, ValueType::Pointer);
        assert_eq!((seen[1].key, seen[1].value), (&b"b"[..], &b"ptr-b"[..]));
        let mut rec = Vec::new();
        b.encode_into(7, &mut rec);
        let d = decode_batch(&rec).unwrap();
        assert_eq!(d.carried, vec![None, Some(&b"value of b"[..]), None]);
        assert_eq!(d.entries[1].value, b"ptr-b");
        assert!(decode_batch(&rec[..rec.len() - 2]).is_none());
        // Split keeps the carried value.
        let parts = b.split(&[2, 1]).unwrap();
        assert_eq!((parts[0].bare_pointers(), parts[0].carried()), (1, 1));
        let mut g = parts[0].clone();
        g.append(&parts[1]);
        assert_eq!(g, b);
    }

    #[test]
    fn rejects_bad_keys() {
        let mut b = WriteBatch::new();
        assert!(b.put(b"", b"v").is_err());
        assert!(b.put(vec![0; MAX_KEY_SIZE + 1], b"v").is_err());
        assert!(b.put(b"k", vec![0; MAX_VALUE_SIZE + 1]).is_err());
        assert!(b.is_empty());
    }
}
