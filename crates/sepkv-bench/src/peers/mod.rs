//! Peer engines: fjall (always built), RocksDB (cargo feature `rocksdb`),
//! LevelDB (cargo feature `leveldb`) and Badger (cargo feature `badger`).
//! They keep sepkv's defaults where the engines have a matching knob
//! (128-byte separation threshold, 32 MiB block cache, no compression;
//! RocksDB and Badger also take its 8 MiB memtable) and report their I/O through the process's counters, as
//! none has per-category accounting comparable to sepkv's.

#[cfg(feature = "badger")]
pub mod badger;
pub mod fjall;
#[cfg(feature = "leveldb")]
pub mod leveldb;
#[cfg(feature = "rocksdb")]
pub mod rocks;

/// sepkv's default `value_threshold`: values at least this long go to the
/// value store, and the separating peers use the same threshold.
pub const SEPKV_VALUE_THRESHOLD: u32 = 128;
/// sepkv's default block cache (32 MiB); the peers get the same.
pub const SEPKV_BLOCK_CACHE: u64 = 32 << 20;

/// How the amplification of a peer is computed (one of its notes).
pub const PROCESS_IO_NOTE: &str = "the engine has no I/O accounting of its own: bytes written/read, WA and RA \
     are the process's storage I/O from /proc/self/io (write_bytes - cancelled_write_bytes, read_bytes), \
     so reads served by the page cache are not counted";
