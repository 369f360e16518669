//! Command dispatch: the command table (name, arity, flags, key
//! positions), the checks every command gets (authentication, arity, key
//! size), and the context a command runs in.
//!
//! A command is a plain function from its arguments to a [`Reply`]; it
//! runs on the connection's task, reading the keyspace without a lock and
//! writing through one [`crate::keyspace::Txn`].

use crate::cluster::commands as cluster;
use crate::commands::{connection, hashes, keyspace as keycmds, server, strings};
use crate::keys::MAX_USER_KEY;
use crate::keyspace::{Reader, Txn, Value};
use crate::multi;
use crate::resp::Reply;
use crate::state::{ClientState, Shared};
use bytes::Bytes;

/// What a command returns: its reply, or an error reply to send instead.
pub type CmdResult = Result<Reply, Reply>;

/// The context of one command.
pub struct Ctx<'a> {
    /// State shared by every connection.
    pub shared: &'a Shared,
    /// This connection's state.
    pub client: &'a mut ClientState,
    /// Inside `EXEC`: the transaction that reads go through (they see its
    /// writes), `None` otherwise.
    pub txn: Option<&'a mut dyn Reader>,
}

impl<'a> Ctx<'a> {
    /// A context outside `EXEC`.
    pub fn new(shared: &'a Shared, client: &'a mut ClientState) -> Ctx<'a> {
        Ctx {
            shared,
            client,
            txn: None,
        }
    }

    /// Runs `f` on the keyspace as this command sees it.
    pub fn read<R>(&mut self, f: impl FnOnce(&mut dyn Reader) -> R) -> R {
        match self.txn.as_deref_mut() {
            Some(t) => f(t),
            None => f(&mut self.shared.ks.reader()),
        }
    }

    /// The live value of `key` as this command sees it.
    ///
    /// # Errors
    /// Engine errors.
    pub fn get(&mut self, key: &[u8], now: u64) -> Result<Option<Value>, sepkv::Error> {
        self.read(|r| r.get(key, now))
    }
}

