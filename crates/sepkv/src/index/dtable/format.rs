//! Encodings of the DTable tail: segment directory, overlapped metaindex,
//! footer, and the per-block filters of a segment (formats in the parent
//! module). Decoding never panics; errors are the reason of a corruption.

use crate::format::checksum;
use crate::format::coding::{
    get_fixed32, get_fixed64, get_length_prefixed, get_varint64, put_length_prefixed, put_varint64,
};
use crate::index::sstable::{BlockHandle, BloomFilter};

/// Bytes of the DTable footer (the SSTable footer's size).
pub(crate) const DFOOTER_LEN: usize = 56;
const HANDLES_LEN: usize = 40;
const DFORMAT_VERSION: u32 = 1;
/// Magic number closing a DTable; on disk the bytes read `sepkvDTB`.
pub(crate) const DTABLE_MAGIC: u64 = u64::from_le_bytes(*b"sepkvDTB");

/// Most segments a directory may list (decoding bound; the engine keeps
/// far fewer, see `Options::lwc_max_segments`).
pub(crate) const MAX_SEGMENTS: u64 = 1 << 16;

/// Name of a segment's meta block that records what the segment shadowed
/// when it was appended ([`Shadowed`]). Sorts after the filters' names.
pub(crate) const SHADOWED_META_NAME: &str = "lwc.shadowed";

/// The entries of a DTable's older segments that a newly appended segment
/// shadows (their user keys have a newer version in it), as estimated by
/// the older segments' filters when it was appended. Stored in the
/// segment's meta block `lwc.shadowed` as
/// `entries:varint64 bytes:varint64`; a segment without it shadowed
/// nothing that was counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Shadowed {
    /// Entries of older segments shadowed.
    pub entries: u64,
    /// Bytes of older segments those entries account for (each segment's
    /// bytes shared evenly among its entries).
    pub bytes: u64,
}

impl Shadowed {
    /// Encodes the meta block's contents.
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut b = Vec::new();
        put_varint64(&mut b, self.entries);
        put_varint64(&mut b, self.bytes);
        b
    }

    /// Decodes the meta block's contents.
    pub(crate) fn decode(mut src: &[u8]) -> Result<Shadowed, String> {
        let s = &mut src;
        let entries = get_varint64(s).ok_or("bad shadowed entry count")?;
        let bytes = get_varint64(s).ok_or("bad shadowed byte count")?;
        if !s.is_empty() {
            return Err("trailing bytes in shadowed block".into());
        }
        Ok(Shadowed { entries, bytes })
    }
}

/// One segment of a DTable, as its directory lists it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentEntry {
    /// Sequence number of the segment in its table (1 for the first).
    pub seq: u64,
    /// Offset just past the segment's SSTable footer.
    pub end: u64,
    /// Entries in the segment.
    pub entries: u64,
    /// Bytes of the segment (data, filters, index, SSTable footer).
    pub bytes: u64,
}

/// The segment directory of a DTable: its segments, oldest first.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Directory {
    /// Segments in append order.
    pub segments: Vec<SegmentEntry>,
}

impl Directory {
    /// Encodes the directory (block contents, without trailer).
    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::new();
        put_varint64(&mut b, self.segments.len() as u64);
        for s in &self.segments {
            put_varint64(&mut b, s.seq);
            put_varint64(&mut b, s.end);
            put_varint64(&mut b, s.entries);
            put_varint64(&mut b, s.bytes);
        }
        b
    }

    /// Decodes a directory and checks that sequence numbers and end offsets
    /// strictly increase and that every segment ends by `limit`.
    pub fn decode(mut src: &[u8], limit: u64) -> Result<Directory, String> {
        let s = &mut src;
        let n = get_varint64(s).ok_or("bad segment count")?;
        if n == 0 || n > MAX_SEGMENTS {
            return Err(format!("segment count {n} out of range"));
        }
        let mut d = Directory::default();
        for _ in 0..n {
            let seg = SegmentEntry {
                seq: get_varint64(s).ok_or("bad segment sequence number")?,
                end: get_varint64(s).ok_or("bad segment end")?,
                entries: get_varint64(s).ok_or("bad segment entry count")?,
                bytes: get_varint64(s).ok_or("bad segment size")?,
            };
            if let Some(p) = d.segments.last() {
                if seg.seq <= p.seq || seg.end <= p.end {
                    return Err("segments out of order in directory".into());
                }
            }
            if seg.end > limit || seg.bytes > seg.end {
                return Err(format!(
                    "segment {} ends at {} beyond the tail at {limit}",
                    seg.seq, seg.end
                ));
            }
            d.segments.push(seg);
        }
        if !s.is_empty() {
            return Err("trailing bytes in segment directory".into());
        }
        Ok(d)
    }

    /// Sequence number the next segment gets.
    pub fn next_seq(&self) -> u64 {
        self.segments.last().map_or(1, |s| s.seq + 1)
    }

    /// Bytes before the last segment that no segment covers: the stale
    /// tails of earlier appends (each append's directory, overlapped
    /// metaindex and footer, superseded by the next append's) and any torn
    /// append skipped over.
    pub fn stale_tail_bytes(&self) -> u64 {
        let mut prev_end = 0u64;
        let mut stale = 0u64;
        for s in &self.segments {
            let start = s.end.saturating_sub(s.bytes);
            stale += start.saturating_sub(prev_end);
            prev_end = s.end;
        }
        stale
    }
}

