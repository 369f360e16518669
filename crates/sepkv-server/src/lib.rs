//! sepkv over the Redis protocol: `sepkv serve`.
//!
//! A RESP2/RESP3 server (tokio for networking, the `redis-protocol` crate
//! for framing) whose keyspace is one sepkv [`Db`], used through its
//! public API only. Every Redis client, `redis-cli` and `redis-benchmark`
//! can talk to it. Redis 7.0 is the reference for replies.
//!
//! Layers, top to bottom:
//!
//! - [`server`]: the listener, one task per connection, shutdown;
//! - [`resp`]: requests off the wire (multibulk and inline), replies onto
//!   it in RESP2 or RESP3;
//! - [`command`]: the command table and the checks every command gets;
//!   [`commands`]: the commands, one file per group;
//! - [`keyspace`]: Redis keys as engine records, transactions that keep the
//!   key count in the same batch; [`keys`]: the frozen key encoding;
//! - [`writer`]: every write command runs on one thread, in groups that
//!   share one engine batch and (with `--fsync always`) one fsync;
//!   [`multi`]: MULTI/EXEC transactions, one engine batch each;
//! - [`expire`]: active expiry and the reclaiming of flushed records;
//!   [`filter`]: the compaction filter that drops dead hash fields;
//!   [`durability`]: `--fsync` policies and the once-a-second sync;
//! - [`cluster`]: cluster mode (hash slots, redirections, slot migration).
//!
//! ```no_run
//! use sepkv_server::{serve, Config};
//! let db = sepkv::Db::open("data", sepkv::Options::default())?;
//! serve(db, Config { port: 6380, ..Config::default() }, |addr| {
//!     println!("ready: listening on {addr}");
//! })?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub mod cluster;
pub mod command;
pub mod commands;
pub mod config;
pub mod durability;
pub mod expire;
pub mod filter;
pub mod keys;
pub mod keyspace;
pub mod multi;
pub mod resp;
pub mod server;
pub mod state;
pub mod writer;

pub use config::Config;
pub use durability::Fsync;
pub use server::{ServeError, Server};

use sepkv::Db;
use std::net::SocketAddr;
use std::sync::Arc;

/// Serves `db` (a [`Db`], or an `Arc<Db>` the caller shares, such as one
/// a [`filter::KeyspaceFilter`] is attached to) until SIGTERM or SIGINT,
/// then finishes the commands in flight, closes the database and returns.
/// `ready` is called with the bound address once connections are
/// accepted.
///
/// # Errors
/// Start-up refusals ([`ServeError::Config`]), bind errors, and the
/// database's close error.
pub fn serve(
    db: impl Into<Arc<Db>>,
    config: Config,
    ready: impl FnOnce(SocketAddr),
) -> Result<(), ServeError> {
    let db: Arc<Db> = db.into();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let result = rt.block_on(async {
        let server = Server::bind(db.clone(), config).await?;
        ready(server.local_addr()?);
        server.run(shutdown_signal()).await
    });
    drop(rt);
    let closed = db.close();
    result?;
    closed.map_err(ServeError::Db)
}

/// Completes on SIGTERM or SIGINT.
async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = tokio::signal::ctrl_c() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
