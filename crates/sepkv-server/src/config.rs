//! The server's configuration (the `sepkv serve` flags).

use crate::durability::Fsync;

/// How the server runs.
#[derive(Debug, Clone)]
pub struct Config {
    /// Address to bind (default `127.0.0.1`).
    pub bind: String,
    /// TCP port (default 6379; 0 picks a free one).
    pub port: u16,
    /// When writes are synced.
    pub fsync: Fsync,
    /// Password every client must give (`AUTH`), if any.
    pub requirepass: Option<String>,
    /// Most clients connected at once.
    pub maxclients: usize,
    /// Refuse to bind a non-loopback address without a password.
    pub protected_mode: bool,
    /// Name of the engine preset, for `INFO`.
    pub preset: String,
    /// Cluster mode: the topology file and this node's ID.
    pub cluster: Option<crate::cluster::ClusterConfig>,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            bind: "127.0.0.1".into(),
            port: 6379,
            fsync: Fsync::EverySec,
            requirepass: None,
            maxclients: 10_000,
            protected_mode: true,
            preset: String::new(),
            cluster: None,
        }
    }
}
