//! Cluster mode: this node serves the hash slots a static topology gives
//! it, as Redis Cluster clients expect, with no gossip (as Kvrocks does).
//!
//! - [`topology`]: the topology file, its validation and its text;
//! - [`slots`]: where a command's keys are served: here, `-MOVED`, `-ASK`,
//!   `-CROSSSLOT` or `-TRYAGAIN`;
//! - [`migrate`]: moving slots between nodes while they serve writes;
//! - [`raft`]: a shard of several nodes replicated as one Raft group;
//! - [`commands`]: `CLUSTER …`, `ASKING`, `READONLY`, `READWRITE`;
//! - [`admin`]: `sepkv cluster migrate`, which drives a migration;
//! - [`client`]: the small blocking RESP client migration and the
//!   `sepkv cluster` admin command use.
//!
//! State: the topology in force (installed only when its version is higher
//! than the current one, and persisted in the database as the record
//! `0xFF "cluster-topology"`), and the migration marks of slots
//! (`0xFF "cluster-marks"`): *migrating* (to a target node), *moved*
//! (every key copied to the target: this node answers `-ASK`), and
//! *importing* (from a source node: commands after `ASKING` are served).
//! Each slot's effective state is one byte in an array that commands read
//! without a lock.
//!
//! Ordering: a slot's state changes while the keyspace's writer lock is
//! held ([`crate::keyspace::Keyspace::txn`]), and the writer re-checks the
//! state of every write it runs ([`Cluster::recheck_write`]); so a write
//! applied on the source is applied before its slot's copy begins, and a
//! write after it is refused (`-TRYAGAIN`, `-ASK` or `-MOVED`), never lost.
//!
//! Thread-safety: [`Cluster`] is shared by every connection (`Sync`).

pub mod admin;
pub mod client;
pub mod commands;
pub mod migrate;
pub mod raft;
pub mod slots;
pub mod topology;

use crate::durability::Fsync;
use crate::keys::{CLUSTER_MARKS_KEY, CLUSTER_TOPOLOGY_KEY, SLOTS};
use crate::keyspace::Keyspace;
use sepkv::{WriteBatch, WriteOptions};
use std::collections::{BTreeMap, HashSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock};
pub use topology::{Node, Shard, Topology, TopologyError};

/// How `sepkv serve` runs in cluster mode.
#[derive(Debug, Clone)]
pub struct ClusterConfig {
    /// The topology file (reread on SIGHUP).
    pub file: PathBuf,
    /// This node's ID in it.
    pub node_id: String,
    /// The Raft bus port to listen on (default: the topology's, else the
    /// client port + 10000).
    pub bus_port: Option<u16>,
}

/// A slot's effective state on this node (one byte per slot).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum SlotState {
    /// Served here.
    Serve = 0,
    /// Served here, marked migrating, not copied yet.
    Migrating = 1,
    /// Being copied to the target: writes wait.
    InFlight = 2,
    /// Copied to the target: `-ASK`.
    Moved = 3,
    /// Another node's: `-MOVED`.
    Elsewhere = 4,
    /// Another node's, being imported here: served after `ASKING`.
    Importing = 5,
}

impl SlotState {
    fn from_u8(b: u8) -> SlotState {
        match b {
            0 => SlotState::Serve,
            1 => SlotState::Migrating,
            2 => SlotState::InFlight,
            3 => SlotState::Moved,
            5 => SlotState::Importing,
            _ => SlotState::Elsewhere,
        }
    }
}

/// A slot's migration mark.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mark {
    /// Moving to node `.0`; `.1` once every key is copied.
    Migrating(String, bool),
    /// Coming from node `.0`.
    Importing(String),
}

/// The cluster state of this node.
pub struct Cluster {
    me: String,
    file: PathBuf,
    bind: String,
    port: u16,
    ks: Arc<Keyspace>,
    topo: RwLock<Arc<Topology>>,
    marks: Mutex<BTreeMap<u16, Mark>>,
    state: Vec<AtomicU8>,
    asking: Mutex<HashSet<u64>>,
    asking_n: AtomicUsize,
    /// Password for the other nodes (the cluster shares one).
    pub(crate) requirepass: Option<String>,
    /// The `--fsync` policy.
    pub(crate) fsync: Fsync,
    /// The background drop: (running, run again when done).
    dropper: Mutex<(bool, bool)>,
    /// This node's replica of its shard's Raft group (several nodes).
    replica: OnceLock<Arc<raft::Replica>>,
    /// Clients that sent `READONLY`.
    readonly: Mutex<HashSet<u64>>,
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster").field("me", &self.me).finish()
    }
}