/// How a command runs.
#[derive(Clone, Copy)]
pub enum Handler {
    /// On the connection's task (reads, connection and server commands).
    Read(fn(&mut Ctx<'_>, &[Bytes]) -> CmdResult),
    /// In the writer's transaction ([`crate::writer`]).
    Write(fn(&mut Txn<'_>, &[Bytes]) -> CmdResult),
}

/// One entry of the command table (as `COMMAND INFO` reports it).
pub struct Spec {
    /// Lower-case name.
    pub name: &'static str,
    /// Redis arity: `n` exactly n arguments (the name included), `-n` at
    /// least n.
    pub arity: i32,
    /// Redis command flags.
    pub flags: &'static [&'static str],
    /// Position of the first key (0 for none).
    pub first_key: i32,
    /// Position of the last key (-1: the last argument).
    pub last_key: i32,
    /// Step between keys.
    pub step: i32,
    /// The implementation.
    pub handler: Handler,
}

const W: &[&str] = &["write", "denyoom"];
const R: &[&str] = &["readonly", "fast"];
const WF: &[&str] = &["write", "denyoom", "fast"];
const CONN: &[&str] = &["fast", "loading", "stale"];
const TX: &[&str] = &["noscript", "loading", "stale", "fast", "allow_busy"];
const NOAUTH: &[&str] = &["noscript", "loading", "stale", "fast", "no_auth"];

macro_rules! spec {
    ($name:literal, $arity:expr, $flags:expr, $f:expr, $l:expr, $s:expr, $h:expr) => {
        Spec {
            name: $name,
            arity: $arity,
            flags: $flags,
            first_key: $f,
            last_key: $l,
            step: $s,
            handler: $h,
        }
    };
}

/// Every command the server knows, in alphabetical order.
pub static COMMANDS: &[Spec] = &[
    spec!("append", 3, WF, 1, 1, 1, Handler::Write(strings::append)),
    spec!("asking", 1, CONN, 0, 0, 0, Handler::Read(cluster::asking)),
    spec!("auth", -2, NOAUTH, 0, 0, 0, Handler::Read(connection::auth)),
    spec!(
        "client",
        -2,
        &["loading", "stale"],
        0,
        0,
        0,
        Handler::Read(connection::client)
    ),
    spec!(
        "cluster",
        -2,
        &["admin", "stale"],
        0,
        0,
        0,
        Handler::Read(cluster::cluster)
    ),
    spec!(
        "command",
        -1,
        &["loading", "stale"],
        0,
        0,
        0,
        Handler::Read(server::command)
    ),
    spec!(
        "config",
        -2,
        &["admin", "loading", "stale"],
        0,
        0,
        0,
        Handler::Read(server::config)
    ),
    spec!("dbsize", 1, R, 0, 0, 0, Handler::Read(server::dbsize)),
    spec!("decr", 2, WF, 1, 1, 1, Handler::Write(strings::decr)),
    spec!("decrby", 3, WF, 1, 1, 1, Handler::Write(strings::decrby)),
    spec!(
        "del",
        -2,
        &["write"],
        1,
        -1,
        1,
        Handler::Write(keycmds::del)
    ),
    spec!("discard", 1, TX, 0, 0, 0, Handler::Read(multi::discard)),
    spec!("echo", 2, CONN, 0, 0, 0, Handler::Read(connection::echo)),
    spec!(
        "exec",
        1,
        &["noscript", "loading", "stale", "skip_slowlog"],
        0,
        0,
        0,
        Handler::Read(multi::exec)
    ),
    spec!("exists", -2, R, 1, -1, 1, Handler::Read(keycmds::exists)),
    spec!("expire", -3, WF, 1, 1, 1, Handler::Write(keycmds::expire)),
    spec!(
        "expireat",
        -3,
        WF,
        1,
        1,
        1,
        Handler::Write(keycmds::expireat)
    ),
    spec!(
        "expiretime",
        2,
        R,
        1,
        1,
        1,
        Handler::Read(keycmds::expiretime)
    ),
    spec!(
        "flushall",
        -1,
        &["write"],
        0,
        0,
        0,
        Handler::Write(server::flushall)
    ),
    spec!(
        "flushdb",
        -1,
        &["write"],
        0,
        0,
        0,
        Handler::Write(server::flushdb)
    ),
    spec!("get", 2, R, 1, 1, 1, Handler::Read(strings::get)),
    spec!("getdel", 2, WF, 1, 1, 1, Handler::Write(strings::getdel)),
    spec!("getex", -2, WF, 1, 1, 1, Handler::Write(strings::getex)),
    spec!(
        "getrange",
        4,
        &["readonly"],
        1,
        1,
        1,
        Handler::Read(strings::getrange)
    ),
    spec!("getset", 3, WF, 1, 1, 1, Handler::Write(strings::getset)),
    spec!("hdel", -3, WF, 1, 1, 1, Handler::Write(hashes::hdel)),
    spec!(
        "hello",
        -1,
        NOAUTH,
        0,
        0,
        0,
        Handler::Read(connection::hello)
    ),
    spec!("hexists", 3, R, 1, 1, 1, Handler::Read(hashes::hexists)),
    spec!("hget", 3, R, 1, 1, 1, Handler::Read(hashes::hget)),
    spec!(
        "hgetall",
        2,
        &["readonly"],
        1,
        1,
        1,
        Handler::Read(hashes::hgetall)
    ),
    spec!("hincrby", 4, WF, 1, 1, 1, Handler::Write(hashes::hincrby)),
    spec!(
        "hincrbyfloat",
        4,
        WF,
        1,
        1,
        1,
        Handler::Write(hashes::hincrbyfloat)
    ),
    spec!(
        "hkeys",
        2,
        &["readonly"],
        1,
        1,
        1,
        Handler::Read(hashes::hkeys)
    ),
    spec!("hlen", 2, R, 1, 1, 1, Handler::Read(hashes::hlen)),
    spec!("hmget", -3, R, 1, 1, 1, Handler::Read(hashes::hmget)),
    spec!("hmset", -4, WF, 1, 1, 1, Handler::Write(hashes::hmset)),
    spec!(
        "hrandfield",
        -2,
        &["readonly"],
        1,
        1,
        1,
        Handler::Read(hashes::hrandfield)
    ),
    spec!(
        "hscan",
        -3,
        &["readonly"],
        1,
        1,
        1,
        Handler::Read(hashes::hscan)
    ),
    spec!("hset", -4, WF, 1, 1, 1, Handler::Write(hashes::hset)),
    spec!("hsetnx", 4, WF, 1, 1, 1, Handler::Write(hashes::hsetnx)),
    spec!("hstrlen", 3, R, 1, 1, 1, Handler::Read(hashes::hstrlen)),
    spec!(
        "hvals",
        2,
        &["readonly"],
        1,
        1,
        1,
        Handler::Read(hashes::hvals)
    ),
    spec!("incr", 2, WF, 1, 1, 1, Handler::Write(strings::incr)),
    spec!("incrby", 3, WF, 1, 1, 1, Handler::Write(strings::incrby)),
    spec!(
        "incrbyfloat",
        3,
        WF,
        1,
        1,
        1,
        Handler::Write(strings::incrbyfloat)
    ),
    spec!(
        "info",
        -1,
        &["loading", "stale"],
        0,
        0,
        0,
        Handler::Read(server::info)
    ),
    spec!(
        "keys",
        2,
        &["readonly"],
        0,
        0,
        0,
        Handler::Read(keycmds::keys)
    ),
    spec!("mget", -2, R, 1, -1, 1, Handler::Read(strings::mget)),
    spec!("mset", -3, W, 1, -1, 2, Handler::Write(strings::mset)),
    spec!("msetnx", -3, W, 1, -1, 2, Handler::Write(strings::msetnx)),
    spec!("multi", 1, TX, 0, 0, 0, Handler::Read(multi::multi)),
    spec!(
        "persist",
        2,
        &["write", "fast"],
        1,
        1,
        1,
        Handler::Write(keycmds::persist)
    ),
    spec!("pexpire", -3, WF, 1, 1, 1, Handler::Write(keycmds::pexpire)),
    spec!(
        "pexpireat",
        -3,
        WF,
        1,
        1,
        1,
        Handler::Write(keycmds::pexpireat)
    ),
    spec!(
        "pexpiretime",
        2,
        R,
        1,
        1,
        1,
        Handler::Read(keycmds::pexpiretime)
    ),
    spec!("ping", -1, CONN, 0, 0, 0, Handler::Read(connection::ping)),
    spec!("psetex", 4, W, 1, 1, 1, Handler::Write(strings::psetex)),
    spec!("pttl", 2, R, 1, 1, 1, Handler::Read(keycmds::pttl)),
    spec!("quit", -1, NOAUTH, 0, 0, 0, Handler::Read(connection::quit)),
    spec!(
        "randomkey",
        1,
        &["readonly"],
        0,
        0,
        0,
        Handler::Read(keycmds::randomkey)
    ),
    spec!(
        "readonly",
        1,
        CONN,
        0,
        0,
        0,
        Handler::Read(cluster::readonly)
    ),
    spec!(
        "readwrite",
        1,
        CONN,
        0,
        0,
        0,
        Handler::Read(cluster::readonly)
    ),
    spec!(
        "rename",
        3,
        &["write"],
        1,
        2,
        1,
        Handler::Write(keycmds::rename)
    ),
    spec!(
        "renamenx",
        3,
        &["write", "fast"],
        1,
        2,
        1,
        Handler::Write(keycmds::renamenx)
    ),
    spec!("reset", 1, CONN, 0, 0, 0, Handler::Read(connection::reset)),
    spec!(
        "scan",
        -2,
        &["readonly"],
        0,
        0,
        0,
        Handler::Read(keycmds::scan)
    ),
    spec!(
        "select",
        2,
        CONN,
        0,
        0,
        0,
        Handler::Read(connection::select)
    ),
    spec!("set", -3, W, 1, 1, 1, Handler::Write(strings::set)),
    spec!("setex", 4, W, 1, 1, 1, Handler::Write(strings::setex)),
    spec!("setnx", 3, WF, 1, 1, 1, Handler::Write(strings::setnx)),
    spec!("setrange", 4, W, 1, 1, 1, Handler::Write(strings::setrange)),
    spec!("strlen", 2, R, 1, 1, 1, Handler::Read(strings::strlen)),
    spec!(
        "substr",
        4,
        &["readonly"],
        1,
        1,
        1,
        Handler::Read(strings::getrange)
    ),
    spec!(
        "time",
        1,
        &["loading", "stale", "fast"],
        0,
        0,
        0,
        Handler::Read(server::time)
    ),
    spec!("ttl", 2, R, 1, 1, 1, Handler::Read(keycmds::ttl)),
    spec!("type", 2, R, 1, 1, 1, Handler::Read(keycmds::type_)),
    spec!("unlink", -2, WF, 1, -1, 1, Handler::Write(keycmds::del)),
    spec!("unwatch", 1, TX, 0, 0, 0, Handler::Read(multi::unwatch)),
    spec!("watch", -2, TX, 1, -1, 1, Handler::Read(multi::watch)),
];

/// The table entry of `name` (lower case).
pub fn lookup(name: &str) -> Option<&'static Spec> {
    COMMANDS
        .binary_search_by(|s| s.name.cmp(name))
        .ok()
        .map(|i| &COMMANDS[i])
}

/// `ERR wrong number of arguments for '<name>' command`.
pub fn arity_error(name: &str) -> Reply {
    Reply::err(format!("wrong number of arguments for '{name}' command"))
}

/// `ERR syntax error`.
pub fn syntax_error() -> Reply {
    Reply::err("syntax error")
}

/// `ERR value is not an integer or out of range`.
pub fn not_integer() -> Reply {
    Reply::err("value is not an integer or out of range")
}

/// An argument as Redis prints it into an error: up to its first NUL,
/// at most `max` bytes.
fn c_str(a: &[u8], max: usize) -> String {
    let end = a.iter().position(|&b| b == 0).unwrap_or(a.len()).min(max);
    String::from_utf8_lossy(&a[..end]).into_owned()
}

fn unknown_command(args: &[Bytes]) -> Reply {
    let mut msg = format!(
        "unknown command '{}', with args beginning with: ",
        c_str(&args[0], 128)
    );
    let mut room = 128usize;
    for a in &args[1..] {
        if room == 0 {
            break;
        }
        let s = c_str(a, room);
        room = room.saturating_sub(a.len());
        msg.push_str(&format!("'{s}' "));
    }
    Reply::err(msg)
}

/// Runs a write command inside the writer's transaction.
pub fn run_write(spec: &Spec, t: &mut Txn<'_>, args: &[Bytes]) -> Reply {
    match spec.handler {
        Handler::Write(h) => match h(t, args) {
            Ok(r) | Err(r) => r,
        },
        Handler::Read(_) => Reply::err("internal error: not a write command"),
    }
}

/// Runs a command that is not a write on the connection's task.
pub fn run_read(ctx: &mut Ctx<'_>, spec: &Spec, args: &[Bytes]) -> Reply {
    match spec.handler {
        Handler::Read(h) => match h(ctx, args) {
            Ok(r) | Err(r) => r,
        },
        Handler::Write(_) => Reply::err("internal error: a write command"),
    }
}

/// Whether the command runs in the writer.
pub fn is_write(spec: &Spec) -> bool {
    matches!(spec.handler, Handler::Write(_))
}

/// The checks every request gets (`args[0]` is the command name): a known
/// command, authentication, arity, key sizes. Returns the command's table
/// entry, or the error reply.
///
/// # Errors
/// The reply to send instead of running the command.
pub fn check(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Result<&'static Spec, Reply> {
    let name = String::from_utf8_lossy(&args[0]).to_ascii_lowercase();
    let Some(spec) = lookup(&name) else {
        return Err(unknown_command(args));
    };
    ctx.client.last_command = spec.name;
    if !ctx.client.authenticated && !spec.flags.contains(&"no_auth") {
        return Err(Reply::Error("NOAUTH Authentication required.".into()));
    }
    let n = args.len() as i32;
    if (spec.arity > 0 && n != spec.arity) || (spec.arity < 0 && n < -spec.arity) {
        return Err(arity_error(spec.name));
    }
    if let Some(k) = command_keys(spec, args)
        .into_iter()
        .find(|k| k.len() > MAX_USER_KEY)
    {
        return Err(Reply::err(format!(
            "key of {} bytes exceeds sepkv's key limit of {MAX_USER_KEY} bytes",
            k.len()
        )));
    }
    ctx.shared
        .stats
        .commands
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    Ok(spec)
}

/// The keys a command names, from its table entry's key positions (as
/// Redis's `COMMAND GETKEYS`): what a cluster checks for one slot, for a
/// single command or for every command of a transaction. `args[0]` is the
/// command name; arity is assumed checked.
pub fn command_keys<'a>(spec: &Spec, args: &'a [Bytes]) -> Vec<&'a Bytes> {
    if spec.first_key <= 0 {
        return Vec::new();
    }
    let n = args.len() as i32;
    let last = if spec.last_key < 0 {
        n + spec.last_key
    } else {
        spec.last_key.min(n - 1)
    };
    (spec.first_key..=last)
        .step_by(spec.step.max(1) as usize)
        .map(|i| &args[i as usize])
        .collect()
}

