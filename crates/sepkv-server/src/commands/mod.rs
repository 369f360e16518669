//! The commands, one file per Redis command group.

pub mod connection;
pub mod hashes;
pub mod keyspace;
pub mod server;
pub mod strings;

use crate::resp::Reply;

impl From<sepkv::Error> for Reply {
    /// An engine error answers the command with `ERR` and the error's text
    /// (a `Corruption` names file and offset; a poisoned database says it
    /// is read-only).
    fn from(e: sepkv::Error) -> Reply {
        Reply::err(e)
    }
}
