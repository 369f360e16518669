//! The listener and the connections.
//!
//! One tokio task per connection reads bytes, takes every complete request
//! off its buffer ([`crate::resp::parse_request`]), checks each
//! ([`crate::command::check`]), runs reads itself and hands runs of write
//! commands to the writer ([`crate::writer`]), and encodes the replies, in
//! request order, into one output buffer written once per batch. A malformed request is answered with
//! `-ERR Protocol error: …` and closes that connection only.
//!
//! Shutdown: a watch channel tells the accept loop and every connection to
//! stop; a connection finishes the commands it has read, writes their
//! replies and closes; then the background threads stop and the caller
//! closes the database.

use crate::cluster::slots::{check_transaction, Route};
use crate::command::{check, is_write, Ctx};
use crate::config::Config;
use crate::durability::Durability;
use crate::keyspace::Keyspace;
use crate::multi;
use crate::resp::{parse_request, Reply};
use crate::state::{ClientInfo, ClientLive, ClientState, Cursors, ServerStats, Shared};
use crate::writer::{self, Commands, Writer};
use bytes::BytesMut;
use sepkv::Db;
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinSet;

/// Why the server could not start or stopped with an error.
#[derive(Debug)]
pub enum ServeError {
    /// The configuration is refused (protected mode, a bad address).
    Config(String),
    /// Binding or accepting failed.
    Io(std::io::Error),
    /// The database failed.
    Db(sepkv::Error),
}

