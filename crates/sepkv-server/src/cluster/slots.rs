//! Where a command's keys are served: here, or the redirection a cluster
//! client follows.
//!
//! - keys in two slots: `-CROSSSLOT Keys in request don't hash to the same
//!   slot`;
//! - a slot another node serves: `-MOVED <slot> <host>:<port>` (served
//!   here after `ASKING` when it is being imported);
//! - a slot whose keys are all on the migration target: `-ASK <slot>
//!   <host>:<port>`;
//! - a write to a slot being copied waits for the copy, at most
//!   [`WAIT`], then gets `-TRYAGAIN`.
//!
//! [`check_keys`] is the whole decision for a list of keys, so that any
//! command (a transaction's queued commands as well) can ask it.

use super::{Cluster, Mark, SlotState};
use crate::command::{command_keys, Spec};
use crate::keys::slot;
use crate::resp::Reply;
use bytes::Bytes;
use std::time::{Duration, Instant};

/// Longest a write waits for its slot's copy to the migration target.
pub const WAIT: Duration = Duration::from_millis(100);

/// What to do with a command.
#[derive(Debug, Clone, PartialEq)]
pub enum Route {
    /// Run it here.
    Serve,
    /// Answer this instead (a redirection or an error).
    Redirect(Reply),
    /// A write to a slot being copied: wait for the slot, then ask again.
    Wait(u16),
}

/// The error for keys in different slots.
pub fn crossslot() -> Reply {
    Reply::Error("CROSSSLOT Keys in request don't hash to the same slot".into())
}

