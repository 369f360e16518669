//! State shared by every connection ([`Shared`]) and the state of one
//! connection ([`ClientState`]).
//!
//! Thread-safety: `Shared` is behind an `Arc` and shared by every task;
//! its mutable parts are atomics or short-held mutexes. `ClientState` is
//! owned by its connection's task; what `CLIENT LIST` shows of it is
//! mirrored in a [`ClientInfo`] in the registry.

use crate::config::Config;
use crate::durability::Durability;
use crate::keyspace::Keyspace;
use bytes::Bytes;
use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime};

/// Server-wide counters for `INFO stats`.
#[derive(Debug, Default)]
pub struct ServerStats {
    /// Commands run.
    pub commands: AtomicU64,
    /// Connections accepted.
    pub connections: AtomicU64,
    /// Connections refused by `maxclients`.
    pub rejected: AtomicU64,
    /// Connections closed for a protocol error.
    pub protocol_errors: AtomicU64,
}

/// What other connections see of a client (`CLIENT LIST`).
#[derive(Debug)]
pub struct ClientInfo {
    /// Client id.
    pub id: u64,
    /// Peer address.
    pub addr: SocketAddr,
    /// Local address.
    pub laddr: SocketAddr,
    /// When it connected.
    pub created: Instant,
    /// Mutable parts.
    pub live: Mutex<ClientLive>,
}

/// The changing part of a [`ClientInfo`].
#[derive(Debug, Clone)]
pub struct ClientLive {
    /// `CLIENT SETNAME`.
    pub name: Option<Bytes>,
    /// Last command's name.
    pub last_command: &'static str,
    /// When it last ran a command.
    pub last_active: Instant,
    /// Protocol version.
    pub proto: u8,
}

/// A connection's own state.
#[derive(Debug)]
pub struct ClientState {
    /// Client id (`CLIENT ID`).
    pub id: u64,
    /// RESP version: 2 or 3.
    pub proto: u8,
    /// Whether commands beyond AUTH/HELLO/QUIT are allowed.
    pub authenticated: bool,
    /// `CLIENT SETNAME`.
    pub name: Option<Bytes>,
    /// Name of the command being run.
    pub last_command: &'static str,
    /// Close the connection after the replies are written.
    pub close: bool,
    /// The registry entry.
    pub info: Arc<ClientInfo>,
    /// `MULTI` queue and watched keys.
    pub tx: crate::multi::TxState,
}

impl ClientState {
    /// Copies what `CLIENT LIST` shows into the registry entry.
    pub fn publish(&self) {
        let mut l = self.info.live.lock().unwrap_or_else(|p| p.into_inner());
        l.name.clone_from(&self.name);
        l.last_command = self.last_command;
        l.last_active = Instant::now();
        l.proto = self.proto;
    }
}

/// Bound on remembered `SCAN` cursors.
const CURSORS: usize = 10_000;

/// `SCAN` cursors: the number a client gets names the engine key to go on
/// from. The low 14 bits hold the slot of that key, so a forgotten cursor
/// (the table keeps the newest 10 000) restarts at its slot: keys may
/// be returned twice, none present throughout is missed.
#[derive(Debug, Default)]
pub struct Cursors {
    next: u64,
    map: HashMap<u64, Vec<u8>>,
    order: VecDeque<u64>,
}

impl Cursors {
    /// A cursor for engine key `k`.
    pub fn save(&mut self, k: Vec<u8>) -> u64 {
        self.next += 1;
        let slot = u64::from(u16::from_be_bytes([k[0], k.get(1).copied().unwrap_or(0)]) & 0x3fff);
        let id = (self.next << 14) | slot;
        self.map.insert(id, k);
        self.order.push_back(id);
        if self.order.len() > CURSORS {
            if let Some(old) = self.order.pop_front() {
                self.map.remove(&old);
            }
        }
        id
    }

    /// The engine key cursor `c` resumes at.
    pub fn resume(&self, c: u64) -> Vec<u8> {
        match self.map.get(&c) {
            Some(k) => k.clone(),
            None => ((c & 0x3fff) as u16).to_be_bytes().to_vec(),
        }
    }
}

/// State shared by every connection.
pub struct Shared {
    /// The configuration.
    pub config: Config,
    /// The keyspace.
    pub ks: Arc<Keyspace>,
    /// Durability policy and the once-a-second syncer.
    pub durability: Durability,
    /// The writer thread (every write command).
    pub writer: crate::writer::Writer,
    /// Counters.
    pub stats: ServerStats,
    /// Connected clients by id.
    pub clients: Mutex<HashMap<u64, Arc<ClientInfo>>>,
    /// Next client id.
    pub next_client: AtomicU64,
    /// Open connections (counted at accept, before they register).
    pub open: AtomicUsize,
    /// `SCAN` cursors.
    pub cursors: Mutex<Cursors>,
    /// When the server started.
    pub started: Instant,
    /// When the server started (wall clock).
    pub started_wall: SystemTime,
    /// Bound TCP port.
    pub port: u16,
    /// Cluster mode's state, when on.
    pub cluster: Option<Arc<crate::cluster::Cluster>>,
}

impl Shared {
    /// Connected clients.
    pub fn connected(&self) -> usize {
        self.clients.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// A new client id.
    pub fn new_client_id(&self) -> u64 {
        self.next_client.fetch_add(1, Ordering::Relaxed) + 1
    }
}
