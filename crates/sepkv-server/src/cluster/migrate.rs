//! Moving slots between nodes while they serve writes.
//!
//! The source copies its slots to the target in chunks of
//! [`CHUNK_SLOTS`] slots. For each chunk it marks the slots *in flight*
//! under the keyspace's writer lock (writes to them wait, at most
//! [`super::slots::WAIT`]), reads every record under each slot's prefix
//! with one range scan (key records of every type and their sub-key
//! records alike), sends them in batches of at most [`BATCH_RECORDS`]
//! records as `CLUSTER IMPORT-RECORDS`, and once the target has
//! acknowledged them (durably: it syncs) marks the slots *moved*, after
//! which this node answers `-ASK` for their keys. Reads are served from the
//! local copy until then.
//!
//! Before each chunk the target deletes what an interrupted earlier copy
//! may have left of its slots ([`import_clear`]).
//!
//! On the target, [`import`] writes the records in one transaction: a key
//! record is rewritten in the target's keyspace generation with its TTL,
//! which also writes its expire index record (`0xFF 'e' | slot | key`) and
//! counts it; other records (sub-keys of other types) are written as they
//! are.
//!
//! After the next topology, [`drop_unowned`] deletes, in the background
//! and in small transactions, the records of slots this node neither
//! serves nor imports.

use super::client::Client;
use super::{Cluster, Mark, SlotState};
use crate::durability::Fsync;
use crate::keys::{self, Meta, Record, EXPIRE_PREFIX, KIND_KEY, META_KEY, SLOTS, TYPE_HASH};
use crate::keyspace::{now_ms, Value};
use sepkv::{WriteBatch, WriteOptions};
use std::ops::Bound;

/// Slots copied per chunk (writes to them wait meanwhile).
pub const CHUNK_SLOTS: u16 = 16;
/// Most records per `CLUSTER IMPORT-RECORDS`.
pub const BATCH_RECORDS: usize = 512;
/// Most bytes per `CLUSTER IMPORT-RECORDS`.
pub const BATCH_BYTES: usize = 4 << 20;
/// Records deleted per transaction when dropping slots given away.
const DROP_BATCH: usize = 1000;

/// An engine record: key and value.
type Pair = (Vec<u8>, Vec<u8>);

/// The engine key range of `slot`'s records.
pub(crate) fn slot_range(slot: u16) -> (Vec<u8>, Vec<u8>) {
    let lo = slot.to_be_bytes().to_vec();
    let hi = if slot + 1 < SLOTS {
        (slot + 1).to_be_bytes().to_vec()
    } else {
        vec![0x40]
    };
    (lo, hi)
}

/// The engine key range of `slot`'s expire index records.
fn expire_range(slot: u16) -> (Vec<u8>, Vec<u8>) {
    let (lo, hi) = slot_range(slot);
    let mut a = EXPIRE_PREFIX.to_vec();
    a.extend_from_slice(&lo);
    let mut b = EXPIRE_PREFIX.to_vec();
    if slot + 1 < SLOTS {
        b.extend_from_slice(&hi);
    } else {
        b.push(0x40);
    }
    (a, b)
}

/// The records of `slot` a copy carries: key records of generation `gen`
/// that have not expired, and every other record under the slot's prefix.
fn slot_records(c: &Cluster, slot: u16, gen: u32, now: u64) -> Result<Vec<Pair>, String> {
    let (lo, hi) = slot_range(slot);
    let mut out = Vec::new();
    let it = c
        .keyspace()
        .db()
        .scan((Bound::Included(&lo[..]), Bound::Excluded(&hi[..])), false)
        .map_err(|e| e.to_string())?;
    for r in it {
        let (k, v) = r.map_err(|e| e.to_string())?;
        if k.get(2) == Some(&KIND_KEY) {
            match keys::header(&v) {
                Some((_, g, e)) if g == gen && (e == 0 || e > now) => {}
                _ => continue,
            }
        }
        out.push((k, v));
    }
    Ok(out)
}

fn current_gen(c: &Cluster) -> Result<u32, String> {
    match c.keyspace().db().get(META_KEY).map_err(|e| e.to_string())? {
        Some(v) => Meta::decode(&v)
            .map(|m| m.gen)
            .ok_or_else(|| "the keyspace metadata record is malformed".into()),
        None => Ok(1),
    }
}

