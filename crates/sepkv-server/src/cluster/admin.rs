//! `sepkv cluster migrate`: moving slots to a node, driven from outside
//! the cluster.
//!
//! 1. Read the topology file and every node's topology in force
//!    (`CLUSTER GETTOPOLOGY`); the highest version is the current one.
//! 2. Mark the slots importing on the target and migrating on each source
//!    (`CLUSTER SETSLOT`).
//! 3. Have each source copy them (`CLUSTER MIGRATE`): from then on the
//!    sources answer `-ASK` for moved slots, and clients write there.
//! 4. Install the next topology version on the target, the sources, then
//!    every other node (`CLUSTER SETTOPOLOGY`), and rewrite the file.
//!
//! Every step can be repeated: rerunning a failed migration resumes it.

use super::client::Client;
use super::topology::{format_slots, ranges_of, Topology};
use std::collections::BTreeMap;
use std::path::Path;

fn connect(t: &Topology, id: &str, password: Option<&str>) -> Result<Client, String> {
    let (_, n) = t
        .node(id)
        .ok_or_else(|| format!("no node {id} in the topology"))?;
    Client::connect(&n.addr(), password).map_err(|e| format!("node {id} at {}: {e}", n.addr()))
}

/// Moves `slots` to node `to` (see the module docs); `say` receives one
/// line per step. Returns the topology installed.
///
/// # Errors
/// An invalid file, an unknown node, a node that cannot be reached or
/// refuses a step (the message names it).
pub fn migrate(
    file: &Path,
    slots: &[(u16, u16)],
    to: &str,
    password: Option<&str>,
    mut say: impl FnMut(&str),
) -> Result<Topology, String> {
    let text = std::fs::read_to_string(file)
        .map_err(|e| format!("cannot read {}: {e}", file.display()))?;
    let mut cur = Topology::parse(&text).map_err(|e| format!("{}: {e}", file.display()))?;
    let ids: Vec<String> = cur
        .shards
        .iter()
        .flat_map(|s| s.nodes.iter().map(|n| n.id.clone()))
        .collect();
    let mut versions = Vec::new();
    for id in &ids {
        let mut c = connect(&cur, id, password)?;
        let got = c
            .call_text(&["CLUSTER", "GETTOPOLOGY"])
            .map_err(|e| format!("node {id}: {e}"))?;
        let t = Topology::parse(&got).map_err(|e| format!("node {id}: {e}"))?;
        versions.push((id.clone(), t.version));
        if t.version > cur.version {
            cur = t;
        }
    }
    if cur.node(to).is_none() {
        return Err(format!("no node {to} in topology version {}", cur.version));
    }
    let mut by_source: BTreeMap<String, Vec<u16>> = BTreeMap::new();
    for &(a, b) in slots {
        for s in a..=b {
            let owner = &cur.owner(s).id;
            if owner != to {
                by_source.entry(owner.clone()).or_default().push(s);
            }
        }
    }
    if by_source.is_empty() {
        // An interrupted run may have left nodes behind.
        let behind: Vec<String> = versions
            .iter()
            .filter(|(_, v)| *v < cur.version)
            .map(|(id, _)| id.clone())
            .collect();
        install(&cur, &behind, password)?;
        say(&format!(
            "node {to} already serves slots {} (topology version {})",
            format_slots(slots),
            cur.version
        ));
        return Ok(cur);
    }
    let mut target = connect(&cur, to, password)?;
    for (src, ss) in &by_source {
        let r = format_slots(&ranges_of(ss.iter().copied()));
        target
            .call_ok(&["CLUSTER", "SETSLOT", &r, "IMPORTING", src])
            .map_err(|e| format!("node {to}: importing {r}: {e}"))?;
        let mut source = connect(&cur, src, password)?;
        source
            .call_ok(&["CLUSTER", "SETSLOT", &r, "MIGRATING", to])
            .map_err(|e| format!("node {src}: migrating {r}: {e}"))?;
        let n = source
            .call_text(&["CLUSTER", "MIGRATE", &r])
            .map_err(|e| format!("node {src}: copying {r} to {to}: {e}"))?;
        say(&format!("slots {r}: {n} records copied from {src} to {to}"));
    }
    let next = cur
        .with_slots_moved(slots, to, cur.version + 1)
        .map_err(|e| e.to_string())?;
    let text = next.to_string();
    let mut order = vec![to.to_string()];
    order.extend(by_source.keys().cloned());
    order.extend(
        ids.iter()
            .filter(|i| !order.contains(i))
            .cloned()
            .collect::<Vec<_>>(),
    );
    install(&next, &order, password)?;
    say(&format!(
        "topology version {} installed on {} nodes",
        next.version,
        order.len()
    ));
    let tmp = file.with_extension("tmp");
    std::fs::write(&tmp, &text)
        .and_then(|()| std::fs::rename(&tmp, file))
        .map_err(|e| format!("writing {}: {e}", file.display()))?;
    Ok(next)
}

/// Installs `t` on nodes `ids`, in order; a node that has it already is
/// passed over.
fn install(t: &Topology, ids: &[String], password: Option<&str>) -> Result<(), String> {
    let text = t.to_string();
    for id in ids {
        let mut c = connect(t, id, password)?;
        match c.call_ok(&["CLUSTER", "SETTOPOLOGY", &text]) {
            Ok(()) => {}
            Err(e) if e.to_string().contains("is not newer") => {}
            Err(e) => return Err(format!("node {id}: installing version {}: {e}", t.version)),
        }
    }
    Ok(())
}