/// Whether node `me` is one of the nodes of `slot`'s shard.
fn serves(t: &Topology, slot: u16, me: &str) -> bool {
    t.shard_of(slot).nodes.iter().any(|n| n.id == me)
}

fn bind_matches(bind: &str, port: u16, n: &Node) -> bool {
    n.port == port
        && (n.host == bind
            || matches!(bind, "0.0.0.0" | "::")
            || (bind == "localhost" && n.host == "127.0.0.1"))
}

impl Cluster {
    /// Reads the topology file and the topology persisted in the database,
    /// keeps the higher version, and checks that this node is in it at the
    /// address it binds.
    ///
    /// # Errors
    /// An unreadable or invalid file, a node ID not in the topology, an
    /// address mismatch (both named), engine errors.
    pub fn open(
        ks: Arc<Keyspace>,
        cfg: &ClusterConfig,
        bind: &str,
        port: u16,
        requirepass: Option<String>,
        fsync: Fsync,
    ) -> Result<Arc<Cluster>, String> {
        let text = std::fs::read_to_string(&cfg.file)
            .map_err(|e| format!("cannot read {}: {e}", cfg.file.display()))?;
        let from_file =
            Topology::parse(&text).map_err(|e| format!("{}: {e}", cfg.file.display()))?;
        let db = ks.db();
        let stored = match db.get(CLUSTER_TOPOLOGY_KEY).map_err(|e| e.to_string())? {
            Some(v) => Some(
                Topology::parse(&String::from_utf8_lossy(&v))
                    .map_err(|e| format!("the topology stored in the database: {e}"))?,
            ),
            None => None,
        };
        let topo = match stored {
            Some(s) if s.version >= from_file.version => s,
            _ => from_file,
        };
        let marks = match db.get(CLUSTER_MARKS_KEY).map_err(|e| e.to_string())? {
            Some(v) => decode_marks(&String::from_utf8_lossy(&v))?,
            None => BTreeMap::new(),
        };
        let c = Cluster {
            me: cfg.node_id.clone(),
            file: cfg.file.clone(),
            bind: bind.into(),
            port,
            ks,
            topo: RwLock::new(Arc::new(topo.clone())),
            marks: Mutex::new(marks),
            state: (0..SLOTS).map(|_| AtomicU8::new(0)).collect(),
            asking: Mutex::new(HashSet::new()),
            asking_n: AtomicUsize::new(0),
            requirepass,
            fsync,
            dropper: Mutex::new((false, false)),
            replica: OnceLock::new(),
            readonly: Mutex::new(HashSet::new()),
        };
        c.check_me(&topo)?;
        c.persist_topology(&topo)?;
        c.settle_marks(&topo)?;
        c.refresh_states();
        let c = Arc::new(c);
        // Slots given away before a restart may still hold records.
        c.drop_unowned();
        Ok(c)
    }

    /// This node's ID.
    pub fn my_id(&self) -> &str {
        &self.me
    }