/// Copies every slot of `slots` marked migrating on this node to its
/// target (`CLUSTER MIGRATE`); returns the records copied. Slots already
/// copied are skipped, so a failed run can be repeated.
///
/// # Errors
/// A slot not marked migrating, the target unreachable or refusing, engine
/// errors. Slots copied before the error stay moved; the chunk in flight
/// goes back to migrating.
pub fn migrate(c: &Cluster, slots: &[(u16, u16)]) -> Result<u64, String> {
    let marks = c.marks();
    let mut todo: Vec<(u16, String)> = Vec::new();
    for &(a, b) in slots {
        for s in a..=b {
            match marks.get(&s) {
                Some(Mark::Migrating(_, true)) => {}
                Some(Mark::Migrating(to, false)) => todo.push((s, to.clone())),
                _ => return Err(format!("hash slot {s} is not marked migrating")),
            }
        }
    }
    let t = c.topology();
    let mut copied = 0u64;
    let mut clients: std::collections::HashMap<String, Client> = Default::default();
    for chunk in todo.chunk_by(|a, b| {
        a.1 == b.1 && b.0 - a.0 < CHUNK_SLOTS && b.0 / CHUNK_SLOTS == a.0 / CHUNK_SLOTS
    }) {
        let to = &chunk[0].1;
        if !clients.contains_key(to) {
            let (_, node) = t
                .node(to)
                .ok_or_else(|| format!("the target node {to} is not in the topology"))?;
            let cl = Client::connect(&node.addr(), c.requirepass.as_deref())
                .map_err(|e| format!("connecting to {to} at {}: {e}", node.addr()))?;
            clients.insert(to.clone(), cl);
        }
        let client = clients.get_mut(to).ok_or("no client")?;
        let slots: Vec<u16> = chunk.iter().map(|x| x.0).collect();
        {
            let _writer = c.keyspace().txn();
            for &s in &slots {
                c.set_state(s, SlotState::InFlight);
            }
        }
        let r = copy_chunk(c, client, &slots);
        let _writer = c.keyspace().txn();
        match r {
            Ok(n) => {
                c.mark_moved(&slots)?;
                for &s in &slots {
                    c.set_state(s, SlotState::Moved);
                }
                copied += n;
            }
            Err(e) => {
                for &s in &slots {
                    c.set_state(s, SlotState::Migrating);
                }
                return Err(e);
            }
        }
    }
    Ok(copied)
}

fn copy_chunk(c: &Cluster, client: &mut Client, slots: &[u16]) -> Result<u64, String> {
    let ranges = super::topology::format_slots(&super::topology::ranges_of(slots.iter().copied()));
    client
        .call_ok(&["CLUSTER", "IMPORT-CLEAR", &ranges])
        .map_err(|e| format!("clearing {ranges} on the target: {e}"))?;
    let gen = current_gen(c)?;
    let now = now_ms();
    let mut n = 0u64;
    let mut batch: Vec<Vec<u8>> = vec![b"CLUSTER".to_vec(), b"IMPORT-RECORDS".to_vec()];
    let mut bytes = 0;
    let send = |client: &mut Client, batch: &mut Vec<Vec<u8>>| -> Result<(), String> {
        if batch.len() > 2 {
            client
                .call_ok(batch)
                .map_err(|e| format!("importing on the target: {e}"))?;
            batch.truncate(2);
        }
        Ok(())
    };
    for &s in slots {
        for (k, v) in slot_records(c, s, gen, now)? {
            bytes += k.len() + v.len();
            batch.push(k);
            batch.push(v);
            n += 1;
            if batch.len() >= 2 + 2 * BATCH_RECORDS || bytes >= BATCH_BYTES {
                send(client, &mut batch)?;
                bytes = 0;
            }
        }
    }
    send(client, &mut batch)?;
    Ok(n)
}

/// Writes records copied from a migration source (`CLUSTER
/// IMPORT-RECORDS`): `pairs` of engine key and value, every one in a slot
/// this node imports. Returns the number written. Synced unless `--fsync
/// no`.
///
/// # Errors
/// A record outside an importing slot (nothing is written then), engine
/// errors.
pub fn import(c: &Cluster, pairs: &[(&[u8], &[u8])]) -> Result<usize, String> {
    for (k, _) in pairs {
        let slot = k
            .get(..2)
            .map(|b| u16::from_be_bytes([b[0], b[1]]))
            .filter(|&s| s < SLOTS)
            .ok_or_else(|| "a record key without a slot prefix".to_string())?;
        if c.slot_state(slot) != SlotState::Importing {
            return Err(format!("hash slot {slot} is not importing on this node"));
        }
    }
    let now = now_ms();
    let ks = c.keyspace();
    let mut t = ks.txn();
    for (k, v) in pairs {
        match keys::user_key(k) {
            Some(user) => {
                let Some(r) = Record::decode(v.to_vec()) else {
                    return Err(format!(
                        "a malformed key record for key {:?}",
                        String::from_utf8_lossy(user)
                    ));
                };
                if r.expire != 0 && r.expire <= now {
                    continue;
                }
                if r.kind == TYPE_HASH {
                    if let Some((version, _)) = keys::parse_hash_payload(&r.payload) {
                        t.reserve_version(version);
                    }
                }
                let val = Value {
                    kind: r.kind,
                    payload: r.payload,
                    expire: r.expire,
                };
                t.set(user, val, now).map_err(|e| e.to_string())?;
            }
            None => {
                // A hash's field records, live or not yet dropped: their
                // versions are reserved too.
                if let Some((_, version, _)) = keys::parse_field_key(k) {
                    t.reserve_version(version);
                }
                t.put_raw(k, v).map_err(|e| e.to_string())?
            }
        }
    }
    t.commit().map_err(|e| e.to_string())?;
    if c.fsync != Fsync::No {
        ks.db()
            .write(&WriteBatch::new(), WriteOptions { sync: true })
            .map_err(|e| e.to_string())?;
    }
    Ok(pairs.len())
}

