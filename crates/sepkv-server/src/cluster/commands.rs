//! `CLUSTER …`, `ASKING`, `READONLY` and `READWRITE`.
//!
//! What cluster clients read: `SLOTS`, `SHARDS`, `NODES`, `INFO`, `MYID`,
//! `MYSHARDID`, `KEYSLOT`, `COUNTKEYSINSLOT`, `GETKEYSINSLOT`, as Redis 7
//! answers them. Administration (sepkv's own): `GETTOPOLOGY` (the
//! topology's text), `SETTOPOLOGY <text>` (installed when its version is
//! higher), `SETSLOT <slots> MIGRATING|IMPORTING <node-id>` and `SETSLOT
//! <slots> STABLE` (slots as `A-B[,C-D…]`), `MIGRATE <slots>` (copy the
//! slots marked migrating to their target; answers the number of records
//! copied), and `IMPORT-CLEAR <slots>` and `IMPORT-RECORDS <key> <value>
//! …` (the copy's receiving end).

use super::topology::parse_slots;
use super::{migrate, Cluster, Mark, Topology};
use crate::command::{int_arg, CmdResult, Ctx};
use crate::keys::{self, SLOTS};
use crate::keyspace::now_ms;
use crate::resp::Reply;
use bytes::Bytes;
use std::ops::Bound;
use std::sync::Arc;

fn cluster_of(ctx: &Ctx<'_>) -> Result<Arc<Cluster>, Reply> {
    ctx.shared
        .cluster
        .clone()
        .ok_or_else(|| Reply::err("This instance has cluster support disabled"))
}

/// `ASKING`: the next command may use a slot this node is importing.
pub fn asking(ctx: &mut Ctx<'_>, _: &[Bytes]) -> CmdResult {
    let c = cluster_of(ctx)?;
    c.set_asking(ctx.client.id);
    Ok(Reply::OK)
}

/// `READONLY` / `READWRITE`: on a replica of a Raft group, `READONLY`
/// lets this client's reads be served here (possibly stale).
pub fn readonly(ctx: &mut Ctx<'_>, a: &[Bytes]) -> CmdResult {
    let c = cluster_of(ctx)?;
    c.set_readonly(ctx.client.id, a[0].eq_ignore_ascii_case(b"readonly"));
    Ok(Reply::OK)
}

fn slot_arg(b: &[u8]) -> Result<u16, Reply> {
    let n = int_arg(b)?;
    u16::try_from(n)
        .ok()
        .filter(|&s| s < SLOTS)
        .ok_or_else(|| Reply::err("Invalid or out of range slot"))
}

fn ranges_arg(b: &[u8]) -> Result<Vec<(u16, u16)>, Reply> {
    parse_slots(&String::from_utf8_lossy(b)).map_err(Reply::err)
}

fn node_reply(n: &super::Node) -> Reply {
    Reply::Array(vec![
        Reply::bulk(n.host.clone()),
        Reply::Int(i64::from(n.port)),
        Reply::bulk(n.id.clone()),
    ])
}

fn info_text(c: &Cluster) -> String {
    let t = c.topology();
    let nodes: usize = t.shards.iter().map(|s| s.nodes.len()).sum();
    let size = t.shards.iter().filter(|s| !s.slots.is_empty()).count();
    let mine = t.node(c.my_id()).map_or(0, |(s, _)| {
        s.slots
            .iter()
            .map(|&(a, b)| u32::from(b - a) + 1)
            .sum::<u32>()
    });
    format!(
        "cluster_state:ok\r\ncluster_slots_assigned:{SLOTS}\r\ncluster_slots_ok:{SLOTS}\r\n\
         cluster_slots_pfail:0\r\ncluster_slots_fail:0\r\ncluster_known_nodes:{nodes}\r\n\
         cluster_size:{size}\r\ncluster_current_epoch:{v}\r\ncluster_my_epoch:{v}\r\n\
         cluster_stats_messages_sent:0\r\ncluster_stats_messages_received:0\r\n\
         total_cluster_links_buffer_limit_exceeded:0\r\n\
         sepkv_topology_version:{v}\r\nsepkv_my_slots:{mine}\r\n",
        v = t.version
    )
}