/// One entry of the overlapped metaindex (§3.2): the metadata of a
/// next-level DTable as of the size it had.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Aggregated {
    /// File number of the next-level DTable.
    pub number: u64,
    /// Its size (tail end) when the copy was taken.
    pub size: u64,
    /// Its segment directory at that size.
    pub directory: Directory,
}

/// Encodes the overlapped metaindex.
pub(crate) fn encode_aggregated(entries: &[Aggregated]) -> Vec<u8> {
    let mut b = Vec::new();
    put_varint64(&mut b, entries.len() as u64);
    for a in entries {
        put_varint64(&mut b, a.number);
        put_varint64(&mut b, a.size);
        put_length_prefixed(&mut b, &a.directory.encode());
    }
    b
}

/// Decodes the overlapped metaindex.
pub(crate) fn decode_aggregated(mut src: &[u8]) -> Result<Vec<Aggregated>, String> {
    let s = &mut src;
    let n = get_varint64(s).ok_or("bad overlapped metaindex count")?;
    let mut out = Vec::new();
    for _ in 0..n {
        let number = get_varint64(s).ok_or("bad overlapped table number")?;
        let size = get_varint64(s).ok_or("bad overlapped table size")?;
        let d = get_length_prefixed(s).ok_or("bad overlapped directory")?;
        let directory = Directory::decode(d, size)?;
        out.push(Aggregated {
            number,
            size,
            directory,
        });
    }
    if !s.is_empty() {
        return Err("trailing bytes in overlapped metaindex".into());
    }
    Ok(out)
}

/// The DTable footer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DFooter {
    /// The segment directory block.
    pub(crate) directory: BlockHandle,
    /// The overlapped metaindex block.
    pub(crate) overlapped: BlockHandle,
}

impl DFooter {
    /// Encodes the footer.
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(DFOOTER_LEN);
        self.directory.encode_to(&mut v);
        self.overlapped.encode_to(&mut v);
        v.resize(HANDLES_LEN, 0);
        v.extend_from_slice(&DFORMAT_VERSION.to_le_bytes());
        let crc = checksum::mask(checksum::crc(&v));
        v.extend_from_slice(&crc.to_le_bytes());
        v.extend_from_slice(&DTABLE_MAGIC.to_le_bytes());
        v
    }

    /// Decodes a footer.
    pub(crate) fn decode(bytes: &[u8]) -> Result<DFooter, String> {
        if bytes.len() != DFOOTER_LEN {
            return Err(format!("DTable footer is {} bytes", bytes.len()));
        }
        let (covered, mut tail) = bytes.split_at(HANDLES_LEN + 4);
        let stored = get_fixed32(&mut tail).unwrap_or(0);
        let magic = get_fixed64(&mut tail).unwrap_or(0);
        if magic != DTABLE_MAGIC {
            return Err(format!("not a DTable: bad magic number {magic:#018x}"));
        }
        if checksum::unmask(stored) != checksum::crc(covered) {
            return Err("DTable footer checksum mismatch".into());
        }
        let (mut handles, mut version) = covered.split_at(HANDLES_LEN);
        let version = get_fixed32(&mut version).unwrap_or(0);
        if version != DFORMAT_VERSION {
            return Err(format!("unsupported DTable format version {version}"));
        }
        let directory =
            BlockHandle::decode_from(&mut handles).ok_or("malformed directory handle")?;
        let overlapped =
            BlockHandle::decode_from(&mut handles).ok_or("malformed overlapped handle")?;
        Ok(DFooter {
            directory,
            overlapped,
        })
    }
}

