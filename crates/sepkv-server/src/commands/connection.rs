//! Connection commands: PING, ECHO, HELLO, AUTH, SELECT, QUIT, RESET,
//! CLIENT.

use crate::command::{arity_error, int_arg, is, syntax_error, CmdResult, Ctx};
use crate::resp::Reply;
use bytes::Bytes;
use std::fmt::Write;

/// The Redis version the server answers as.
pub const REDIS_VERSION: &str = "7.0.15";

/// `PING [message]`.
pub fn ping(_: &mut Ctx<'_>, a: &[Bytes]) -> CmdResult {
    match a.len() {
        1 => Ok(Reply::Status("PONG")),
        2 => Ok(Reply::Bulk(a[1].clone())),
        _ => Err(arity_error("ping")),
    }
}

/// `ECHO message`.
pub fn echo(_: &mut Ctx<'_>, a: &[Bytes]) -> CmdResult {
    Ok(Reply::Bulk(a[1].clone()))
}

/// Checks a password: `Ok(())`, or the Redis error.
fn check_pass(ctx: &mut Ctx<'_>, user: Option<&[u8]>, pass: &[u8]) -> Result<(), Reply> {
    let Some(want) = &ctx.shared.config.requirepass else {
        if user.is_none() {
            return Err(Reply::err(
                "AUTH <password> called without any password configured for the default user. \
                 Are you sure your configuration is correct?",
            ));
        }
        // Without a password, the default user accepts any.
        if user == Some(b"default") {
            ctx.client.authenticated = true;
            return Ok(());
        }
        return Err(wrongpass());
    };
    if user.unwrap_or(b"default") == b"default" && pass == want.as_bytes() {
        ctx.client.authenticated = true;
        Ok(())
    } else {
        Err(wrongpass())
    }
}

fn wrongpass() -> Reply {
    Reply::Error("WRONGPASS invalid username-password pair or user is disabled.".into())
}

/// `AUTH [user] password`.
pub fn auth(ctx: &mut Ctx<'_>, a: &[Bytes]) -> CmdResult {
    match a.len() {
        2 => check_pass(ctx, None, &a[1])?,
        3 => check_pass(ctx, Some(&a[1]), &a[2])?,
        _ => return Err(syntax_error()),
    }
    Ok(Reply::OK)
}

fn valid_name(n: &[u8]) -> bool {
    n.iter().all(|&c| (b'!'..=b'~').contains(&c))
}

/// `HELLO [protover [AUTH user pass] [SETNAME name]]`.
pub fn hello(ctx: &mut Ctx<'_>, a: &[Bytes]) -> CmdResult {
    let mut proto = ctx.client.proto;
    let mut i = 1;
    if a.len() > 1 {
        let v = int_arg(&a[1])
            .map_err(|_| Reply::err("Protocol version is not an integer or out of range"))?;
        if !(2..=3).contains(&v) {
            return Err(Reply::Error("NOPROTO unsupported protocol version".into()));
        }
        proto = v as u8;
        i = 2;
    }
    let mut name = None;
    let mut creds = None;
    while i < a.len() {
        let more = a.len() - i - 1;
        if is(&a[i], "auth") && more >= 2 {
            creds = Some((a[i + 1].clone(), a[i + 2].clone()));
            i += 3;
        } else if is(&a[i], "setname") && more >= 1 {
            name = Some(a[i + 1].clone());
            i += 2;
        } else {
            return Err(Reply::err(format!(
                "Syntax error in HELLO option '{}'",
                String::from_utf8_lossy(&a[i])
            )));
        }
    }
    if let Some((u, p)) = creds {
        check_pass(ctx, Some(&u), &p)?;
    }
    if !ctx.client.authenticated {
        return Err(Reply::Error(
            "NOAUTH HELLO must be called with the client already authenticated, otherwise the \
             HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and \
             select the RESP protocol version at the same time"
                .into(),
        ));
    }
    if let Some(n) = name {
        if !valid_name(&n) {
            return Err(Reply::err(
                "Client names cannot contain spaces, newlines or special characters.",
            ));
        }
        ctx.client.name = (!n.is_empty()).then_some(n);
    }
    ctx.client.proto = proto;
    Ok(Reply::Map(vec![
        (Reply::bulk("server"), Reply::bulk("redis")),
        (Reply::bulk("version"), Reply::bulk(REDIS_VERSION)),
        (Reply::bulk("proto"), Reply::Int(i64::from(proto))),
        (Reply::bulk("id"), Reply::Int(ctx.client.id as i64)),
        (Reply::bulk("mode"), Reply::bulk("standalone")),
        (Reply::bulk("role"), Reply::bulk("master")),
        (Reply::bulk("modules"), Reply::Array(vec![])),
    ]))
}