    /// The topology in force.
    pub fn topology(&self) -> Arc<Topology> {
        self.topo.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The keyspace.
    pub fn keyspace(&self) -> &Arc<Keyspace> {
        &self.ks
    }

    /// `slot`'s state on this node.
    pub fn slot_state(&self, slot: u16) -> SlotState {
        SlotState::from_u8(self.state[usize::from(slot)].load(Ordering::Acquire))
    }

    /// The migration marks.
    pub fn marks(&self) -> BTreeMap<u16, Mark> {
        self.marks.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn check_me(&self, t: &Topology) -> Result<(), String> {
        let Some((_, n)) = t.node(&self.me) else {
            return Err(format!(
                "node {} is not in the topology (version {})",
                self.me, t.version
            ));
        };
        if !bind_matches(&self.bind, self.port, n) {
            return Err(format!(
                "node {} is {} in the topology (version {}), but this server listens on {}:{} \
                 (--bind/--port)",
                self.me,
                n.addr(),
                t.version,
                self.bind,
                self.port
            ));
        }
        Ok(())
    }

    fn persist_topology(&self, t: &Topology) -> Result<(), String> {
        let mut b = WriteBatch::new();
        b.put(CLUSTER_TOPOLOGY_KEY, t.to_string().into_bytes())
            .map_err(|e| e.to_string())?;
        self.ks
            .db()
            .write(&b, WriteOptions { sync: true })
            .map_err(|e| e.to_string())
    }

    fn persist_marks(&self, marks: &BTreeMap<u16, Mark>) -> Result<(), String> {
        let mut b = WriteBatch::new();
        if marks.is_empty() {
            b.delete(CLUSTER_MARKS_KEY).map_err(|e| e.to_string())?;
        } else {
            b.put(CLUSTER_MARKS_KEY, encode_marks(marks).into_bytes())
                .map_err(|e| e.to_string())?;
        }
        self.ks
            .db()
            .write(&b, WriteOptions { sync: true })
            .map_err(|e| e.to_string())
    }

    /// Drops the marks a topology settles: migrating slots this node no
    /// longer serves, importing slots it now serves.
    fn settle_marks(&self, t: &Topology) -> Result<(), String> {
        let mut marks = self.marks.lock().unwrap_or_else(|p| p.into_inner());
        let before = marks.len();
        marks.retain(|&slot, m| {
            let mine = serves(t, slot, &self.me);
            match m {
                Mark::Migrating(..) => mine,
                Mark::Importing(_) => !mine,
            }
        });
        if marks.len() != before {
            self.persist_marks(&marks)?;
        }
        Ok(())
    }

    /// Recomputes every slot's state from the topology and the marks.
    fn refresh_states(&self) {
        let t = self.topology();
        let marks = self.marks.lock().unwrap_or_else(|p| p.into_inner());
        for slot in 0..SLOTS {
            let mine = serves(&t, slot, &self.me);
            let s = match (mine, marks.get(&slot)) {
                (true, Some(Mark::Migrating(_, true))) => SlotState::Moved,
                (true, Some(Mark::Migrating(_, false))) => SlotState::Migrating,
                (true, _) => SlotState::Serve,
                (false, Some(Mark::Importing(_))) => SlotState::Importing,
                (false, _) => SlotState::Elsewhere,
            };
            self.state[usize::from(slot)].store(s as u8, Ordering::Release);
        }
    }

    /// Installs `t` if its version is higher than the one in force:
    /// persists it, settles the marks, and starts dropping the records of
    /// slots this node no longer serves. Returns whether it was installed.
    ///
    /// On a replica of a Raft group, a change of the shard's nodes is
    /// handed to the group ([`raft::Replica::set_nodes`]), whose leader
    /// adds and removes nodes; a topology that removes this node from the
    /// shard is accepted (the node then answers `-MOVED` for the shard's
    /// slots), and the shard's records are kept.
    ///
    /// # Errors
    /// This node missing from `t` or at another address; a membership
    /// change refused ([`raft::membership::check_change`], or one still in
    /// flight on the leader); engine errors.
    pub fn install(self: &Arc<Self>, t: Topology) -> Result<bool, String> {
        let cur = self.topology();
        if t.version <= cur.version {
            return Ok(false);
        }
        let replicated = match self.replica.get() {
            Some(r) => self.check_membership(r, &cur, &t)?,
            None => None,
        };
        // A replica the new version removes from its shard accepts it.
        if replicated
            .as_ref()
            .is_none_or(|n| n.iter().any(|n| n.id == self.me))
        {
            self.check_me(&t)?;
        }
        self.persist_topology(&t)?;
        {
            // Under the writer lock: a write the writer runs after this
            // sees the new owners.
            let _writer = self.ks.txn();
            *self.topo.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(t.clone());
            self.settle_marks(&t)?;
            self.refresh_states();
        }
        match (replicated, self.replica.get()) {
            // The shard's records belong to its Raft group's state machine
            // (slot migration is refused on a replicated shard): they are
            // kept, also on a node the topology removed from the shard.
            (Some(nodes), Some(r)) => r.set_nodes(&nodes),
            _ => self.drop_unowned(),
        }
        Ok(true)
    }

    /// A replica's check of topology `t` replacing `cur`: the nodes `t`
    /// lists for this node's shard (this node may be left out: it then
    /// stops serving the shard's slots, and the group's leader, which may
    /// be this node, removes it).
    ///
    /// # Errors
    /// [`raft::membership::check_change`]'s reasons; a change while the
    /// previous one is still in flight, on the leader.
    fn check_membership(
        &self,
        r: &raft::Replica,
        cur: &Topology,
        t: &Topology,
    ) -> Result<Option<Vec<Node>>, String> {
        let Some((old, _)) = cur.node(&self.me) else {
            return Ok(None);
        };
        let new = t.shards.iter().find(|s| s.name == old.name);
        raft::membership::check_change(&old.name, &old.nodes, new.map(|s| &s.nodes[..]))?;
        let new = new.map(|s| s.nodes.clone()).unwrap_or_default();

        let same = |a: &[Node], b: &[Node]| {
            a.len() == b.len() && a.iter().all(|n| b.iter().any(|m| m.id == n.id))
        };
        if !same(&old.nodes, &new) && r.is_leader() && !r.settled_at(&old.nodes) {
            return Err(format!(
                "shard {}: a membership change is in progress (the topology in force, version {}, \
                 lists {}); install version {} once it is done",
                old.name,
                cur.version,
                old.nodes
                    .iter()
                    .map(|n| n.id.as_str())
                    .collect::<Vec<_>>()
                    .join(","),
                t.version
            ));
        }
        Ok(Some(new))
    }

    /// Rereads the topology file (SIGHUP) and installs it when newer.
    ///
    /// # Errors
    /// As [`Cluster::install`], and an unreadable or invalid file.
    pub fn reload(self: &Arc<Self>) -> Result<bool, String> {
        let text = std::fs::read_to_string(&self.file)
            .map_err(|e| format!("cannot read {}: {e}", self.file.display()))?;
        let t = Topology::parse(&text).map_err(|e| format!("{}: {e}", self.file.display()))?;
        self.install(t)
    }

    /// Sets the marks of `slots` (all of them, or none on error) and
    /// persists them.
    ///
    /// # Errors
    /// A slot this node does not serve (migrating) or serves (importing),
    /// or marked the other way.
    pub fn set_marks(&self, slots: &[(u16, u16)], mark: Option<Mark>) -> Result<(), String> {
        let t = self.topology();
        let _writer = self.ks.txn();
        let mut marks = self.marks.lock().unwrap_or_else(|p| p.into_inner());
        let mut next = marks.clone();
        for &(a, b) in slots {
            for slot in a..=b {
                let mine = serves(&t, slot, &self.me);
                match &mark {
                    None => {
                        next.remove(&slot);
                    }
                    Some(Mark::Migrating(to, _)) => {
                        if !mine {
                            return Err(format!("I'm not the owner of hash slot {slot}"));
                        }
                        match next.get(&slot) {
                            Some(Mark::Migrating(t2, done)) if t2 == to => {
                                let done = *done;
                                next.insert(slot, Mark::Migrating(to.clone(), done));
                            }
                            _ => {
                                next.insert(slot, Mark::Migrating(to.clone(), false));
                            }
                        }
                    }
                    Some(Mark::Importing(from)) => {
                        if mine {
                            return Err(format!("I'm already the owner of hash slot {slot}"));
                        }
                        next.insert(slot, Mark::Importing(from.clone()));
                    }
                }
            }
        }
        self.persist_marks(&next)?;
        *marks = next;
        drop(marks);
        self.refresh_states();
        Ok(())
    }

    /// Sets `slot`'s effective state (migration), under the writer lock
    /// the caller holds.
    pub(crate) fn set_state(&self, slot: u16, s: SlotState) {
        self.state[usize::from(slot)].store(s as u8, Ordering::Release);
    }

    /// Records that every key of `slots` is on the target; persists it.
    pub(crate) fn mark_moved(&self, slots: &[u16]) -> Result<(), String> {
        let mut marks = self.marks.lock().unwrap_or_else(|p| p.into_inner());
        for s in slots {
            if let Some(Mark::Migrating(_, done)) = marks.get_mut(s) {
                *done = true;
            }
        }
        self.persist_marks(&marks)
    }

    /// This node's replica, when its shard is a Raft group.
    pub fn replica(&self) -> Option<&Arc<raft::Replica>> {
        self.replica.get()
    }

    /// Sets client `id`'s `READONLY` flag (`false`: `READWRITE`).
    pub fn set_readonly(&self, id: u64, on: bool) {
        let mut r = self.readonly.lock().unwrap_or_else(|p| p.into_inner());
        if on {
            r.insert(id);
        } else {
            r.remove(&id);
        }
    }

    /// Whether client `id` sent `READONLY`.
    pub fn is_readonly(&self, id: u64) -> bool {
        self.replica.get().is_some()
            && self
                .readonly
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .contains(&id)
    }

    /// Forgets a closed client's flags.
    pub fn forget_client(&self, id: u64) {
        self.set_readonly(id, false);
        self.take_asking(id);
    }

    /// The nodes of `shard` as clients should see them: the master first
    /// (this shard's Raft leader, when known), then `false` for replicas.
    pub fn shard_roles<'a>(&self, shard: &'a Shard) -> Vec<(&'a Node, bool)> {
        let (leader, voters) = match self.replica.get() {
            Some(r) if shard.nodes.iter().any(|n| n.id == self.me) => {
                (r.leader().map(|l| l.id), Some(r.voters()))
            }
            _ => (None, None),
        };
        // This node's own group lists its nodes once they are voters.
        let mut listed: Vec<&Node> = shard
            .nodes
            .iter()
            .filter(|n| {
                voters
                    .as_ref()
                    .is_none_or(|v| v.contains(&raft::raft_id(&n.id)))
            })
            .collect();
        if listed.is_empty() {
            listed = shard.nodes.iter().collect();
        }
        let master = leader
            .filter(|l| listed.iter().any(|n| &n.id == l))
            .unwrap_or_else(|| listed[0].id.clone());
        let mut out: Vec<(&Node, bool)> = listed.into_iter().map(|n| (n, n.id == master)).collect();
        out.sort_by_key(|(_, m)| !*m);
        out
    }

    /// Remembers that client `id` sent `ASKING`.
    pub fn set_asking(&self, id: u64) {
        let mut a = self.asking.lock().unwrap_or_else(|p| p.into_inner());
        if a.insert(id) {
            self.asking_n.fetch_add(1, Ordering::AcqRel);
        }
    }

    /// Takes client `id`'s `ASKING` flag (it covers one command).
    pub fn take_asking(&self, id: u64) -> bool {
        if self.asking_n.load(Ordering::Acquire) == 0 {
            return false;
        }
        let mut a = self.asking.lock().unwrap_or_else(|p| p.into_inner());
        let had = a.remove(&id);
        if had {
            self.asking_n.fetch_sub(1, Ordering::AcqRel);
        }
        had
    }

    /// Starts (or restarts after the current pass) the background drop
    /// of records of slots this node neither serves nor imports.
    fn drop_unowned(self: &Arc<Self>) {
        {
            let mut d = self.dropper.lock().unwrap_or_else(|p| p.into_inner());
            if d.0 {
                d.1 = true;
                return;
            }
            *d = (true, false);
        }
        let c = self.clone();
        std::thread::spawn(move || loop {
            if let Err(e) = migrate::drop_unowned(&c) {
                eprintln!("cluster: dropping records of slots given away failed: {e}");
            }
            let mut d = c.dropper.lock().unwrap_or_else(|p| p.into_inner());
            if d.1 {
                d.1 = false;
            } else {
                d.0 = false;
                return;
            }
        });
    }
}

/// Cluster mode's start-up, from [`crate::server::Server::bind`]: opens
/// the cluster state when `config.cluster` is set (`port` is the bound
/// port) and rereads the topology file on SIGHUP.
///
/// # Errors
/// [`crate::ServeError::Config`] with [`Cluster::open`]'s reason.
pub async fn start(
    ks: &Arc<Keyspace>,
    config: &crate::Config,
    port: u16,
) -> Result<Option<Arc<Cluster>>, crate::ServeError> {
    let Some(cfg) = &config.cluster else {
        return Ok(None);
    };
    let c = Cluster::open(
        ks.clone(),
        cfg,
        &config.bind,
        port,
        config.requirepass.clone(),
        config.fsync,
    )
    .map_err(crate::ServeError::Config)?;
    let t = c.topology();
    if let Some((shard, me)) = t.node(&cfg.node_id) {
        if shard.nodes.len() > 1 {
            let bus = match cfg.bus_port.or_else(|| me.bus_port()) {
                Some(p) => p,
                None => {
                    return Err(crate::ServeError::Config(format!(
                        "port {port} + 10000 is no TCP port: give --cluster-bus-port"
                    )))
                }
            };
            let log_dir = std::path::PathBuf::from(format!("{}.raft", ks.db().path().display()));
            let r = raft::Replica::start(
                ks.clone(),
                &cfg.node_id,
                &shard.nodes,
                &config.bind,
                bus,
                &log_dir,
            )
            .await
            .map_err(crate::ServeError::Config)?;
            let _ = c.replica.set(r);
        }
    }
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let mut hup = signal(SignalKind::hangup())?;
        let c2 = c.clone();
        tokio::spawn(async move {
            while hup.recv().await.is_some() {
                let c3 = c2.clone();
                let r = tokio::task::spawn_blocking(move || c3.reload()).await;
                match r {
                    Ok(Ok(true)) => eprintln!(
                        "cluster: installed topology version {}",
                        c2.topology().version
                    ),
                    Ok(Ok(false)) => eprintln!(
                        "cluster: the topology file is not newer than version {}; kept",
                        c2.topology().version
                    ),
                    Ok(Err(e)) => eprintln!("cluster: SIGHUP: {e}"),
                    Err(e) => eprintln!("cluster: SIGHUP: {e}"),
                }
            }
        });
    }
    Ok(Some(c))
}

