//! Server commands: INFO, CONFIG GET, DBSIZE, FLUSHDB, FLUSHALL, TIME,
//! COMMAND.

use super::connection::REDIS_VERSION;
use crate::command::{is, lookup, syntax_error, CmdResult, Ctx, Spec, COMMANDS};
use crate::keys::glob_match;
use crate::keyspace::Txn;
use crate::resp::Reply;
use bytes::Bytes;
use std::fmt::Write;
use std::sync::atomic::Ordering;
use std::time::{SystemTime, UNIX_EPOCH};

/// `DBSIZE`: the maintained key count (keys whose TTL passed but that no
/// reader or the expiry cycle has deleted yet included, as in Redis).
pub fn dbsize(ctx: &mut Ctx<'_>, _: &[Bytes]) -> CmdResult {
    Ok(Reply::Int(ctx.read(|r| r.dbsize()) as i64))
}

/// `FLUSHDB [ASYNC|SYNC]`: bumps the keyspace generation (one small
/// write); the old records are deleted in the background.
pub fn flushdb(t: &mut Txn<'_>, a: &[Bytes]) -> CmdResult {
    match a.len() {
        1 => {}
        2 if is(&a[1], "async") || is(&a[1], "sync") => {}
        _ => return Err(syntax_error()),
    }
    t.flush();
    Ok(Reply::OK)
}

/// `FLUSHALL [ASYNC|SYNC]`: one database, so as `FLUSHDB`.
pub fn flushall(t: &mut Txn<'_>, a: &[Bytes]) -> CmdResult {
    flushdb(t, a)
}

/// `TIME`.
pub fn time(_: &mut Ctx<'_>, _: &[Bytes]) -> CmdResult {
    let d = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    Ok(Reply::Array(vec![
        Reply::bulk(d.as_secs().to_string()),
        Reply::bulk(d.subsec_micros().to_string()),
    ]))
}

/// The parameters `CONFIG GET` reports.
fn config_params(ctx: &Ctx<'_>) -> Vec<(&'static str, String)> {
    let c = &ctx.shared.config;
    vec![
        ("appendfsync", c.fsync.name().into()),
        ("appendonly", "yes".into()),
        ("bind", c.bind.clone()),
        ("databases", "1".into()),
        ("maxclients", c.maxclients.to_string()),
        ("maxmemory", "0".into()),
        ("maxmemory-policy", "noeviction".into()),
        ("port", ctx.shared.port.to_string()),
        (
            "protected-mode",
            if c.protected_mode { "yes" } else { "no" }.into(),
        ),
        ("proto-max-bulk-len", crate::keys::MAX_STRING.to_string()),
        ("requirepass", c.requirepass.clone().unwrap_or_default()),
        ("save", String::new()),
        ("timeout", "0".into()),
    ]
}

/// `CONFIG GET pattern…` (`CONFIG SET` is refused: the server is
/// configured by its command line).
pub fn config(ctx: &mut Ctx<'_>, a: &[Bytes]) -> CmdResult {
    if is(&a[1], "get") {
        if a.len() < 3 {
            return Err(crate::command::arity_error("config|get"));
        }
        // In the order of the patterns, each parameter once (as Redis).
        let params = config_params(ctx);
        let mut taken = vec![false; params.len()];
        let mut out = Vec::new();
        for p in &a[2..] {
            let p = p.to_ascii_lowercase();
            for (i, (n, v)) in params.iter().enumerate() {
                if !taken[i] && glob_match(&p, n.as_bytes()) {
                    taken[i] = true;
                    out.push((Reply::bulk(*n), Reply::bulk(v.clone())));
                }
            }
        }
        return Ok(Reply::Map(out));
    }
    if is(&a[1], "resetstat") {
        return Ok(Reply::OK);
    }
    if is(&a[1], "set") {
        return Err(Reply::err(format!(
            "Unsupported CONFIG parameter: {} (sepkv is configured by the command line)",
            String::from_utf8_lossy(a.get(2).map_or(&b""[..], |b| &b[..]))
        )));
    }
    Err(Reply::err(format!(
        "unknown subcommand '{}'. Try CONFIG HELP.",
        String::from_utf8_lossy(&a[1])
    )))
}

