//! Transactions: MULTI, EXEC, DISCARD, WATCH, UNWATCH, with Redis's
//! semantics.
//!
//! After `MULTI` a connection's commands are checked (name, arity, key
//! sizes) and queued, each answered `+QUEUED`; a command refused at that
//! point marks the transaction, and its `EXEC` answers `EXECABORT`.
//! `EXEC` runs the queue inside one [`crate::keyspace::Txn`]: it holds the
//! keyspace's writer lock (the writer thread and every other transaction
//! wait), reads see the transaction's own writes, and every write of the
//! queue goes to the engine as one atomic `WriteBatch`, so a crash keeps
//! all of a transaction or none of it. A command that fails when run (a
//! WRONGTYPE, an overflow) answers its error in `EXEC`'s array and the
//! others still apply: there is no rollback, as in Redis.
//!
//! `WATCH key…` notes how many committed changes each key has had (the
//! keyspace counts changes to watched keys only); `EXEC` answers the null
//! array and runs nothing when a watched key changed since, by any client
//! or this one, was emptied by `FLUSHDB`, or had a TTL that has passed.
//! `EXEC`, `DISCARD`, `UNWATCH`, `RESET` and closing the connection end
//! every watch.

use crate::command::{run_read, CmdResult, Ctx, Handler, Spec};
use crate::durability::Fsync;
use crate::keyspace::now_ms;
use crate::resp::Reply;
use crate::state::Shared;
use bytes::Bytes;
use sepkv::{WriteBatch, WriteOptions};

/// A connection's transaction state.
#[derive(Default)]
pub struct TxState {
    /// Commands queued since `MULTI`; `None` outside one.
    queue: Option<Vec<(&'static Spec, Vec<Bytes>)>>,
    /// A command was refused while queueing.
    dirty: bool,
    /// Watched keys: the key, its change count when watched, and the
    /// expiry (Unix ms) it had then (0: none, or absent).
    watched: Vec<(Vec<u8>, u64, u64)>,
}

impl std::fmt::Debug for TxState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TxState")
            .field("queued", &self.queue.as_ref().map(Vec::len))
            .field("dirty", &self.dirty)
            .field("watched", &self.watched.len())
            .finish()
    }
}

impl TxState {
    /// Whether the connection is between `MULTI` and `EXEC`/`DISCARD`.
    pub fn in_multi(&self) -> bool {
        self.queue.is_some()
    }

