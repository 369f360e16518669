//! Byte formats shared by every on-disk structure: integer coding,
//! checksums, the checksummed record framing used by the write-ahead log and
//! the manifest, and the value-record codec of the value stores.

pub mod checksum;
pub mod coding;
pub mod record;
pub mod value_record;