/// The `INFO cluster` fields.
pub fn info_fields(c: Option<&Cluster>) -> Vec<(&'static str, String)> {
    match c {
        None => vec![("cluster_enabled", "0".into())],
        Some(c) => {
            let mut v = vec![
                ("cluster_enabled", "1".into()),
                ("cluster_topology_version", c.topology().version.to_string()),
                ("cluster_node_id", c.my_id().into()),
            ];
            if let Some(r) = c.replica() {
                let (term, last_log, applied) = r.metrics();
                let role = if r.has_left() {
                    "removed"
                } else if r.is_leader() {
                    "leader"
                } else {
                    "follower"
                };
                v.push(("raft_role", role.into()));
                v.push((
                    "raft_leader",
                    r.leader().map_or("-".into(), |n| n.id.clone()),
                ));
                v.push(("raft_term", term.to_string()));
                v.push(("raft_last_log_index", last_log.unwrap_or(0).to_string()));
                v.push(("raft_last_applied_index", applied.unwrap_or(0).to_string()));
                let t = c.topology();
                let voters = r.voters();
                let mut names: Vec<String> = r
                    .known_nodes()
                    .into_iter()
                    .filter(|n| voters.contains(&super::raft::raft_id(&n.id)))
                    .map(|n| n.id)
                    .collect();
                names.sort();
                v.push(("raft_voters", names.join(",")));
                let settled = t
                    .node(c.my_id())
                    .is_none_or(|(s, _)| r.settled_at(&s.nodes));
                v.push((
                    "raft_membership",
                    if settled { "settled" } else { "changing" }.into(),
                ));
            }
            v
        }
    }
}

fn nodes_text(c: &Cluster) -> String {
    let t = c.topology();
    let marks = c.marks();
    let mut out = String::new();
    for s in &t.shards {
        let roles = c.shard_roles(s);
        let master_id = roles[0].0.id.clone();
        for (n, master) in roles {
            let me = n.id == c.my_id();
            let cport = n.bus_port().unwrap_or(0);
            let role = match (me, master) {
                (true, true) => "myself,master".to_string(),
                (false, true) => "master".to_string(),
                (true, false) => format!("myself,slave {master_id}"),
                (false, false) => format!("slave {master_id}"),
            };
            let (flags, parent) = role.split_once(' ').unwrap_or((role.as_str(), "-"));
            out.push_str(&format!(
                "{} {}@{} {} {} 0 0 {} connected",
                n.id,
                n.addr(),
                cport,
                flags,
                parent,
                t.version
            ));
            if !master {
                out.push('\n');
                continue;
            }
            for &(a, b) in &s.slots {
                if a == b {
                    out.push_str(&format!(" {a}"));
                } else {
                    out.push_str(&format!(" {a}-{b}"));
                }
            }
            if me {
                for (slot, m) in &marks {
                    match m {
                        Mark::Migrating(to, _) => out.push_str(&format!(" [{slot}->-{to}]")),
                        Mark::Importing(from) => out.push_str(&format!(" [{slot}-<-{from}]")),
                    }
                }
            }
            out.push('\n');
        }
    }
    out
}

fn shards_reply(c: &Cluster) -> Reply {
    let t = c.topology();
    Reply::Array(
        t.shards
            .iter()
            .map(|s| {
                let slots = s
                    .slots
                    .iter()
                    .flat_map(|&(a, b)| [Reply::Int(i64::from(a)), Reply::Int(i64::from(b))])
                    .collect();
                let nodes = c
                    .shard_roles(s)
                    .into_iter()
                    .map(|(n, master)| {
                        Reply::Map(vec![
                            (Reply::bulk("id"), Reply::bulk(n.id.clone())),
                            (Reply::bulk("port"), Reply::Int(i64::from(n.port))),
                            (Reply::bulk("ip"), Reply::bulk(n.host.clone())),
                            (Reply::bulk("endpoint"), Reply::bulk(n.host.clone())),
                            (
                                Reply::bulk("role"),
                                Reply::bulk(if master { "master" } else { "replica" }),
                            ),
                            (Reply::bulk("replication-offset"), Reply::Int(0)),
                            (Reply::bulk("health"), Reply::bulk("online")),
                        ])
                    })
                    .collect();
                Reply::Map(vec![
                    (Reply::bulk("slots"), Reply::Array(slots)),
                    (Reply::bulk("nodes"), Reply::Array(nodes)),
                ])
            })
            .collect(),
    )
}

