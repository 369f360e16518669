//! The writer: every command that changes keys runs on one thread, in
//! groups.
//!
//! Connections hand their write commands to the writer (a pipelined run
//! of them as one job) and wait for the replies. The writer takes every
//! job queued while it was busy, runs their commands in order inside one
//! [`crate::keyspace::Txn`], commits the transaction as one engine batch and, with
//! `--fsync always`, syncs once for the whole group before answering: this
//! is group commit at the server's level, so 50 clients share one engine
//! write and one fsync instead of queueing for 50. Reads never wait for the
//! writer; a connection's own later commands run after its writes are
//! answered, so it reads what it wrote.
//!
//! A failed commit (a poisoned database, a batch over the engine's limit)
//! answers every command of the group with the error: none of them was
//! acknowledged.
//!
//! Thread-safety: [`Writer`] is shared by every connection.

use crate::cluster::Cluster;
use crate::command::{run_write, Spec};
use crate::durability::Fsync;
use crate::keyspace::Keyspace;
use crate::resp::Reply;
use bytes::Bytes;
use sepkv::{WriteBatch, WriteOptions};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use tokio::sync::oneshot;

/// Most commands in one group.
pub const GROUP_COMMANDS: usize = 4096;
/// Most argument bytes in one group (the engine's batch limit is higher).
pub const GROUP_BYTES: usize = 64 << 20;

/// Write commands of one connection, in order.
pub type Commands = Vec<(&'static Spec, Vec<Bytes>)>;

struct Job {
    cmds: Commands,
    bytes: usize,
    done: oneshot::Sender<Vec<Reply>>,
}

/// The writer thread.
pub struct Writer {
    tx: Mutex<Option<mpsc::Sender<Job>>>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

/// Argument bytes of a command.
pub fn size(args: &[Bytes]) -> usize {
    args.iter().map(|a| a.len() + 16).sum()
}

impl Writer {
    /// Starts the writer thread. In cluster mode, `cluster` re-checks each
    /// write's slot before it runs ([`Cluster::recheck_write`]).
    pub fn start(ks: Arc<Keyspace>, fsync: Fsync, cluster: Option<Arc<Cluster>>) -> Writer {
        let (tx, rx) = mpsc::channel::<Job>();
        let thread = std::thread::spawn(move || {
            let mut carry: Option<Job> = None;
            loop {
                let first = match carry.take() {
                    Some(j) => j,
                    None => match rx.recv() {
                        Ok(j) => j,
                        Err(_) => return,
                    },
                };
                let (mut n, mut bytes) = (first.cmds.len(), first.bytes);
                let mut jobs = vec![first];
                while n < GROUP_COMMANDS && bytes < GROUP_BYTES {
                    match rx.try_recv() {
                        Ok(j)
                            if n + j.cmds.len() <= GROUP_COMMANDS
                                && bytes + j.bytes <= GROUP_BYTES =>
                        {
                            n += j.cmds.len();
                            bytes += j.bytes;
                            jobs.push(j);
                        }
                        Ok(j) => {
                            carry = Some(j);
                            break;
                        }
                        Err(_) => break,
                    }
                }
                run_group(&ks, fsync, cluster.as_deref(), jobs);
            }
        });
        Writer {
            tx: Mutex::new(Some(tx)),
            thread: Mutex::new(Some(thread)),
        }
    }

    /// Runs `cmds` in the writer; their replies in order.
    pub async fn run(&self, cmds: Commands) -> Vec<Reply> {
        let n = cmds.len();
        let bytes = cmds.iter().map(|(_, a)| size(a)).sum();
        let (done, r) = oneshot::channel();
        let sent = {
            let tx = self.tx.lock().unwrap_or_else(|p| p.into_inner());
            tx.as_ref()
                .is_some_and(|tx| tx.send(Job { cmds, bytes, done }).is_ok())
        };
        let down = || vec![Reply::err("the server is shutting down"); n];
        if !sent {
            return down();
        }
        r.await.unwrap_or_else(|_| down())
    }

    /// Stops the thread once the queued jobs are done.
    pub fn stop(&self) {
        self.tx.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(t) = self.thread.lock().unwrap_or_else(|p| p.into_inner()).take() {
            let _ = t.join();
        }
    }
}

fn run_group(ks: &Keyspace, fsync: Fsync, cluster: Option<&Cluster>, jobs: Vec<Job>) {
    let mut t = ks.txn();
    let replies: Vec<Vec<Reply>> = jobs
        .iter()
        .map(|j| {
            j.cmds
                .iter()
                .map(|(s, a)| match cluster.and_then(|c| c.recheck_write(s, a)) {
                    Some(redirect) => redirect,
                    None => run_write(s, &mut t, a),
                })
                .collect()
        })
        .collect();
    let outcome = match t.commit() {
        Ok(true) if fsync == Fsync::Always => ks
            .db()
            .write(&WriteBatch::new(), WriteOptions { sync: true })
            .map_err(|e| format!("sync failed, write not acknowledged: {e}")),
        Ok(_) => Ok(()),
        Err(e) => Err(e.to_string()),
    };
    for (job, reps) in jobs.into_iter().zip(replies) {
        let reps = match &outcome {
            Ok(()) => reps,
            Err(e) => vec![Reply::err(e); reps.len()],
        };
        let _ = job.done.send(reps);
    }
}
