//! The Raft bus: Raft messages between the replicas of a shard over TCP,
//! on each node's bus port (`PORT + 10000` unless the topology says
//! `HOST:PORT@BUS` or `--cluster-bus-port` is given).
//!
//! Framing is tokio-util's length-delimited codec (a 4-byte big-endian
//! length, frames up to 1 GiB for snapshot chunks); each frame is one
//! bincode-encoded [`BusRequest`] or [`BusResponse`]. Besides openraft's
//! messages, [`BusRequest::Probe`] asks a node whether it holds Raft state
//! (a node of a new group initializes it only when no node listed for the
//! shard does; see [`probe`]). A connection carries
//! one request at a time; the sending side keeps one connection per peer
//! and reconnects after an error.
//!
//! Thread-safety: one task per accepted connection; a [`Conn`] belongs to
//! one openraft replication task.

use super::TypeConfig;
use futures::{SinkExt, StreamExt};
use openraft::error::{InstallSnapshotError, NetworkError, RPCError, RaftError, Unreachable};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::{BasicNode, Raft};
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio_util::codec::{Framed, LengthDelimitedCodec};

/// A Raft message to a peer.
#[derive(serde::Serialize, serde::Deserialize)]
pub enum BusRequest {
    /// AppendEntries (heartbeats too).
    Append(AppendEntriesRequest<TypeConfig>),
    /// RequestVote.
    Vote(VoteRequest<u64>),
    /// One chunk of a snapshot.
    Snapshot(InstallSnapshotRequest<TypeConfig>),
    /// Whether the node holds Raft state (a log or a membership).
    Probe,
}

/// A peer's answer.
#[derive(serde::Serialize, serde::Deserialize)]
pub enum BusResponse {
    /// To [`BusRequest::Append`].
    Append(Result<AppendEntriesResponse<u64>, RaftError<u64>>),
    /// To [`BusRequest::Vote`].
    Vote(Result<VoteResponse<u64>, RaftError<u64>>),
    /// To [`BusRequest::Snapshot`].
    Snapshot(Result<InstallSnapshotResponse<u64>, RaftError<u64, InstallSnapshotError>>),
    /// To [`BusRequest::Probe`]: `true` when the node's group is
    /// initialized.
    Probe(bool),
}

fn codec() -> LengthDelimitedCodec {
    LengthDelimitedCodec::builder()
        .max_frame_length(1 << 30)
        .new_codec()
}