/// Live keys of `slot`, at most `limit`.
fn keys_in_slot(c: &Cluster, slot: u16, limit: usize) -> Result<Vec<Vec<u8>>, Reply> {
    let (lo, hi) = migrate::slot_range(slot);
    let ks = c.keyspace();
    let now = now_ms();
    let mut out = Vec::new();
    let it = ks
        .db()
        .scan((Bound::Included(&lo[..]), Bound::Excluded(&hi[..])), false)?;
    for r in it {
        if out.len() >= limit {
            break;
        }
        let (k, v) = r?;
        let Some(user) = keys::user_key(&k) else {
            continue;
        };
        if ks.get(user, now)?.is_some() || keys::header(&v).is_none() {
            out.push(user.to_vec());
        }
    }
    Ok(out)
}

/// Runs `f` where it may block for long (a migration's copy).
fn blocking<T>(f: impl FnOnce() -> T) -> T {
    match tokio::runtime::Handle::try_current() {
        Ok(h) if h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(f)
        }
        _ => f(),
    }
}

/// `CLUSTER <subcommand> …`.
pub fn cluster(ctx: &mut Ctx<'_>, a: &[Bytes]) -> CmdResult {
    let sub = String::from_utf8_lossy(&a[1]).to_ascii_uppercase();
    if sub == "HELP" {
        return Ok(Reply::Array(
            [
                "CLUSTER <subcommand> [<arg> ...]. Subcommands are:",
                "SLOTS | SHARDS | NODES | INFO | MYID | MYSHARDID",
                "KEYSLOT <key> | COUNTKEYSINSLOT <slot> | GETKEYSINSLOT <slot> <count>",
                "GETTOPOLOGY | SETTOPOLOGY <text>",
                "SETSLOT <slots> MIGRATING|IMPORTING <node-id> | SETSLOT <slots> STABLE",
                "MIGRATE <slots> | IMPORT-CLEAR <slots>",
                "IMPORT-RECORDS <key> <value> [<key> <value> ...]",
            ]
            .iter()
            .map(|s| Reply::StatusOwned((*s).into()))
            .collect(),
        ));
    }
    if sub == "KEYSLOT" {
        let [_, _, k] = a else {
            return Err(wrong(&sub));
        };
        return Ok(Reply::Int(i64::from(keys::slot(k))));
    }
    let c = cluster_of(ctx)?;
    let n = a.len();
    if c.replica().is_some()
        && matches!(
            sub.as_str(),
            "SETSLOT" | "MIGRATE" | "IMPORT-CLEAR" | "IMPORT-RECORDS"
        )
    {
        // These write the node's records directly, past the Raft log.
        return Err(Reply::err(
            "slot migration is not supported on a replicated shard yet",
        ));
    }
    match (sub.as_str(), n) {
        ("SLOTS", 2) => {
            let t = c.topology();
            Ok(Reply::Array(
                t.runs()
                    .into_iter()
                    .map(|(a, b, s)| {
                        let mut v = vec![Reply::Int(i64::from(a)), Reply::Int(i64::from(b))];
                        v.extend(c.shard_roles(s).into_iter().map(|(n, _)| node_reply(n)));
                        Reply::Array(v)
                    })
                    .collect(),
            ))
        }
        ("SHARDS", 2) => Ok(shards_reply(&c)),
        ("NODES", 2) => Ok(Reply::Verbatim(nodes_text(&c))),
        ("INFO", 2) => Ok(Reply::Verbatim(info_text(&c))),
        ("MYID", 2) => Ok(Reply::bulk(c.my_id().to_string())),
        ("MYSHARDID", 2) => {
            let t = c.topology();
            Ok(Reply::bulk(
                t.node(c.my_id())
                    .map(|(s, _)| s.name.clone())
                    .unwrap_or_default(),
            ))
        }
        ("COUNTKEYSINSLOT", 3) => {
            let s = slot_arg(&a[2])?;
            Ok(Reply::Int(keys_in_slot(&c, s, usize::MAX)?.len() as i64))
        }
        ("GETKEYSINSLOT", 4) => {
            let s = slot_arg(&a[2])?;
            let count = int_arg(&a[3])?;
            if count < 0 {
                return Err(Reply::err("Invalid number of keys"));
            }
            let keys = keys_in_slot(&c, s, count as usize)?;
            Ok(Reply::Array(keys.into_iter().map(Reply::bulk).collect()))
        }
        ("GETTOPOLOGY", 2) => Ok(Reply::bulk(c.topology().to_string())),
        ("SETTOPOLOGY", 3) => {
            let t = Topology::parse(&String::from_utf8_lossy(&a[2])).map_err(Reply::err)?;
            let (v, cur) = (t.version, c.topology().version);
            if c.install(t).map_err(Reply::err)? {
                Ok(Reply::OK)
            } else {
                Err(Reply::err(format!(
                    "topology version {v} is not newer than version {cur} in force"
                )))
            }
        }
        ("SETSLOT", 4 | 5) => {
            let slots = ranges_arg(&a[2])?;
            let node = a.get(4).map(|b| String::from_utf8_lossy(b).into_owned());
            let t = c.topology();
            let known = |id: &str| -> Result<(), Reply> {
                t.node(id)
                    .map(|_| ())
                    .ok_or_else(|| Reply::err(format!("I don't know about node {id}")))
            };
            let mark = match (
                String::from_utf8_lossy(&a[3]).to_ascii_uppercase().as_str(),
                node,
            ) {
                ("MIGRATING", Some(id)) => {
                    known(&id)?;
                    Some(Mark::Migrating(id, false))
                }
                ("IMPORTING", Some(id)) => {
                    known(&id)?;
                    Some(Mark::Importing(id))
                }
                ("STABLE", None) => None,
                ("NODE", _) => return Err(Reply::err(
                    "slots change owner with CLUSTER SETTOPOLOGY (a topology of a higher version)",
                )),
                _ => return Err(crate::command::syntax_error()),
            };
            c.set_marks(&slots, mark).map_err(Reply::err)?;
            Ok(Reply::OK)
        }
        ("MIGRATE", 3) => {
            let slots = ranges_arg(&a[2])?;
            let n = blocking(|| migrate::migrate(&c, &slots)).map_err(Reply::err)?;
            Ok(Reply::Int(n as i64))
        }
        ("IMPORT-CLEAR", 3) => {
            let slots = ranges_arg(&a[2])?;
            let n = blocking(|| migrate::import_clear(&c, &slots)).map_err(Reply::err)?;
            Ok(Reply::Int(n as i64))
        }
        ("IMPORT-RECORDS", n) if n >= 4 && n % 2 == 0 => {
            let pairs: Vec<(&[u8], &[u8])> =
                a[2..].chunks(2).map(|p| (&p[0][..], &p[1][..])).collect();
            let n = blocking(|| migrate::import(&c, &pairs)).map_err(Reply::err)?;
            Ok(Reply::Int(n as i64))
        }
        (
            "SLOTS" | "SHARDS" | "NODES" | "INFO" | "MYID" | "MYSHARDID" | "COUNTKEYSINSLOT"
            | "GETKEYSINSLOT" | "GETTOPOLOGY" | "SETTOPOLOGY" | "SETSLOT" | "MIGRATE"
            | "IMPORT-CLEAR" | "IMPORT-RECORDS",
            _,
        ) => Err(wrong(&sub)),
        _ => Err(Reply::err(format!(
            "unknown subcommand '{}'. Try CLUSTER HELP.",
            String::from_utf8_lossy(&a[1])
        ))),
    }
}

fn wrong(sub: &str) -> Reply {
    Reply::err(format!(
        "wrong number of arguments for 'cluster|{}' command",
        sub.to_ascii_lowercase()
    ))
}
