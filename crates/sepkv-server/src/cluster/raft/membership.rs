//! Membership changes: a topology version that adds nodes to a replicated
//! shard or removes nodes from it, carried out by the shard's leader
//! through openraft's joint consensus.
//!
//! - [`check_change`]: which changes a node accepts (pure, so testable
//!   without a group);
//! - [`join_or_initialize`]: how a node starts: it initializes a new group
//!   only when every node listed for the shard answers and none holds Raft
//!   state; otherwise it waits to be added;
//! - [`reconcile`]: the leader's loop that brings the group's voters to
//!   the nodes the topology in force lists: each new node is added as a
//!   learner and caught up (by snapshot, then log), then the voter set is
//!   replaced in one joint-consensus change; removed nodes leave the group.
//!
//! The loop works from state only (the topology in force and the
//! membership in the log), never from a record of its own progress, so a
//! leader elected in the middle of a change carries it on from where the
//! log stands: adding a node that is already a learner, or replacing the
//! voters by the set they already are, changes nothing. openraft finishes
//! a joint configuration left by a deposed leader the same way.
//!
//! Thread-safety: [`reconcile`] and [`join_or_initialize`] are tasks of
//! their own; they touch Raft only through its handle.

use super::{bus_addr, net, raft_id, TypeConfig};
use crate::cluster::Node;
use openraft::{BasicNode, ChangeMembers, Raft};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

/// Longest a new node may take to catch up before the change is retried.
const CATCH_UP: Duration = Duration::from_secs(120);

/// Checks that `new` (`None`: the shard is gone) may replace `old` as the
/// nodes of replicated shard `shard`.
///
/// # Errors
/// The reason, naming the shard: the shard dropped, fewer than two nodes
/// left, a majority of the current nodes replaced at once, a node whose
/// address changed.
pub fn check_change(shard: &str, old: &[Node], new: Option<&[Node]>) -> Result<(), String> {
    let Some(new) = new else {
        return Err(format!(
            "shard {shard} is replicated by this node and cannot be dropped from the topology"
        ));
    };
    if new.len() < 2 {
        return Err(format!(
            "shard {shard} would be left with {} node(s); a replicated shard keeps at least two \
             (its Raft group has no one-node form)",
            new.len()
        ));
    }
    for n in new {
        if let Some(o) = old.iter().find(|o| o.id == n.id) {
            if o.entry() != n.entry() {
                return Err(format!(
                    "shard {shard}: node {} moves from {} to {}; remove it and add it under a new ID",
                    n.id,
                    o.entry(),
                    n.entry()
                ));
            }
        }
    }
    let kept = old
        .iter()
        .filter(|o| new.iter().any(|n| n.id == o.id))
        .count();
    if kept * 2 <= old.len() {
        return Err(format!(
            "shard {shard}: the change keeps {kept} of its {} nodes; keep a majority (remove at \
             most {} at a time)",
            old.len(),
            (old.len() - 1) / 2
        ));
    }
    Ok(())
}

