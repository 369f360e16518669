//! What an entry of a write is: a deletion, an inline value or a value
//! pointer. The index stores the type in each entry's trailer, the value
//! stores that log whole writes (the bands, the value log in log mode)
//! record it beside each key, and the facade turns it into what a read
//! returns. The byte values are on disk: frozen, format version 1.

/// Type of an index entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(u8)]
pub enum ValueType {
    /// A tombstone: the key was deleted.
    Deletion = 0,
    /// The value is stored inline in the index.
    Value = 1,
    /// The index holds an encoded value pointer into the value store.
    Pointer = 2,
}

impl ValueType {
    /// Decodes a type byte.
    pub fn from_u8(b: u8) -> Option<ValueType> {
        match b {
            0 => Some(ValueType::Deletion),
            1 => Some(ValueType::Value),
            2 => Some(ValueType::Pointer),
            _ => None,
        }
    }
}