fn section(out: &mut String, name: &str, body: &[(&str, String)]) {
    if !out.is_empty() {
        out.push_str("\r\n");
    }
    let _ = write!(out, "# {name}\r\n");
    for (k, v) in body {
        let _ = write!(out, "{k}:{v}\r\n");
    }
}

/// `INFO [section…]`: server, clients, persistence, stats, keyspace and
/// sepkv (the preset and the engine's statistics).
pub fn info(ctx: &mut Ctx<'_>, a: &[Bytes]) -> CmdResult {
    let want: Vec<String> = a[1..]
        .iter()
        .map(|s| String::from_utf8_lossy(s).to_ascii_lowercase())
        .collect();
    let all = want.is_empty()
        || want
            .iter()
            .any(|w| w == "all" || w == "everything" || w == "default");
    let wants = |s: &str| all || want.iter().any(|w| w == s);
    let sh = ctx.shared;
    let mut out = String::new();
    if wants("server") {
        let uptime = sh.started.elapsed().as_secs();
        section(
            &mut out,
            "Server",
            &[
                ("redis_version", REDIS_VERSION.into()),
                (
                    "redis_mode",
                    if sh.cluster.is_some() {
                        "cluster"
                    } else {
                        "standalone"
                    }
                    .into(),
                ),
                ("sepkv_version", env!("CARGO_PKG_VERSION").into()),
                ("os", std::env::consts::OS.into()),
                ("arch_bits", (usize::BITS).to_string()),
                ("multiplexing_api", "tokio".into()),
                ("process_id", std::process::id().to_string()),
                ("tcp_port", sh.port.to_string()),
                ("uptime_in_seconds", uptime.to_string()),
                ("uptime_in_days", (uptime / 86400).to_string()),
                ("executable", "sepkv".into()),
            ],
        );
    }
    if wants("clients") {
        section(
            &mut out,
            "Clients",
            &[
                ("connected_clients", sh.connected().to_string()),
                ("maxclients", sh.config.maxclients.to_string()),
                ("blocked_clients", "0".into()),
            ],
        );
    }
    if wants("persistence") {
        section(
            &mut out,
            "Persistence",
            &[
                ("loading", "0".into()),
                ("aof_enabled", "1".into()),
                ("appendfsync", sh.config.fsync.name().into()),
                ("rdb_changes_since_last_save", "0".into()),
            ],
        );
    }
    if wants("stats") {
        let ks = &sh.ks.stats;
        section(
            &mut out,
            "Stats",
            &[
                (
                    "total_connections_received",
                    sh.stats.connections.load(Ordering::Relaxed).to_string(),
                ),
                (
                    "total_commands_processed",
                    sh.stats.commands.load(Ordering::Relaxed).to_string(),
                ),
                (
                    "rejected_connections",
                    sh.stats.rejected.load(Ordering::Relaxed).to_string(),
                ),
                (
                    "expired_keys",
                    ks.expired_keys.load(Ordering::Relaxed).to_string(),
                ),
                ("keyspace_hits", ks.hits.load(Ordering::Relaxed).to_string()),
                (
                    "keyspace_misses",
                    ks.misses.load(Ordering::Relaxed).to_string(),
                ),
                ("total_error_replies", "0".into()),
                (
                    "protocol_errors",
                    sh.stats.protocol_errors.load(Ordering::Relaxed).to_string(),
                ),
            ],
        );
    }
    if wants("cluster") {
        let body = crate::cluster::commands::info_fields(sh.cluster.as_deref());
        section(&mut out, "Cluster", &body);
    }
    if wants("keyspace") {
        let n = sh.ks.len();
        let body = if n > 0 {
            vec![(
                "db0",
                format!("keys={n},expires={},avg_ttl=0", sh.ks.expires()),
            )]
        } else {
            vec![]
        };
        section(&mut out, "Keyspace", &body);
    }
    if wants("sepkv") {
        let mut body = vec![("preset", sh.config.preset.clone())];
        match sh.ks.db().stats() {
            Ok(s) => {
                body.push(("index", s.index.clone()));
                body.push(("value_layout", s.value_layout.clone()));
                body.push(("last_sequence", s.last_sequence.to_string()));
                body.push(("memtable_bytes", s.memtable_bytes.to_string()));
                body.push(("disk_bytes", s.disk_bytes.to_string()));
                body.push((
                    "sst_files",
                    s.levels.iter().map(|l| l.files).sum::<usize>().to_string(),
                ));
                body.push((
                    "value_store_live_bytes",
                    s.value_store.live_bytes.to_string(),
                ));
                body.push((
                    "value_store_garbage_bytes",
                    s.value_store.garbage_bytes.to_string(),
                ));
                body.push(("flushes", s.flushes.to_string()));
                body.push(("compactions", s.compactions.to_string()));
                body.push(("write_stall_micros", s.write_stall_micros.to_string()));
                body.push((
                    "background_error",
                    s.background_error.clone().unwrap_or_default(),
                ));
            }
            Err(e) => body.push(("stats_error", e.to_string())),
        }
        body.push((
            "flushed_records_reclaimed",
            sh.ks.stats.reclaimed.load(Ordering::Relaxed).to_string(),
        ));
        section(&mut out, "Sepkv", &body);
    }
    out.push_str("\r\n");
    Ok(Reply::Verbatim(out))
}