/// `SELECT index`: only database 0 exists.
pub fn select(_: &mut Ctx<'_>, a: &[Bytes]) -> CmdResult {
    match int_arg(&a[1]).map_err(|_| Reply::err("value is not an integer or out of range"))? {
        0 => Ok(Reply::OK),
        _ => Err(Reply::err("DB index is out of range")),
    }
}

/// `QUIT`: replies OK and closes the connection.
pub fn quit(ctx: &mut Ctx<'_>, _: &[Bytes]) -> CmdResult {
    ctx.client.close = true;
    Ok(Reply::OK)
}

/// `RESET`: back to RESP2, no name, unauthenticated when a password is
/// required.
pub fn reset(ctx: &mut Ctx<'_>, _: &[Bytes]) -> CmdResult {
    ctx.client.proto = 2;
    ctx.client.name = None;
    ctx.client.tx.reset(ctx.shared);
    ctx.client.authenticated = ctx.shared.config.requirepass.is_none();
    Ok(Reply::Status("RESET"))
}

/// `CLIENT ID|SETNAME|GETNAME|LIST|SETINFO|INFO`.
pub fn client(ctx: &mut Ctx<'_>, a: &[Bytes]) -> CmdResult {
    let sub = String::from_utf8_lossy(&a[1]).to_ascii_lowercase();
    let want = |n: usize| {
        if a.len() == n {
            Ok(())
        } else {
            Err(arity_error(&format!("client|{sub}")))
        }
    };
    match sub.as_str() {
        "id" => {
            want(2)?;
            Ok(Reply::Int(ctx.client.id as i64))
        }
        "getname" => {
            want(2)?;
            Ok(Reply::opt_bulk(ctx.client.name.clone()))
        }
        "setname" => {
            want(3)?;
            if !valid_name(&a[2]) {
                return Err(Reply::err(
                    "Client names cannot contain spaces, newlines or special characters.",
                ));
            }
            ctx.client.name = (!a[2].is_empty()).then(|| a[2].clone());
            Ok(Reply::OK)
        }
        "setinfo" => {
            want(4)?;
            if !is(&a[2], "lib-name") && !is(&a[2], "lib-ver") {
                return Err(Reply::err(format!(
                    "Unrecognized option '{}'",
                    String::from_utf8_lossy(&a[2])
                )));
            }
            Ok(Reply::OK)
        }
        "list" | "info" => {
            ctx.client.publish();
            let clients: Vec<_> = {
                let map = ctx.shared.clients.lock().unwrap_or_else(|p| p.into_inner());
                let mut v: Vec<_> = map.values().cloned().collect();
                v.sort_by_key(|c| c.id);
                v
            };
            let mut out = String::new();
            for c in clients {
                if sub == "info" && c.id != ctx.client.id {
                    continue;
                }
                let l = c.live.lock().unwrap_or_else(|p| p.into_inner()).clone();
                let _ = writeln!(
                    out,
                    "id={} addr={} laddr={} fd=0 name={} age={} idle={} flags=N db=0 sub=0 psub=0 \
                     ssub=0 multi=-1 qbuf=0 qbuf-free=0 argv-mem=0 multi-mem=0 obl=0 oll=0 omem=0 \
                     tot-mem=0 events=r cmd={} user=default redir=-1 resp={}",
                    c.id,
                    c.addr,
                    c.laddr,
                    String::from_utf8_lossy(l.name.as_deref().unwrap_or_default()),
                    c.created.elapsed().as_secs(),
                    l.last_active.elapsed().as_secs(),
                    l.last_command,
                    l.proto
                );
            }
            if sub == "info" {
                return Ok(Reply::Verbatim(out));
            }
            Ok(Reply::Verbatim(out))
        }
        _ => Err(Reply::err(format!(
            "unknown subcommand '{}'. Try CLIENT HELP.",
            String::from_utf8_lossy(&a[1])
        ))),
    }
}
