//! Byte formats shared by every on-disk structure: integer coding,
//! checksums and the checksummed record framing used by the write-ahead log,
//! the manifest and the value stores.

pub mod checksum;
pub mod coding;
pub mod record;