    /// The commands queued so far (for checks over a whole transaction,
    /// such as every key in one cluster slot: see
    /// [`crate::command::command_keys`]).
    pub fn queued(&self) -> &[(&'static Spec, Vec<Bytes>)] {
        self.queue.as_deref().unwrap_or_default()
    }

    /// Notes a command refused while queueing (`EXEC` then aborts).
    pub fn refused(&mut self) {
        if self.in_multi() {
            self.dirty = true;
        }
    }

    /// Ends every watch of the connection.
    pub fn unwatch_all(&mut self, shared: &Shared) {
        for (k, _, _) in self.watched.drain(..) {
            shared.ks.unwatch(&k);
        }
    }

    /// For `EXEC` on a replica of a Raft group: takes the queue when it
    /// holds write commands only, nothing was refused and no key is
    /// watched (the transaction then goes through the log as one entry);
    /// `None` leaves the state as it is.
    pub fn take_replicable(&mut self) -> Option<Vec<(&'static Spec, Vec<Bytes>)>> {
        let q = self.queue.as_ref()?;
        if self.dirty || !self.watched.is_empty() || q.is_empty() {
            return None;
        }
        if !q.iter().all(|(s, _)| crate::command::is_write(s)) {
            return None;
        }
        self.queue.take()
    }

    /// Leaves `MULTI` and ends every watch (`DISCARD`, `RESET`, a closed
    /// connection).
    pub fn reset(&mut self, shared: &Shared) {
        self.queue = None;
        self.dirty = false;
        self.unwatch_all(shared);
    }
}

/// Commands that run at once inside `MULTI` rather than being queued.
fn runs_in_multi(spec: &Spec) -> bool {
    matches!(
        spec.name,
        "exec" | "discard" | "multi" | "watch" | "quit" | "reset"
    )
}

/// Runs a checked command that is not handed to the writer: queued inside
/// `MULTI`, else run on the connection's task.
pub fn dispatch(ctx: &mut Ctx<'_>, spec: &'static Spec, args: Vec<Bytes>) -> Reply {
    if let Some(q) = ctx.client.tx.queue.as_mut() {
        if !runs_in_multi(spec) {
            q.push((spec, args));
            return Reply::Status("QUEUED");
        }
    }
    run_read(ctx, spec, &args)
}

/// `MULTI`.
pub fn multi(ctx: &mut Ctx<'_>, _: &[Bytes]) -> CmdResult {
    if ctx.client.tx.in_multi() {
        return Err(Reply::err("MULTI calls can not be nested"));
    }
    ctx.client.tx.queue = Some(Vec::new());
    Ok(Reply::OK)
}

/// `DISCARD`.
pub fn discard(ctx: &mut Ctx<'_>, _: &[Bytes]) -> CmdResult {
    if !ctx.client.tx.in_multi() {
        return Err(Reply::err("DISCARD without MULTI"));
    }
    ctx.client.tx.reset(ctx.shared);
    Ok(Reply::OK)
}

/// `WATCH key…`.
pub fn watch(ctx: &mut Ctx<'_>, a: &[Bytes]) -> CmdResult {
    if ctx.client.tx.in_multi() {
        return Err(Reply::err("WATCH inside MULTI is not allowed"));
    }
    let now = now_ms();
    for k in &a[1..] {
        if ctx.client.tx.watched.iter().any(|(w, _, _)| w == k) {
            continue;
        }
        let changes = ctx.shared.ks.watch(k);
        let expire = match ctx.get(k, now) {
            Ok(v) => v.map_or(0, |v| v.expire),
            Err(e) => {
                ctx.shared.ks.unwatch(k);
                return Err(e.into());
            }
        };
        ctx.client.tx.watched.push((k.to_vec(), changes, expire));
    }
    Ok(Reply::OK)
}

/// `UNWATCH`.
pub fn unwatch(ctx: &mut Ctx<'_>, _: &[Bytes]) -> CmdResult {
    ctx.client.tx.unwatch_all(ctx.shared);
    Ok(Reply::OK)
}

/// `EXEC`.
pub fn exec(ctx: &mut Ctx<'_>, _: &[Bytes]) -> CmdResult {
    let Some(queue) = ctx.client.tx.queue.take() else {
        return Err(Reply::err("EXEC without MULTI"));
    };
    let dirty = std::mem::take(&mut ctx.client.tx.dirty);
    let result = if dirty {
        Err(Reply::Error(
            "EXECABORT Transaction discarded because of previous errors.".into(),
        ))
    } else {
        run_queue(ctx, &queue)
    };
    ctx.client.tx.unwatch_all(ctx.shared);
    result
}

/// Runs a transaction's queue as one engine batch (see the module docs).
fn run_queue(ctx: &mut Ctx<'_>, queue: &[(&'static Spec, Vec<Bytes>)]) -> CmdResult {
    let shared = ctx.shared;
    let ks = &shared.ks;
    let mut t = ks.txn();
    // Under the writer lock: no commit can slip between check and run.
    let now = now_ms();
    let changed = ctx
        .client
        .tx
        .watched
        .iter()
        .any(|(k, n, e)| ks.watch_changes(k) != *n || (*e != 0 && *e <= now));
    if changed {
        return Ok(Reply::NilArray);
    }
    // In cluster mode a slot may have moved since the commands were
    // queued: the whole transaction is then redirected, as Redis does.
    if let Some(c) = &shared.cluster {
        if c.replica().is_some() && queue.iter().any(|(s, _)| crate::command::is_write(s)) {
            return Err(Reply::err(
                "MULTI/EXEC mixing writes with reads or WATCH is not replicated yet",
            ));
        }
        if let Some(r) = queue
            .iter()
            .find_map(|(spec, args)| c.recheck_write(spec, args))
        {
            return Err(r);
        }
    }
    let mut replies = Vec::with_capacity(queue.len());
    for (spec, args) in queue {
        let r = match spec.handler {
            Handler::Write(h) => h(&mut t, args),
            Handler::Read(h) => h(
                &mut Ctx {
                    shared,
                    client: &mut *ctx.client,
                    txn: Some(&mut t),
                },
                args,
            ),
        };
        replies.push(r.unwrap_or_else(|e| e));
    }
    // A failed commit applies nothing: the whole EXEC answers the error.
    if t.commit()? && shared.config.fsync == Fsync::Always {
        ks.db()
            .write(&WriteBatch::new(), WriteOptions { sync: true })
            .map_err(|e| Reply::err(format!("sync failed, write not acknowledged: {e}")))?;
    }
    Ok(Reply::Array(replies))
}