fn encode_marks(marks: &BTreeMap<u16, Mark>) -> String {
    let mut out = String::new();
    for (slot, m) in marks {
        let line = match m {
            Mark::Migrating(to, false) => format!("migrating {slot} {to}\n"),
            Mark::Migrating(to, true) => format!("moved {slot} {to}\n"),
            Mark::Importing(from) => format!("importing {slot} {from}\n"),
        };
        out.push_str(&line);
    }
    out
}

fn decode_marks(text: &str) -> Result<BTreeMap<u16, Mark>, String> {
    let bad = || format!("the migration marks stored in the database are malformed: {text:?}");
    let mut out = BTreeMap::new();
    for l in text.lines() {
        let w: Vec<&str> = l.split_whitespace().collect();
        let [kind, slot, node] = w[..] else {
            return Err(bad());
        };
        let slot: u16 = slot.parse().ok().filter(|&s| s < SLOTS).ok_or_else(bad)?;
        let m = match kind {
            "migrating" => Mark::Migrating(node.into(), false),
            "moved" => Mark::Migrating(node.into(), true),
            "importing" => Mark::Importing(node.into()),
            _ => return Err(bad()),
        };
        out.insert(slot, m);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::slots::{check_keys, Route};
    use super::*;
    use crate::keys::slot;
    use crate::resp::Reply;

    const TOPO: &str = "version 1\na 0-8191 me=127.0.0.1:7001\nb 8192-16383 other=127.0.0.1:7002\n";

    fn open(dir: &std::path::Path, text: &str, port: u16) -> Result<Arc<Cluster>, String> {
        let file = dir.join("topology.conf");
        std::fs::write(&file, text).unwrap();
        let db = sepkv::Db::open(dir.join("db"), sepkv::Options::default()).unwrap();
        let ks = Arc::new(Keyspace::open(Arc::new(db)).unwrap());
        let cfg = ClusterConfig {
            file,
            node_id: "me".into(),
            bus_port: None,
        };
        Cluster::open(ks, &cfg, "127.0.0.1", port, None, Fsync::No)
    }

    fn close(c: Arc<Cluster>) {
        // The background drop holds a reference until it ends; the last
        // one closes the database.
        while Arc::strong_count(&c) > 1 {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        drop(c);
    }

    /// A key of `slot`'s half: "mine" for slots 0-8191.
    fn key_in(mine: bool) -> Vec<u8> {
        (0..)
            .map(|i| format!("k{i}").into_bytes())
            .find(|k| (slot(k) < 8192) == mine)
            .unwrap()
    }

    #[test]
    fn refuses_an_address_other_than_its_own() {
        let d = tempfile::tempdir().unwrap();
        let e = open(d.path(), TOPO, 7009).unwrap_err();
        assert!(
            e.contains("127.0.0.1:7001") && e.contains("127.0.0.1:7009"),
            "{e}"
        );
        let e = open(d.path(), &TOPO.replace("me=", "else="), 7001).unwrap_err();
        assert!(e.contains("node me is not in the topology"), "{e}");
    }

    #[test]
    fn routes_keys_by_slot() {
        let d = tempfile::tempdir().unwrap();
        let c = open(d.path(), TOPO, 7001).unwrap();
        let (mine, theirs) = (key_in(true), key_in(false));
        assert_eq!(check_keys(&c, &[&mine], true, false), Route::Serve);
        let s = slot(&theirs);
        assert_eq!(
            check_keys(&c, &[&theirs], false, false),
            Route::Redirect(Reply::Error(format!("MOVED {s} 127.0.0.1:7002")))
        );
        assert!(matches!(check_keys(&c, &[&mine, &theirs], false, false),
            Route::Redirect(Reply::Error(m)) if m.starts_with("CROSSSLOT")));
        // Importing: served after ASKING only.
        c.set_marks(&[(s, s)], Some(Mark::Importing("other".into())))
            .unwrap();
        assert_eq!(check_keys(&c, &[&theirs], true, true), Route::Serve);
        assert!(matches!(
            check_keys(&c, &[&theirs], true, false),
            Route::Redirect(_)
        ));
        // Migrating: served until copied; in flight: writes wait; moved: ASK.
        let m = slot(&mine);
        c.set_marks(&[(m, m)], Some(Mark::Migrating("other".into(), false)))
            .unwrap();
        assert_eq!(check_keys(&c, &[&mine], true, false), Route::Serve);
        c.set_state(m, SlotState::InFlight);
        assert_eq!(check_keys(&c, &[&mine], true, false), Route::Wait(m));
        assert_eq!(check_keys(&c, &[&mine], false, false), Route::Serve);
        c.mark_moved(&[m]).unwrap();
        c.set_state(m, SlotState::Moved);
        assert_eq!(
            check_keys(&c, &[&mine], false, false),
            Route::Redirect(Reply::Error(format!("ASK {m} 127.0.0.1:7002")))
        );
        close(c);
        // The marks survive a restart.
        let c = open(d.path(), TOPO, 7001).unwrap();
        assert_eq!(c.slot_state(m), SlotState::Moved);
        assert_eq!(c.slot_state(s), SlotState::Importing);
        close(c);
    }

    #[test]
    fn installs_only_higher_versions_and_keeps_them() {
        let d = tempfile::tempdir().unwrap();
        let c = open(d.path(), TOPO, 7001).unwrap();
        let v2 = Topology::parse(
            &TOPO
                .replace("version 1", "version 2")
                .replace("0-8191", "0-8192")
                .replace("8192-16383", "8193-16383"),
        )
        .unwrap();
        assert!(c.install(v2.clone()).unwrap());
        assert!(!c.install(v2).unwrap());
        assert_eq!(c.slot_state(8192), SlotState::Serve);
        let moved_away = Topology::parse(
            &TOPO
                .replace("version 1", "version 3")
                .replace("me=127.0.0.1:7001", "me=127.0.0.1:7005"),
        )
        .unwrap();
        assert!(c
            .install(moved_away)
            .unwrap_err()
            .contains("127.0.0.1:7005"));
        close(c);
        // Restarted with the old file: the stored version 2 is kept.
        let c = open(d.path(), TOPO, 7001).unwrap();
        assert_eq!(c.topology().version, 2);
        assert_eq!(c.slot_state(8192), SlotState::Serve);
        close(c);
    }

    #[test]
    fn marks_round_trip() {
        let mut m = BTreeMap::new();
        m.insert(3, Mark::Migrating("b".into(), false));
        m.insert(4, Mark::Migrating("b".into(), true));
        m.insert(9000, Mark::Importing("c".into()));
        assert_eq!(decode_marks(&encode_marks(&m)).unwrap(), m);
        assert!(decode_marks("moving 3 b\n").is_err());
        assert!(decode_marks("moved 16384 b\n").is_err());
    }
}