/// Serves the bus: every message goes to `raft`. Runs until the listener
/// fails or the task is aborted.
pub async fn serve(listener: TcpListener, raft: Raft<TypeConfig>) {
    loop {
        let Ok((sock, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        let _ = sock.set_nodelay(true);
        let raft = raft.clone();
        tokio::spawn(async move {
            let mut f = Framed::new(sock, codec());
            while let Some(Ok(frame)) = f.next().await {
                let Ok(req) = bincode::deserialize::<BusRequest>(&frame) else {
                    return;
                };
                let resp = match req {
                    BusRequest::Append(r) => BusResponse::Append(raft.append_entries(r).await),
                    BusRequest::Vote(r) => BusResponse::Vote(raft.vote(r).await),
                    BusRequest::Snapshot(r) => {
                        BusResponse::Snapshot(raft.install_snapshot(r).await)
                    }
                    BusRequest::Probe => match raft.is_initialized().await {
                        Ok(b) => BusResponse::Probe(b),
                        Err(_) => return,
                    },
                };
                let Ok(out) = bincode::serialize(&resp) else {
                    return;
                };
                if f.send(bytes::Bytes::from(out)).await.is_err() {
                    return;
                }
            }
        });
    }
}

/// Asks the node whose bus is at `addr` whether its group is initialized;
/// `None` when it does not answer within `ttl`.
pub async fn probe(addr: &str, ttl: Duration) -> Option<bool> {
    let mut c = Conn {
        target: 0,
        addr: addr.to_string(),
        stream: None,
    };
    match c.call(&BusRequest::Probe, ttl).await {
        Ok(BusResponse::Probe(b)) => Some(b),
        _ => None,
    }
}

/// Makes a [`Conn`] per peer.
pub struct Network;

impl RaftNetworkFactory<TypeConfig> for Network {
    type Network = Conn;

    async fn new_client(&mut self, target: u64, node: &BasicNode) -> Conn {
        Conn {
            target,
            addr: node.addr.clone(),
            stream: None,
        }
    }
}

/// The connection to one peer.
pub struct Conn {
    target: u64,
    addr: String,
    stream: Option<Framed<TcpStream, LengthDelimitedCodec>>,
}

impl Conn {
    async fn call(&mut self, req: &BusRequest, ttl: Duration) -> Result<BusResponse, String> {
        let r = tokio::time::timeout(ttl, async {
            if self.stream.is_none() {
                let s = TcpStream::connect(&self.addr)
                    .await
                    .map_err(|e| format!("{}: {e}", self.addr))?;
                let _ = s.set_nodelay(true);
                self.stream = Some(Framed::new(s, codec()));
            }
            let Some(f) = self.stream.as_mut() else {
                return Err("no connection".to_string());
            };
            let out = bincode::serialize(req).map_err(|e| e.to_string())?;
            f.send(bytes::Bytes::from(out))
                .await
                .map_err(|e: std::io::Error| e.to_string())?;
            match f.next().await {
                Some(Ok(frame)) => bincode::deserialize::<BusResponse>(&frame)
                    .map_err(|e| format!("a malformed answer from {}: {e}", self.addr)),
                Some(Err(e)) => Err(e.to_string()),
                None => Err(format!("{} closed the connection", self.addr)),
            }
        })
        .await
        .unwrap_or_else(|_| Err(format!("{} did not answer in {ttl:?}", self.addr)));
        if r.is_err() {
            self.stream = None;
        }
        r
    }
}

fn unreachable<E: std::error::Error>(e: String) -> RPCError<u64, BasicNode, E> {
    RPCError::Unreachable(Unreachable::new(&std::io::Error::other(e)))
}

fn mismatch<E: std::error::Error>() -> RPCError<u64, BasicNode, E> {
    RPCError::Network(NetworkError::new(&std::io::Error::other(
        "an answer of the wrong kind",
    )))
}

impl RaftNetwork<TypeConfig> for Conn {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<u64>, RPCError<u64, BasicNode, RaftError<u64>>> {
        match self
            .call(&BusRequest::Append(rpc), option.hard_ttl())
            .await
            .map_err(unreachable)?
        {
            BusResponse::Append(r) => r.map_err(|e| {
                RPCError::RemoteError(openraft::error::RemoteError::new(self.target, e))
            }),
            _ => Err(mismatch()),
        }
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<
        InstallSnapshotResponse<u64>,
        RPCError<u64, BasicNode, RaftError<u64, InstallSnapshotError>>,
    > {
        match self
            .call(&BusRequest::Snapshot(rpc), option.hard_ttl())
            .await
            .map_err(unreachable)?
        {
            BusResponse::Snapshot(r) => r.map_err(|e| {
                RPCError::RemoteError(openraft::error::RemoteError::new(self.target, e))
            }),
            _ => Err(mismatch()),
        }
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<u64>,
        option: RPCOption,
    ) -> Result<VoteResponse<u64>, RPCError<u64, BasicNode, RaftError<u64>>> {
        match self
            .call(&BusRequest::Vote(rpc), option.hard_ttl())
            .await
            .map_err(unreachable)?
        {
            BusResponse::Vote(r) => r.map_err(|e| {
                RPCError::RemoteError(openraft::error::RemoteError::new(self.target, e))
            }),
            _ => Err(mismatch()),
        }
    }
}