fn command_info(s: &Spec) -> Reply {
    Reply::Array(vec![
        Reply::bulk(s.name),
        Reply::Int(i64::from(s.arity)),
        Reply::Set(s.flags.iter().map(|f| Reply::Status(f)).collect()),
        Reply::Int(i64::from(s.first_key)),
        Reply::Int(i64::from(s.last_key)),
        Reply::Int(i64::from(s.step)),
        Reply::Array(vec![]),
        Reply::Array(vec![]),
        Reply::Array(vec![]),
        Reply::Array(vec![]),
    ])
}

/// `COMMAND [COUNT | INFO name… | DOCS name… | LIST]`.
pub fn command(_: &mut Ctx<'_>, a: &[Bytes]) -> CmdResult {
    if a.len() == 1 {
        return Ok(Reply::Array(COMMANDS.iter().map(command_info).collect()));
    }
    let names = || -> Vec<Option<&'static Spec>> {
        if a.len() == 2 {
            COMMANDS.iter().map(Some).collect()
        } else {
            a[2..]
                .iter()
                .map(|n| lookup(&String::from_utf8_lossy(n).to_ascii_lowercase()))
                .collect()
        }
    };
    if is(&a[1], "count") {
        return Ok(Reply::Int(COMMANDS.len() as i64));
    }
    if is(&a[1], "list") {
        return Ok(Reply::Array(
            COMMANDS.iter().map(|s| Reply::bulk(s.name)).collect(),
        ));
    }
    if is(&a[1], "info") {
        return Ok(Reply::Array(
            names()
                .into_iter()
                .map(|s| s.map_or(Reply::Nil, command_info))
                .collect(),
        ));
    }
    if is(&a[1], "docs") {
        return Ok(Reply::Map(
            names()
                .into_iter()
                .flatten()
                .map(|s| {
                    (
                        Reply::bulk(s.name),
                        Reply::Map(vec![
                            (Reply::bulk("summary"), Reply::bulk("")),
                            (Reply::bulk("since"), Reply::bulk("1.0.0")),
                            (Reply::bulk("group"), Reply::bulk("generic")),
                        ]),
                    )
                })
                .collect(),
        ));
    }
    Err(Reply::err(format!(
        "unknown subcommand '{}'. Try COMMAND HELP.",
        String::from_utf8_lossy(&a[1])
    )))
}