impl std::fmt::Display for ServeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ServeError::Config(m) => f.write_str(m),
            ServeError::Io(e) => write!(f, "{e}"),
            ServeError::Db(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for ServeError {}

impl From<sepkv::Error> for ServeError {
    fn from(e: sepkv::Error) -> Self {
        ServeError::Db(e)
    }
}

impl From<std::io::Error> for ServeError {
    fn from(e: std::io::Error) -> Self {
        ServeError::Io(e)
    }
}

/// A bound server, not yet serving.
pub struct Server {
    shared: Arc<Shared>,
    listener: TcpListener,
    stop: Arc<AtomicBool>,
    expiry: Option<std::thread::JoinHandle<()>>,
}

fn is_loopback(bind: &str) -> bool {
    bind == "localhost"
        || bind
            .parse::<IpAddr>()
            .map(|ip| ip.is_loopback())
            .unwrap_or(false)
}

impl Server {
    /// Checks the configuration, reads the keyspace metadata, binds the
    /// listener and starts the background threads.
    ///
    /// # Errors
    /// [`ServeError::Config`] for a non-loopback address without a
    /// password in protected mode; bind and database errors.
    pub async fn bind(db: Arc<Db>, config: Config) -> Result<Server, ServeError> {
        if config.protected_mode && config.requirepass.is_none() && !is_loopback(&config.bind) {
            return Err(ServeError::Config(format!(
                "refusing to listen on {} without a password: give --requirepass, or \
                 --protected-mode no to accept clients from other hosts without one",
                config.bind
            )));
        }
        let listener = TcpListener::bind((config.bind.as_str(), config.port)).await?;
        let port = listener.local_addr()?.port();
        let ks = Arc::new(Keyspace::open(db.clone())?);
        let cluster = crate::cluster::start(&ks, &config, port).await?;
        let stop = Arc::new(AtomicBool::new(false));
        // A replicated shard's leader proposes its expiry deletes instead.
        let replicated = cluster.as_ref().is_some_and(|c| c.replica().is_some());
        let expiry = Some(crate::expire::spawn(ks.clone(), stop.clone(), !replicated));
        let shared = Arc::new(Shared {
            durability: Durability::start(db, config.fsync),
            writer: Writer::start(ks.clone(), config.fsync, cluster.clone()),
            cluster,
            config,
            ks,
            stats: ServerStats::default(),
            clients: Mutex::new(HashMap::new()),
            next_client: AtomicU64::new(0),
            open: AtomicUsize::new(0),
            cursors: Mutex::new(Cursors::default()),
            started: Instant::now(),
            started_wall: SystemTime::now(),
            port,
        });
        Ok(Server {
            shared,
            listener,
            stop,
            expiry,
        })
    }

    /// The address it listens on.
    ///
    /// # Errors
    /// The socket's error.
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Serves until `shutdown` completes, then lets connections finish
    /// the commands they have read (for at most 10 s) and stops the
    /// background threads. The database is left open for the caller to
    /// close.
    ///
    /// # Errors
    /// Never today; kept for accept errors that should end the server.
    pub async fn run(
        mut self,
        shutdown: impl std::future::Future<Output = ()>,
    ) -> Result<(), ServeError> {
        let (tx, rx) = watch::channel(false);
        let mut tasks = JoinSet::new();
        tokio::pin!(shutdown);
        loop {
            while tasks.try_join_next().is_some() {}
            tokio::select! {
                _ = &mut shutdown => break,
                r = self.listener.accept() => {
                    let Ok((sock, addr)) = r else {
                        // EMFILE and the like: back off, keep serving.
                        tokio::time::sleep(Duration::from_millis(10)).await;
                        continue;
                    };
                    self.shared.stats.connections.fetch_add(1, Ordering::Relaxed);
                    let shared = self.shared.clone();
                    let rx = rx.clone();
                    let full = shared.open.fetch_add(1, Ordering::AcqRel) >= shared.config.maxclients;
                    tasks.spawn(async move {
                        if full {
                            refuse(&shared, sock).await;
                        } else {
                            connection(&shared, sock, addr, rx).await;
                        }
                        shared.open.fetch_sub(1, Ordering::AcqRel);
                    });
                }
            }
        }
        let _ = tx.send(true);
        drop(self.listener);
        let _ = tokio::time::timeout(Duration::from_secs(10), async {
            while tasks.join_next().await.is_some() {}
        })
        .await;
        self.stop.store(true, Ordering::Release);
        self.shared.writer.stop();
        if let Some(r) = self.shared.cluster.as_ref().and_then(|c| c.replica()) {
            r.shutdown().await;
        }
        self.shared.durability.stop();
        if let Some(t) = self.expiry.take() {
            let _ = tokio::task::spawn_blocking(move || t.join()).await;
        }
        Ok(())
    }
}

/// Answers a connection beyond `maxclients` and closes it.
async fn refuse(shared: &Shared, mut sock: TcpStream) {
    shared.stats.rejected.fetch_add(1, Ordering::Relaxed);
    let _ = sock
        .write_all(b"-ERR max number of clients reached\r\n")
        .await;
    let _ = sock.shutdown().await;
}

async fn connection(
    shared: &Shared,
    mut sock: TcpStream,
    addr: SocketAddr,
    mut shutdown: watch::Receiver<bool>,
) {
    let _ = sock.set_nodelay(true);
    let id = shared.new_client_id();
    let info = Arc::new(ClientInfo {
        id,
        addr,
        laddr: sock.local_addr().unwrap_or(addr),
        created: Instant::now(),
        live: Mutex::new(ClientLive {
            name: None,
            last_command: "NULL",
            last_active: Instant::now(),
            proto: 2,
        }),
    });
    shared
        .clients
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(id, info.clone());
    let mut client = ClientState {
        id,
        proto: 2,
        authenticated: shared.config.requirepass.is_none(),
        name: None,
        last_command: "NULL",
        close: false,
        info,
        tx: Default::default(),
    };
    serve_client(shared, &mut sock, &mut client, &mut shutdown).await;
    client.tx.reset(shared);
    if let Some(c) = &shared.cluster {
        c.forget_client(id);
    }
    let _ = sock.shutdown().await;
    shared
        .clients
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .remove(&id);
}

async fn serve_client(
    shared: &Shared,
    sock: &mut TcpStream,
    client: &mut ClientState,
    shutdown: &mut watch::Receiver<bool>,
) {
    let mut rbuf = BytesMut::with_capacity(16 * 1024);
    let mut wbuf = BytesMut::with_capacity(16 * 1024);
    loop {
        let mut fatal = false;
        let mut writes: Commands = Vec::new();
        let mut write_bytes = 0;
        loop {
            match parse_request(&mut rbuf) {
                Ok(Some(args)) if args.is_empty() => continue,
                Ok(Some(args)) => {
                    let mut checked = check(&mut Ctx::new(shared, &mut *client), &args);
                    if let (Ok(spec), Some(c)) = (&checked, &shared.cluster) {
                        let mut route = c.route(client.id, spec, &args);
                        if let Route::Wait(slot) = route {
                            // Its slot is being copied: earlier writes go
                            // first, then this one waits (bounded).
                            flush_writes(shared, &mut writes, client.proto, &mut wbuf).await;
                            write_bytes = 0;
                            c.wait_slot(slot).await;
                            route = c.route_after_wait(spec, &args);
                        }
                        if let Route::Redirect(r) = route {
                            checked = Err(r);
                        } else if client.tx.in_multi() {
                            if let Err(r) = check_transaction(client.tx.queued(), spec, &args) {
                                checked = Err(r);
                            }
                        }
                    }
                    match checked {
                        Ok(spec) if is_write(spec) && !client.tx.in_multi() => {
                            write_bytes += writer::size(&args);
                            writes.push((spec, args));
                            if writes.len() >= 1024 || write_bytes >= 16 << 20 {
                                flush_writes(shared, &mut writes, client.proto, &mut wbuf).await;
                                write_bytes = 0;
                            }
                        }
                        other => {
                            // Earlier writes first: this command sees them.
                            flush_writes(shared, &mut writes, client.proto, &mut wbuf).await;
                            write_bytes = 0;
                            let reply = match other {
                                Ok(spec) if spec.name == "exec" && replicated(shared) => {
                                    match client.tx.take_replicable() {
                                        Some(q) => exec_replicated(shared, client, q).await,
                                        None => multi::dispatch(
                                            &mut Ctx::new(shared, &mut *client),
                                            spec,
                                            args,
                                        ),
                                    }
                                }
                                Ok(spec) => match read_barrier(shared, client, spec, &args).await {
                                    Ok(()) => multi::dispatch(
                                        &mut Ctx::new(shared, &mut *client),
                                        spec,
                                        args,
                                    ),
                                    Err(r) => r,
                                },
                                Err(r) => {
                                    client.tx.refused();
                                    r
                                }
                            };
                            reply.encode(client.proto, &mut wbuf);
                        }
                    }
                    if client.close {
                        break;
                    }
                    // Bound what a deep pipeline buffers before replying.
                    if wbuf.len() > 4 << 20 {
                        break;
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    flush_writes(shared, &mut writes, client.proto, &mut wbuf).await;
                    shared.stats.protocol_errors.fetch_add(1, Ordering::Relaxed);
                    Reply::err(format!("Protocol error: {}", e.0)).encode(client.proto, &mut wbuf);
                    fatal = true;
                    break;
                }
            }
        }
        flush_writes(shared, &mut writes, client.proto, &mut wbuf).await;
        if !wbuf.is_empty() {
            if sock.write_all(&wbuf).await.is_err() {
                return;
            }
            wbuf.clear();
        }
        client.publish();
        if fatal || client.close {
            return;
        }
        if !rbuf.is_empty() && wbuf.is_empty() && parse_ready(&rbuf) {
            continue;
        }
        tokio::select! {
            r = sock.read_buf(&mut rbuf) => match r {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            },
            _ = shutdown.changed() => return,
        }
    }
}

/// Runs the pending write commands in the writer (or, on a replica of a
/// Raft group, through the group's log) and encodes their replies.
async fn flush_writes(shared: &Shared, writes: &mut Commands, proto: u8, wbuf: &mut BytesMut) {
    if writes.is_empty() {
        return;
    }
    let replies = match shared.cluster.as_ref().and_then(|c| c.replica()) {
        Some(r) => r.write(std::mem::take(writes)).await,
        None => shared.writer.run(std::mem::take(writes)).await,
    };
    for r in replies {
        r.encode(proto, wbuf);
    }
}

/// Whether this node is a replica of a Raft group.
fn replicated(shared: &Shared) -> bool {
    shared
        .cluster
        .as_ref()
        .is_some_and(|c| c.replica().is_some())
}

/// `EXEC` of a transaction of writes only on a replica of a Raft group:
/// its commands go through the log as one entry (applied in one engine
/// batch); a node that is not the leader redirects the whole transaction.
async fn exec_replicated(
    shared: &Shared,
    client: &mut ClientState,
    queue: Vec<(&'static crate::command::Spec, Vec<bytes::Bytes>)>,
) -> Reply {
    client.tx.reset(shared);
    let Some(r) = shared.cluster.as_ref().and_then(|c| c.replica()) else {
        return Reply::err("internal error: not a replica");
    };
    if !r.is_leader() {
        let (spec, args) = &queue[0];
        return r.not_leader(spec, args);
    }
    Reply::Array(r.write(queue).await)
}

/// On the leader of a Raft group, a read of keys (outside `MULTI`) first
/// waits for a read index confirmed by a majority: it sees every write
/// acknowledged before it. Replicas serving `READONLY` clients do not wait.
async fn read_barrier(
    shared: &Shared,
    client: &ClientState,
    spec: &'static crate::command::Spec,
    args: &[bytes::Bytes],
) -> Result<(), Reply> {
    let Some(c) = &shared.cluster else {
        return Ok(());
    };
    let Some(r) = c.replica() else {
        return Ok(());
    };
    if client.tx.in_multi() || crate::command::command_keys(spec, args).is_empty() {
        return Ok(());
    }
    if !r.is_leader() {
        return Ok(());
    }
    r.read_barrier(spec, args).await
}

/// Whether the buffer may hold a complete request already (a pipeline cut
/// short by the output bound).
fn parse_ready(buf: &BytesMut) -> bool {
    if buf[0] == b'*' {
        crate::resp::check_multibulk(buf).unwrap_or(true)
    } else {
        buf.contains(&b'\n')
    }
}