/// Initializes the group with `nodes` once every other node of the list
/// answers on the bus and none holds Raft state; waits to be added (does
/// nothing) when one of them does. Returns once this node holds Raft state
/// or the decision is made.
pub async fn join_or_initialize(raft: Raft<TypeConfig>, me: String, nodes: Vec<Node>) {
    let mut members = BTreeMap::new();
    for n in &nodes {
        match bus_addr(n) {
            Ok(a) => {
                members.insert(raft_id(&n.id), BasicNode::new(a));
            }
            Err(e) => {
                eprintln!("cluster: {e}");
                return;
            }
        }
    }
    loop {
        match raft.is_initialized().await {
            Ok(true) => return,
            Ok(false) => {}
            Err(_) => return,
        }
        let mut fresh = true;
        let mut answered = true;
        for n in nodes.iter().filter(|n| n.id != me) {
            let addr = &members[&raft_id(&n.id)].addr;
            match net::probe(addr, Duration::from_millis(500)).await {
                Some(true) => {
                    eprintln!(
                        "cluster: node {} holds the shard's Raft group; waiting to be added by its \
                         leader",
                        n.id
                    );
                    return;
                }
                Some(false) => {}
                None => {
                    answered = false;
                    fresh = false;
                }
            }
        }
        if fresh && answered {
            // Every node of a new group proposes the same membership;
            // openraft accepts that, and the election picks one leader.
            if let Err(e) = raft.initialize(members.clone()).await {
                eprintln!("cluster: Raft group not initialized here: {e}");
            }
            return;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn names(ids: &BTreeSet<u64>, peers: &RwLock<BTreeMap<u64, Node>>) -> String {
    let p = peers.read().unwrap_or_else(|e| e.into_inner());
    ids.iter()
        .map(|i| p.get(i).map_or_else(|| i.to_string(), |n| n.id.clone()))
        .collect::<Vec<_>>()
        .join(",")
}

fn is_leader(raft: &Raft<TypeConfig>) -> bool {
    let m = raft.metrics();
    let m = m.borrow();
    m.current_leader == Some(m.id)
}

/// The leader's membership loop: whenever this node leads and the group's
/// voters differ from `target` (the shard's nodes in the topology in
/// force), adds the missing nodes as learners, waits until each caught up,
/// then replaces the voters (joint consensus); also drops learners the
/// topology no longer lists. On a node the topology removed, stops Raft
/// and sets `left` once this node is no leader still named by the group
/// (a removed node's vote is not needed: every change keeps a majority of
/// the nodes). Runs until aborted or left.
pub async fn reconcile(
    raft: Raft<TypeConfig>,
    me: u64,
    mut target: tokio::sync::watch::Receiver<Vec<Node>>,
    peers: Arc<RwLock<BTreeMap<u64, Node>>>,
    left: Arc<AtomicBool>,
) {
    loop {
        // Woken by a new topology, else every 200 ms (a new leader).
        let _ = tokio::time::timeout(Duration::from_millis(200), target.changed()).await;
        let want: Vec<Node> = target.borrow().clone();
        if !want.iter().any(|n| raft_id(&n.id) == me) {
            // Removed: leave, unless this node leads and the group still
            // names it (it carries the change out first, then steps down).
            let named = raft
                .metrics()
                .borrow()
                .membership_config
                .membership()
                .nodes()
                .any(|(i, _)| *i == me);
            if !is_leader(&raft) || !named {
                left.store(true, Ordering::Release);
                let _ = raft.shutdown().await;
                eprintln!("cluster: this node left the shard's Raft group (its Raft is stopped)");
                return;
            }
        }
        if !is_leader(&raft) {
            continue;
        }
        let mut desired = BTreeMap::new();
        let mut bad = false;
        for n in &want {
            match bus_addr(n) {
                Ok(a) => {
                    desired.insert(raft_id(&n.id), BasicNode::new(a));
                }
                Err(_) => bad = true,
            }
        }
        if bad || desired.len() < 2 {
            continue;
        }
        let ids: BTreeSet<u64> = desired.keys().copied().collect();
        let m = raft.metrics().borrow().membership_config.clone();
        let m = m.membership();
        let joint = m.get_joint_config().len() > 1;
        let voters: BTreeSet<u64> = m.voter_ids().collect();
        let known: BTreeSet<u64> = m.nodes().map(|(i, _)| *i).collect();
        if !joint && voters == ids {
            let stale: BTreeSet<u64> = known.difference(&ids).copied().collect();
            if !stale.is_empty() {
                if let Err(e) = raft
                    .change_membership(ChangeMembers::RemoveNodes(stale.clone()), false)
                    .await
                {
                    eprintln!("cluster: removing learners {}: {e}", names(&stale, &peers));
                }
            }
            continue;
        }
        if let Err(e) = change(&raft, &desired, &known, &voters, &peers).await {
            eprintln!(
                "cluster: membership change to {}: {e}; retrying",
                names(&ids, &peers)
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
}

/// One attempt at bringing the voters to `desired`.
async fn change(
    raft: &Raft<TypeConfig>,
    desired: &BTreeMap<u64, BasicNode>,
    known: &BTreeSet<u64>,
    voters: &BTreeSet<u64>,
    peers: &RwLock<BTreeMap<u64, Node>>,
) -> Result<(), String> {
    let new: Vec<u64> = desired
        .keys()
        .filter(|i| !voters.contains(i))
        .copied()
        .collect();
    let replicated = |i: &u64| {
        raft.metrics()
            .borrow()
            .replication
            .as_ref()
            .and_then(|r| r.get(i).copied().flatten())
            .is_some()
    };
    if new.iter().any(|i| !known.contains(i) || !replicated(i)) {
        // A new node starts from a checkpoint rather than the whole log:
        // a fresh snapshot lets the log behind it be purged. (A leader
        // elected while a learner waits does the same.)
        snapshot_now(raft).await;
    }
    for &id in &new {
        let one = BTreeSet::from([id]);
        if !known.contains(&id) {
            raft.add_learner(id, desired[&id].clone(), false)
                .await
                .map_err(|e| format!("adding {} as a learner: {e}", names(&one, peers)))?;
            eprintln!("cluster: node {} added as a learner", names(&one, peers));
        }
        let at = caught_up(raft, id).await?;
        eprintln!(
            "cluster: node {} caught up at log index {at}",
            names(&one, peers)
        );
    }
    let ids: BTreeSet<u64> = desired.keys().copied().collect();
    raft.change_membership(ChangeMembers::ReplaceAllVoters(ids.clone()), false)
        .await
        .map_err(|e| e.to_string())?;
    eprintln!("cluster: voters now {}", names(&ids, peers));
    Ok(())
}

/// Builds a snapshot now and waits (at most 30 s) until it is built.
async fn snapshot_now(raft: &Raft<TypeConfig>) {
    let applied = raft.metrics().borrow().last_applied.map(|l| l.index);
    if raft.trigger().snapshot().await.is_err() {
        return;
    }
    let end = Instant::now() + Duration::from_secs(30);
    while Instant::now() < end {
        let s = raft.metrics().borrow().snapshot.map(|l| l.index);
        if s >= applied {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits until learner `id` holds the log up to the leader's last index
/// at the call; that index.
///
/// # Errors
/// Leadership lost, or not caught up within [`CATCH_UP`].
async fn caught_up(raft: &Raft<TypeConfig>, id: u64) -> Result<u64, String> {
    let goal = raft.metrics().borrow().last_log_index.unwrap_or(0);
    let end = Instant::now() + CATCH_UP;
    loop {
        {
            let m = raft.metrics();
            let m = m.borrow();
            if m.current_leader != Some(m.id) {
                return Err("this node is no longer the leader".into());
            }
            let matched = m
                .replication
                .as_ref()
                .and_then(|r| r.get(&id).copied().flatten())
                .map(|l| l.index);
            if matched.is_some_and(|i| i >= goal) {
                return Ok(goal);
            }
        }
        if Instant::now() > end {
            return Err(format!("not caught up within {CATCH_UP:?}"));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nodes(ids: &[&str]) -> Vec<Node> {
        ids.iter()
            .enumerate()
            .map(|(i, id)| Node {
                id: (*id).into(),
                host: "127.0.0.1".into(),
                port: 7000 + i as u16,
                bus: None,
            })
            .collect()
    }

    #[test]
    fn changes_keep_a_majority_and_two_nodes() {
        let three = nodes(&["a", "b", "c"]);
        let five = nodes(&["a", "b", "c", "d", "e"]);
        assert!(check_change("s", &three, Some(&five)).is_ok());
        assert!(check_change("s", &five, Some(&five[..4])).is_ok());
        // Replacing one dead node: keep 2 of 3.
        let mut swap = nodes(&["a", "b", "x"]);
        swap[2].port = 7100;
        assert!(check_change("s", &three, Some(&swap)).is_ok());
        let e = check_change("s", &five, Some(&five[..2])).unwrap_err();
        assert!(
            e.contains("shard s") && e.contains("keeps 2 of its 5"),
            "{e}"
        );
        let e = check_change("s", &three, Some(&three[..1])).unwrap_err();
        assert!(e.contains("at least two"), "{e}");
        let e = check_change("s", &three, None).unwrap_err();
        assert!(e.contains("shard s"), "{e}");
        let mut moved = three.clone();
        moved[1].port = 9999;
        let e = check_change("s", &three, Some(&moved)).unwrap_err();
        assert!(e.contains("node b moves"), "{e}");
    }
}