/// Deletes whatever an earlier, interrupted copy left of `slots`
/// (`CLUSTER IMPORT-CLEAR`), before the source copies them again: a key
/// the source deleted since must not come back. Every slot must be
/// importing.
///
/// # Errors
/// A slot not importing (nothing is deleted then), engine errors.
pub fn import_clear(c: &Cluster, slots: &[(u16, u16)]) -> Result<u64, String> {
    let importing = |s: u16| c.slot_state(s) == SlotState::Importing;
    if let Some(s) = slots
        .iter()
        .flat_map(|&(a, b)| a..=b)
        .find(|&s| !importing(s))
    {
        return Err(format!("hash slot {s} is not importing on this node"));
    }
    let n = drop_slots(c, slots, importing)?;
    if n > 0 && c.fsync != Fsync::No {
        c.keyspace()
            .db()
            .write(&WriteBatch::new(), WriteOptions { sync: true })
            .map_err(|e| e.to_string())?;
    }
    Ok(n)
}

/// Deletes the records of every slot this node neither serves nor
/// imports (after a topology gave them away, or left over from a crash).
///
/// # Errors
/// Engine errors.
pub fn drop_unowned(c: &Cluster) -> Result<u64, String> {
    let gone = |s: u16| c.slot_state(s) == SlotState::Elsewhere;
    let runs = super::topology::ranges_of((0..SLOTS).filter(|&s| gone(s)));
    drop_slots(c, &runs, gone)
}

/// Deletes every record of the slots in `runs` for which `gone`
/// holds (re-checked under the writer lock for each record).
fn drop_slots(c: &Cluster, runs: &[(u16, u16)], gone: impl Fn(u16) -> bool) -> Result<u64, String> {
    let mut dropped = 0;
    for &(a, b) in runs {
        for (lo, hi, at) in [
            (slot_range(a).0, slot_range(b).1, 0),
            (expire_range(a).0, expire_range(b).1, EXPIRE_PREFIX.len()),
        ] {
            let mut from = lo;
            loop {
                let mut found: Vec<Vec<u8>> = Vec::new();
                let it = c
                    .keyspace()
                    .db()
                    .scan(
                        (Bound::Included(&from[..]), Bound::Excluded(&hi[..])),
                        false,
                    )
                    .map_err(|e| e.to_string())?;
                for r in it.take(DROP_BATCH) {
                    found.push(r.map_err(|e| e.to_string())?.0);
                }
                let Some(last) = found.last() else {
                    break;
                };
                from = last.clone();
                from.push(0);
                let now = now_ms();
                let mut t = c.keyspace().txn();
                for k in &found {
                    // Re-checked under the writer lock: an import may have
                    // begun since the scan.
                    let slot = k
                        .get(at..at + 2)
                        .map_or(0, |b| u16::from_be_bytes([b[0], b[1]]));
                    if !gone(slot) {
                        continue;
                    }
                    if let Some(user) = keys::user_key(k) {
                        t.del(user, now).map_err(|e| e.to_string())?;
                    }
                    t.delete_raw(k).map_err(|e| e.to_string())?;
                    dropped += 1;
                }
                t.commit().map_err(|e| e.to_string())?;
                if found.len() < DROP_BATCH {
                    break;
                }
            }
        }
    }
    Ok(dropped)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_cover_a_slot() {
        assert_eq!(slot_range(0), (vec![0, 0], vec![0, 1]));
        assert_eq!(slot_range(16383), (vec![0x3f, 0xff], vec![0x40]));
        let (a, b) = expire_range(5);
        assert_eq!(a, b"\xffe\x00\x05".to_vec());
        assert_eq!(b, b"\xffe\x00\x06".to_vec());
    }
}