/// The per-data-block bloom filters of one segment, by block offset: the
/// encoded filters back to back in one buffer (a segment has a filter for
/// every data block of a few entries, so one allocation each would cost
/// more than the filters).
#[derive(Debug, Default)]
pub(crate) struct BlockFilters {
    offsets: Vec<u64>,
    /// End of each block's filter in `data`.
    ends: Vec<u32>,
    data: Vec<u8>,
}

impl BlockFilters {
    /// Decodes the `filter.blocks` meta block.
    pub(crate) fn decode(mut src: &[u8]) -> Result<BlockFilters, String> {
        let s = &mut src;
        let mut bf = BlockFilters::default();
        while !s.is_empty() {
            let off = get_varint64(s).ok_or("bad block filter offset")?;
            let f = get_length_prefixed(s).ok_or("bad block filter")?;
            if bf.offsets.last().is_some_and(|&p| p >= off) {
                return Err("block filters out of order".into());
            }
            BloomFilter::check(f)?;
            bf.data.extend_from_slice(f);
            let end = u32::try_from(bf.data.len()).map_err(|_| "block filters past 4 GiB")?;
            bf.offsets.push(off);
            bf.ends.push(end);
        }
        bf.offsets.shrink_to_fit();
        bf.ends.shrink_to_fit();
        bf.data.shrink_to_fit();
        Ok(bf)
    }

    /// The encoded filter of block `i`.
    fn filter(&self, i: usize) -> &[u8] {
        let start = if i == 0 { 0 } else { self.ends[i - 1] as usize };
        &self.data[start..self.ends[i] as usize]
    }

    /// False when the data block at `offset` certainly lacks the user key
    /// whose filter hash ([`key_hash`](crate::index::sstable::filter::key_hash))
    /// is `hash` (true for a block without a filter).
    /// `n` is the block's ordinal in its segment: the filters are stored one
    /// per block in block order, so the `n`-th is the block's when its
    /// offset matches (then no search); otherwise the offset is searched.
    pub(crate) fn may_contain_hash(&self, n: usize, offset: u64, hash: u64) -> bool {
        let i = if self.offsets.get(n) == Some(&offset) {
            n
        } else {
            match self.offsets.binary_search(&offset) {
                Ok(i) => i,
                Err(_) => return true,
            }
        };
        BloomFilter::encoded_may_contain_hash(self.filter(i), hash)
    }