/// Redis's strict integer parsing (`string2ll`): optional `-`, no `+`, no
/// blanks, no leading zeros, within `i64`.
pub fn parse_i64(b: &[u8]) -> Option<i64> {
    if b.is_empty() || b.len() > 20 {
        return None;
    }
    if b == b"0" {
        return Some(0);
    }
    let (neg, digits) = match b[0] {
        b'-' => (true, &b[1..]),
        _ => (false, b),
    };
    if digits.is_empty() || !(b'1'..=b'9').contains(&digits[0]) {
        return None;
    }
    let mut v: i128 = 0;
    for &d in digits {
        if !d.is_ascii_digit() {
            return None;
        }
        v = v * 10 + i128::from(d - b'0');
        if v > i128::from(i64::MAX) + 1 {
            return None;
        }
    }
    let v = if neg { -v } else { v };
    i64::try_from(v).ok()
}

/// [`parse_i64`], or the Redis error.
pub fn int_arg(b: &[u8]) -> Result<i64, Reply> {
    parse_i64(b).ok_or_else(not_integer)
}

/// Whether `arg` is `word`, ignoring ASCII case.
pub fn is(arg: &[u8], word: &str) -> bool {
    arg.eq_ignore_ascii_case(word.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_is_sorted() {
        assert!(COMMANDS.windows(2).all(|w| w[0].name < w[1].name));
    }

    #[test]
    fn keys_of_commands() {
        let args = |s: &str| {
            s.split(' ')
                .map(|w| Bytes::from(w.to_string()))
                .collect::<Vec<_>>()
        };
        let keys = |s: &str| {
            let a = args(s);
            let spec = lookup(&String::from_utf8_lossy(&a[0])).unwrap();
            command_keys(spec, &a)
                .into_iter()
                .map(|k| String::from_utf8_lossy(k).into_owned())
                .collect::<Vec<_>>()
        };
        assert_eq!(keys("mset a 1 b 2"), ["a", "b"]);
        assert_eq!(keys("hset h f v"), ["h"]);
        assert_eq!(keys("rename x y"), ["x", "y"]);
        assert_eq!(keys("del a b c"), ["a", "b", "c"]);
        assert_eq!(keys("watch a b"), ["a", "b"]);
        assert!(keys("ping").is_empty());
        assert!(keys("exec").is_empty());
    }

    #[test]
    fn integers_as_redis() {
        assert_eq!(parse_i64(b"0"), Some(0));
        assert_eq!(parse_i64(b"-12"), Some(-12));
        assert_eq!(parse_i64(b"9223372036854775807"), Some(i64::MAX));
        assert_eq!(parse_i64(b"-9223372036854775808"), Some(i64::MIN));
        for bad in [
            &b"01"[..],
            b"+1",
            b" 1",
            b"-0",
            b"",
            b"9223372036854775808",
            b"1.0",
        ] {
            assert_eq!(parse_i64(bad), None, "{bad:?}");
        }
    }
}
