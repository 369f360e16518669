//! Sequence numbers: the order of writes, shared by the index, the value
//! stores and the facade.
//!
//! Every write (every entry of a batch) gets the next sequence number; a
//! snapshot reads at one. Sequence numbers take 56 bits, so that an index
//! entry packs one with its [`ValueType`](crate::value_type::ValueType) into
//! an 8-byte trailer (`index/key.rs`). Frozen: format version 1.

/// A sequence number: every write gets the next one; 56 bits.
pub type SeqNum = u64;

/// Largest valid sequence number.
pub const MAX_SEQ: SeqNum = (1 << 56) - 1;