    /// True when no block has a filter.
    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.offsets.is_empty()
    }

    /// Bytes held.
    pub(crate) fn size(&self) -> usize {
        self.data.len() + 12 * self.offsets.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::coding::{put_length_prefixed, put_varint64};
    use crate::index::sstable::{key_hash, FilterBuilder};
    use proptest::prelude::*;

    /// The `filter.blocks` meta block of blocks at `offsets`, block `i`
    /// holding the keys `b{i}-0` .. `b{i}-3`.
    fn block_filters(offsets: &[u64]) -> Vec<u8> {
        let mut out = Vec::new();
        for (i, &off) in offsets.iter().enumerate() {
            let mut f = FilterBuilder::new(10);
            for j in 0..4 {
                f.add_key(format!("b{i}-{j}").as_bytes());
            }
            put_varint64(&mut out, off);
            put_length_prefixed(&mut out, &f.finish());
        }
        out
    }

    #[test]
    fn block_filters_answer_for_their_own_block() {
        let bf = BlockFilters::decode(&block_filters(&[0, 4100, 8200])).unwrap();
        for (i, off) in [0u64, 4100, 8200].into_iter().enumerate() {
            for j in 0..4 {
                let h = key_hash(format!("b{i}-{j}").as_bytes());
                // By ordinal, and by offset when the ordinal is off.
                assert!(bf.may_contain_hash(i, off, h));
                assert!(bf.may_contain_hash(i + 1, off, h));
            }
        }
        let absent = (0..100)
            .filter(|j| bf.may_contain_hash(1, 4100, key_hash(format!("x{j}").as_bytes())))
            .count();
        assert!(absent < 20, "{absent} of 100 absent keys pass");
        // A block without a filter may hold anything.
        assert!(bf.may_contain_hash(0, 50, key_hash(b"x")));
        assert_eq!(bf.size(), bf.data.len() + 36);
    }

    #[test]
    fn block_filters_reject_a_bad_probe_count_and_disorder() {
        let mut bad = block_filters(&[0]);
        *bad.last_mut().unwrap() = 0;
        assert!(BlockFilters::decode(&bad)
            .unwrap_err()
            .contains("probe count"));
        let disordered = [block_filters(&[4100]), block_filters(&[0])].concat();
        assert!(BlockFilters::decode(&disordered)
            .unwrap_err()
            .contains("out of order"));
    }

    proptest! {
        /// No decoder of the tail panics, whatever the bytes.
        #[test]
        fn decoders_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..300), limit in any::<u64>()) {
            let _ = Directory::decode(&bytes, limit);
            let _ = decode_aggregated(&bytes);
            let _ = DFooter::decode(&bytes);
            let _ = BlockFilters::decode(&bytes);
            let _ = Shadowed::decode(&bytes);
            if bytes.len() >= DFOOTER_LEN {
                let _ = DFooter::decode(&bytes[..DFOOTER_LEN]);
            }
        }
    }

    /// A block's filter is found by its ordinal when that matches the
    /// offset, and by the offset otherwise; an unknown offset has none.
    #[test]
    fn block_filter_found_by_ordinal_or_by_offset() {
        use crate::format::coding::{put_length_prefixed, put_varint64};
        use crate::index::sstable::{key_hash, FilterBuilder};
        let keys: Vec<Vec<u8>> = (0..3).map(|i| format!("key{i}").into_bytes()).collect();
        let mut contents = Vec::new();
        for (i, k) in keys.iter().enumerate() {
            let mut f = FilterBuilder::new(10);
            f.add_key(k);
            put_varint64(&mut contents, i as u64 * 100);
            put_length_prefixed(&mut contents, &f.finish());
        }
        let bf = BlockFilters::decode(&contents).unwrap();
        for (i, k) in keys.iter().enumerate() {
            let h = key_hash(k);
            let off = i as u64 * 100;
            assert!(bf.may_contain_hash(i, off, h), "block {i}");
            for other in keys.iter().map(|k| key_hash(k)) {
                let want = bf.may_contain_hash(i, off, other);
                for n in 0..5 {
                    assert_eq!(bf.may_contain_hash(n, off, other), want, "block {i} as {n}");
                }
            }
            assert!(bf.may_contain_hash(i, off + 1, h), "no filter: maybe");
        }
    }

    #[test]
    fn footer_and_directory_roundtrip() {
        let f = DFooter {
            directory: BlockHandle {
                offset: 1000,
                size: 40,
            },
            overlapped: BlockHandle {
                offset: 1045,
                size: 3,
            },
        };
        let b = f.encode();
        assert_eq!(b.len(), DFOOTER_LEN);
        assert_eq!(DFooter::decode(&b), Ok(f));
        for i in 0..DFOOTER_LEN * 8 {
            let mut c = b.clone();
            c[i / 8] ^= 1 << (i % 8);
            assert!(DFooter::decode(&c).is_err(), "bit {i}");
        }
        let d = Directory {
            segments: vec![
                SegmentEntry {
                    seq: 1,
                    end: 100,
                    entries: 3,
                    bytes: 100,
                },
                SegmentEntry {
                    seq: 2,
                    end: 300,
                    entries: 5,
                    bytes: 150,
                },
            ],
        };
        assert_eq!(Directory::decode(&d.encode(), 300), Ok(d.clone()));
        assert!(Directory::decode(&d.encode(), 299).is_err());
        let enc = d.encode();
        for cut in 0..enc.len() {
            assert!(Directory::decode(&enc[..cut], 300).is_err());
        }
        let a = vec![Aggregated {
            number: 7,
            size: 300,
            directory: d,
        }];
        assert_eq!(decode_aggregated(&encode_aggregated(&a)), Ok(a));
    }

    #[test]
    fn shadowed_roundtrips_and_stale_tails_are_the_gaps() {
        let sh = Shadowed {
            entries: 300,
            bytes: 1 << 40,
        };
        assert_eq!(Shadowed::decode(&sh.encode()), Ok(sh));
        let enc = sh.encode();
        for cut in 0..enc.len() {
            assert!(Shadowed::decode(&enc[..cut]).is_err());
        }
        assert!(Shadowed::decode(&[enc.clone(), vec![0]].concat()).is_err());
        let seg = |seq, end, bytes| SegmentEntry {
            seq,
            end,
            entries: 1,
            bytes,
        };
        // Segments at [0, 100), [160, 300) and [420, 500): tails of 60
        // and 120 bytes lie between them.
        let d = Directory {
            segments: vec![seg(1, 100, 100), seg(2, 300, 140), seg(3, 500, 80)],
        };
        assert_eq!(d.stale_tail_bytes(), 180);
        assert_eq!(Directory::default().stale_tail_bytes(), 0);
    }
}