/// The queue-time check of a command inside `MULTI`: its keys must be in
/// the slot of the keys queued before it, as Redis Cluster requires of a
/// transaction (each queued command was already checked for one slot of
/// its own).
///
/// # Errors
/// `-CROSSSLOT` when they are not; the connection then marks the
/// transaction refused, and its `EXEC` answers `-EXECABORT`.
pub fn check_transaction(
    queued: &[(&'static Spec, Vec<Bytes>)],
    spec: &Spec,
    args: &[Bytes],
) -> Result<(), Reply> {
    let first = queued
        .iter()
        .find_map(|(s, a)| command_keys(s, a).first().map(|k| slot(k)));
    match first {
        Some(f) if command_keys(spec, args).iter().any(|k| slot(k) != f) => Err(crossslot()),
        _ => Ok(()),
    }
}

/// The error for a write that waited too long for its slot.
pub fn tryagain() -> Reply {
    Reply::Error("TRYAGAIN The slot is being migrated; try again in a moment".into())
}

/// The one slot of `keys`, `Ok(None)` for no keys.
///
/// # Errors
/// `-CROSSSLOT` for keys of two slots.
pub fn slot_of(keys: &[&[u8]]) -> Result<Option<u16>, Reply> {
    let mut it = keys.iter().map(|k| slot(k));
    let Some(first) = it.next() else {
        return Ok(None);
    };
    if it.any(|s| s != first) {
        return Err(crossslot());
    }
    Ok(Some(first))
}

/// Where a command on `keys` runs: `write` says whether it changes them,
/// `asking` whether the client sent `ASKING` just before.
pub fn check_keys(c: &Cluster, keys: &[&[u8]], write: bool, asking: bool) -> Route {
    let s = match slot_of(keys) {
        Ok(Some(s)) => s,
        Ok(None) => return Route::Serve,
        Err(e) => return Route::Redirect(e),
    };
    match c.slot_state(s) {
        SlotState::Serve | SlotState::Migrating => Route::Serve,
        SlotState::InFlight if write => Route::Wait(s),
        SlotState::InFlight => Route::Serve,
        SlotState::Moved => Route::Redirect(ask(c, s)),
        SlotState::Importing if asking => Route::Serve,
        SlotState::Importing | SlotState::Elsewhere => Route::Redirect(moved(c, s)),
    }
}

/// `-MOVED slot host:port` to the slot's owner.
pub fn moved(c: &Cluster, s: u16) -> Reply {
    let t = c.topology();
    Reply::Error(format!("MOVED {s} {}", t.owner(s).addr()))
}

/// `-ASK slot host:port` to the slot's migration target.
fn ask(c: &Cluster, s: u16) -> Reply {
    let t = c.topology();
    let to = match c.marks().get(&s) {
        Some(Mark::Migrating(to, _)) => t.node(to).map(|(_, n)| n.addr()),
        _ => None,
    };
    match to {
        Some(a) => Reply::Error(format!("ASK {s} {a}")),
        None => moved(c, s),
    }
}

impl Cluster {
    /// Where command `spec` of client `client` runs (the connection's
    /// check, before the command is queued). Takes the client's `ASKING`
    /// flag.
    pub fn route(&self, client: u64, spec: &Spec, args: &[Bytes]) -> Route {
        let keys = command_keys(spec, args);
        if keys.is_empty() {
            return Route::Serve;
        }
        let asking = self.take_asking(client);
        let write = crate::command::is_write(spec);
        let r = check_keys(self, &keys, write, asking);
        match (r, self.replica()) {
            // A replica of a Raft group: writes go to the leader, and so
            // do reads unless the client sent READONLY.
            (Route::Serve, Some(rep))
                if !rep.is_leader() && (write || !self.is_readonly(client)) =>
            {
                Route::Redirect(rep.not_leader(spec, args))
            }
            (r, _) => r,
        }
    }

    /// Waits until `slot` is no longer being copied, at most [`WAIT`].
    pub async fn wait_slot(&self, slot: u16) {
        let end = Instant::now() + WAIT;
        while self.slot_state(slot) == SlotState::InFlight && Instant::now() < end {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }

    /// [`Cluster::route`] again after [`Cluster::wait_slot`]: a slot still
    /// being copied answers `-TRYAGAIN`.
    pub fn route_after_wait(&self, spec: &Spec, args: &[Bytes]) -> Route {
        match check_keys(self, &command_keys(spec, args), true, false) {
            Route::Wait(_) => Route::Redirect(tryagain()),
            r => r,
        }
    }

    /// The writer's check of a write it is about to run (under the
    /// writer lock), and `EXEC`'s of each queued command: `Some(reply)`
    /// when its slot changed state since the connection's check.
    pub fn recheck_write(&self, spec: &Spec, args: &[Bytes]) -> Option<Reply> {
        let keys = command_keys(spec, args);
        let s = slot_of(&keys).ok()??;
        match self.slot_state(s) {
            SlotState::Serve | SlotState::Migrating | SlotState::Importing => None,
            SlotState::InFlight => Some(tryagain()),
            SlotState::Moved => Some(ask(self, s)),
            SlotState::Elsewhere => Some(moved(self, s)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::command::lookup;

    fn args(v: &[&str]) -> Vec<Bytes> {
        v.iter().map(|s| Bytes::from(s.to_string())).collect()
    }

    #[test]
    fn keys_by_table_entry() {
        let mset = lookup("mset").unwrap();
        let a = args(&["mset", "a", "1", "b", "2"]);
        assert_eq!(command_keys(mset, &a), vec![&b"a"[..], b"b"]);
        let get = lookup("get").unwrap();
        assert_eq!(command_keys(get, &args(&["get", "x"])), vec![&b"x"[..]]);
        let ping = lookup("ping").unwrap();
        assert!(command_keys(ping, &args(&["ping"])).is_empty());
    }

    #[test]
    fn one_slot_or_crossslot() {
        assert_eq!(slot_of(&[]).unwrap(), None);
        assert_eq!(slot_of(&[b"{u1}a", b"{u1}b"]).unwrap(), Some(slot(b"u1")));
        let e = slot_of(&[b"a", b"b"]).unwrap_err();
        assert!(matches!(e, Reply::Error(m) if m.starts_with("CROSSSLOT")));
    }
}
