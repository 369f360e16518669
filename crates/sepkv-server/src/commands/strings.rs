//! String commands.
//!
//! A string's bytes are the payload of its key record (see
//! [`crate::keys`]); every command that changes one runs as one
//! [`crate::keyspace::Txn`].

use crate::command::{
    arity_error, int_arg, is, not_integer, parse_i64, syntax_error, CmdResult, Ctx,
};
use crate::keys::{MAX_STRING, TYPE_STRING};
use crate::keyspace::{now_ms, Txn, Value};
use crate::resp::Reply;
use bytes::Bytes;

/// `WRONGTYPE …`.
pub fn wrongtype() -> Reply {
    Reply::Error("WRONGTYPE Operation against a key holding the wrong kind of value".into())
}

/// The error for a string over sepkv's value limit.
pub fn too_long(len: u64) -> Reply {
    Reply::err(format!(
        "string of {len} bytes exceeds sepkv's value limit of {MAX_STRING} bytes"
    ))
}

fn check_len(len: usize) -> Result<(), Reply> {
    if len > MAX_STRING {
        Err(too_long(len as u64))
    } else {
        Ok(())
    }
}

/// The string at `key` (a read without the writer lock).
fn read(ctx: &mut Ctx<'_>, key: &[u8]) -> Result<Option<Value>, Reply> {
    match ctx.get(key, now_ms())? {
        Some(v) if v.kind != TYPE_STRING => Err(wrongtype()),
        v => Ok(v),
    }
}

/// The string at `key` inside a transaction.
fn tread(t: &mut Txn<'_>, key: &[u8], now: u64) -> Result<Option<Value>, Reply> {
    match t.get(key, now)? {
        Some(v) if v.kind != TYPE_STRING => Err(wrongtype()),
        v => Ok(v),
    }
}

/// Sets `key` to `payload`, deleting it when `expire` has already passed.
fn put(t: &mut Txn<'_>, key: &[u8], payload: Vec<u8>, expire: u64, now: u64) -> Result<(), Reply> {
    check_len(payload.len())?;
    if expire != 0 && expire <= now {
        t.del(key, now)?;
    } else {
        t.set(key, Value::string(payload, expire), now)?;
    }
    Ok(())
}

/// `GET key`.
pub fn get(ctx: &mut Ctx<'_>, a: &[Bytes]) -> CmdResult {
    Ok(Reply::opt_bulk(read(ctx, &a[1])?.map(|v| v.payload)))
}

/// `STRLEN key`.
pub fn strlen(ctx: &mut Ctx<'_>, a: &[Bytes]) -> CmdResult {
    Ok(Reply::Int(
        read(ctx, &a[1])?.map_or(0, |v| v.payload.len() as i64),
    ))
}

/// `MGET key…` (a key of another type reads as nil).
pub fn mget(ctx: &mut Ctx<'_>, a: &[Bytes]) -> CmdResult {
    let now = now_ms();
    let mut out = Vec::with_capacity(a.len() - 1);
    for k in &a[1..] {
        let v = ctx.get(k, now)?;
        out.push(Reply::opt_bulk(
            v.filter(|v| v.kind == TYPE_STRING).map(|v| v.payload),
        ));
    }
    Ok(Reply::Array(out))
}

/// `GETRANGE key start end`.
pub fn getrange(ctx: &mut Ctx<'_>, a: &[Bytes]) -> CmdResult {
    let mut start = int_arg(&a[2])?;
    let mut end = int_arg(&a[3])?;
    let v = read(ctx, &a[1])?.map(|v| v.payload).unwrap_or_default();
    let len = v.len() as i64;
    if start < 0 && end < 0 && start > end {
        return Ok(Reply::bulk(""));
    }
    if start < 0 {
        start += len;
    }
    if end < 0 {
        end += len;
    }
    start = start.max(0);
    end = end.max(0);
    if end >= len {
        end = len - 1;
    }
    if start > end || len == 0 {
        return Ok(Reply::bulk(""));
    }
    Ok(Reply::bulk(v[start as usize..=end as usize].to_vec()))
}

/// How a `SET`/`GETEX` expiry argument is given.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Unit {
    Ex,
    Px,
    ExAt,
    PxAt,
}

/// Converts an expiry argument to absolute Unix ms, as Redis does
/// (`invalid expire time in '<cmd>' command` for non-positive or
/// overflowing ones).
fn expire_ms(arg: &[u8], unit: Unit, cmd: &str, now: u64) -> Result<u64, Reply> {
    let v = int_arg(arg)?;
    let bad = || Reply::err(format!("invalid expire time in '{cmd}' command"));
    let secs = matches!(unit, Unit::Ex | Unit::ExAt);
    if v <= 0 || (secs && v > i64::MAX / 1000) {
        return Err(bad());
    }
    let mut ms = if secs { v * 1000 } else { v };
    if matches!(unit, Unit::Ex | Unit::Px) {
        if ms > i64::MAX - now as i64 {
            return Err(bad());
        }
        ms += now as i64;
    }
    Ok(ms as u64)
}

/// Options of `SET` and `GETEX`.
#[derive(Default)]
struct SetOpts<'a> {
    nx: bool,
    xx: bool,
    get: bool,
    keepttl: bool,
    persist: bool,
    expire: Option<(Unit, &'a [u8])>,
}

fn parse_opts<'a>(a: &'a [Bytes], from: usize, set: bool) -> Result<SetOpts<'a>, Reply> {
    let mut o = SetOpts::default();
    let mut j = from;
    while j < a.len() {
        let arg = &a[j][..];
        let next = a.get(j + 1).map(|b| &b[..]);
        let other_expire = |o: &SetOpts<'_>, u: Unit| o.expire.is_some_and(|(x, _)| x != u);
        if set && is(arg, "nx") && !o.xx {
            o.nx = true;
        } else if set && is(arg, "xx") && !o.nx {
            o.xx = true;
        } else if set && is(arg, "get") {
            o.get = true;
        } else if set && is(arg, "keepttl") && !o.persist && o.expire.is_none() {
            o.keepttl = true;
        } else if !set && is(arg, "persist") && o.expire.is_none() && !o.keepttl {
            o.persist = true;
        } else if let (Some(u), Some(n)) = (
            [
                ("ex", Unit::Ex),
                ("px", Unit::Px),
                ("exat", Unit::ExAt),
                ("pxat", Unit::PxAt),
            ]
            .iter()
            .find(|(w, _)| is(arg, w))
            .map(|&(_, u)| u),
            next,
        ) {
            if o.keepttl || o.persist || other_expire(&o, u) {
                return Err(syntax_error());
            }
            o.expire = Some((u, n));
            j += 1;
        } else {
            return Err(syntax_error());
        }
        j += 1;
    }
    Ok(o)
}

/// The common part of SET, SETEX and PSETEX.
fn set_generic(t: &mut Txn<'_>, cmd: &str, key: &[u8], val: &[u8], o: SetOpts<'_>) -> CmdResult {
    let now = now_ms();
    let expire = match o.expire {
        Some((u, arg)) => Some(expire_ms(arg, u, cmd, now)?),
        None => None,
    };
    check_len(val.len())?;
    let old = t.get(key, now)?;
    if o.get && old.as_ref().is_some_and(|v| v.kind != TYPE_STRING) {
        return Err(wrongtype());
    }
    let found = old.is_some();
    let old_reply = || Reply::opt_bulk(old.clone().map(|v| v.payload));
    if (o.nx && found) || (o.xx && !found) {
        return Ok(if o.get { old_reply() } else { Reply::Nil });
    }
    let keep = if o.keepttl {
        old.as_ref().map_or(0, |v| v.expire)
    } else {
        0
    };
    put(t, key, val.to_vec(), expire.unwrap_or(keep), now)?;
    Ok(if o.get { old_reply() } else { Reply::OK })
}

/// `SET key value [NX|XX] [GET] [EX s|PX ms|EXAT s|PXAT ms|KEEPTTL]`.
pub fn set(t: &mut Txn<'_>, a: &[Bytes]) -> CmdResult {
    let o = parse_opts(a, 3, true)?;
    set_generic(t, "set", &a[1], &a[2], o)
}

/// `SETEX key seconds value`.
pub fn setex(t: &mut Txn<'_>, a: &[Bytes]) -> CmdResult {
    let o = SetOpts {
        expire: Some((Unit::Ex, &a[2][..])),
        ..SetOpts::default()
    };
    set_generic(t, "setex", &a[1], &a[3], o)
}

/// `PSETEX key milliseconds value`.
pub fn psetex(t: &mut Txn<'_>, a: &[Bytes]) -> CmdResult {
    let o = SetOpts {
        expire: Some((Unit::Px, &a[2][..])),
        ..SetOpts::default()
    };
    set_generic(t, "psetex", &a[1], &a[3], o)
}

/// `SETNX key value`.
pub fn setnx(t: &mut Txn<'_>, a: &[Bytes]) -> CmdResult {
    let o = SetOpts {
        nx: true,
        ..SetOpts::default()
    };
    match set_generic(t, "setnx", &a[1], &a[2], o)? {
        Reply::Nil => Ok(Reply::Int(0)),
        _ => Ok(Reply::Int(1)),
    }
}

/// `GETSET key value`.
pub fn getset(t: &mut Txn<'_>, a: &[Bytes]) -> CmdResult {
    let o = SetOpts {
        get: true,
        ..SetOpts::default()
    };
    set_generic(t, "getset", &a[1], &a[2], o)
}

/// `GETDEL key`.
pub fn getdel(t: &mut Txn<'_>, a: &[Bytes]) -> CmdResult {
    let now = now_ms();
    let v = tread(t, &a[1], now)?;
    if v.is_some() {
        t.del(&a[1], now)?;
    }
    Ok(Reply::opt_bulk(v.map(|v| v.payload)))
}

/// `GETEX key [EX s|PX ms|EXAT s|PXAT ms|PERSIST]`.
pub fn getex(t: &mut Txn<'_>, a: &[Bytes]) -> CmdResult {
    let o = parse_opts(a, 2, false)?;
    if o.expire.is_none() && !o.persist {
        return Ok(Reply::opt_bulk(
            tread(t, &a[1], now_ms())?.map(|v| v.payload),
        ));
    }
    let now = now_ms();
    let Some(v) = tread(t, &a[1], now)? else {
        return Ok(Reply::Nil);
    };
    // Redis looks the key up before it checks the expiry argument.
    let expire = match o.expire {
        Some((u, arg)) => Some(expire_ms(arg, u, "getex", now)?),
        None => None,
    };
    let payload = v.payload.clone();
    match expire {
        Some(e) => put(t, &a[1], v.payload, e, now)?,
        None if v.expire != 0 => put(t, &a[1], v.payload, 0, now)?,
        None => {}
    }
    Ok(Reply::bulk(payload))
}

/// `MSET key value [key value …]`.
pub fn mset(t: &mut Txn<'_>, a: &[Bytes]) -> CmdResult {
    if a.len().is_multiple_of(2) {
        return Err(arity_error("mset"));
    }
    for p in a[1..].chunks(2) {
        check_len(p[1].len())?;
    }
    let now = now_ms();
    for p in a[1..].chunks(2) {
        put(t, &p[0], p[1].to_vec(), 0, now)?;
    }
    Ok(Reply::OK)
}

/// `MSETNX key value [key value …]`.
pub fn msetnx(t: &mut Txn<'_>, a: &[Bytes]) -> CmdResult {
    if a.len().is_multiple_of(2) {
        return Err(arity_error("msetnx"));
    }
    for p in a[1..].chunks(2) {
        check_len(p[1].len())?;
    }
    let now = now_ms();
    for p in a[1..].chunks(2) {
        if t.get(&p[0], now)?.is_some() {
            return Ok(Reply::Int(0));
        }
    }
    for p in a[1..].chunks(2) {
        put(t, &p[0], p[1].to_vec(), 0, now)?;
    }
    Ok(Reply::Int(1))
}

fn incr_by(t: &mut Txn<'_>, key: &[u8], by: i64) -> CmdResult {
    let now = now_ms();
    let old = tread(t, key, now)?;
    let (cur, expire) = match &old {
        Some(v) => (parse_i64(&v.payload).ok_or_else(not_integer)?, v.expire),
        None => (0, 0),
    };
    let new = cur
        .checked_add(by)
        .ok_or_else(|| Reply::err("increment or decrement would overflow"))?;
    put(t, key, new.to_string().into_bytes(), expire, now)?;
    Ok(Reply::Int(new))
}

/// `INCR key`.
pub fn incr(t: &mut Txn<'_>, a: &[Bytes]) -> CmdResult {
    incr_by(t, &a[1], 1)
}

/// `DECR key`.
pub fn decr(t: &mut Txn<'_>, a: &[Bytes]) -> CmdResult {
    incr_by(t, &a[1], -1)
}

/// `INCRBY key n`.
pub fn incrby(t: &mut Txn<'_>, a: &[Bytes]) -> CmdResult {
    let by = int_arg(&a[2])?;
    incr_by(t, &a[1], by)
}

/// `DECRBY key n`.
pub fn decrby(t: &mut Txn<'_>, a: &[Bytes]) -> CmdResult {
    let by = int_arg(&a[2])?;
    if by == i64::MIN {
        return Err(Reply::err("decrement would overflow"));
    }
    incr_by(t, &a[1], -by)
}

/// Parses a float as Redis's `string2ld` accepts it: no leading blank,
/// nothing after the number, not NaN.
pub(crate) fn parse_float(b: &[u8]) -> Option<f64> {
    let s = std::str::from_utf8(b).ok()?;
    if s.is_empty() || s.len() > 5 * 1024 || s.starts_with(|c: char| c.is_ascii_whitespace()) {
        return None;
    }
    let lower = s.to_ascii_lowercase();
    let t = lower.trim_start_matches(['+', '-']);
    if t.starts_with("nan") {
        return None;
    }
    s.parse::<f64>().ok().filter(|v| !v.is_nan())
}

/// Formats a float as Redis's `INCRBYFLOAT` does (17 fractional digits,
/// trailing zeros dropped, no exponent). Redis computes in `long double`;
/// in `f64` a sum such as `0.1 + 0.2` carries an error in its 17th
/// digit that `long double` rounds away, so a result within a few units
/// in the last place of a 15-digit number is written as that number.
pub fn format_float(x: f64) -> String {
    let short = format!("{x}");
    let digits = short.bytes().filter(u8::is_ascii_digit).count();
    if digits > 15 && x.is_finite() && x != 0.0 {
        if let Ok(y) = format!("{x:.14e}").parse::<f64>() {
            let ulp = f64::from_bits(x.abs().to_bits() + 1) - x.abs();
            if (y - x).abs() <= 4.0 * ulp {
                return format!("{y}");
            }
        }
    }
    short
}

/// `INCRBYFLOAT key increment`.
pub fn incrbyfloat(t: &mut Txn<'_>, a: &[Bytes]) -> CmdResult {
    let not_float = || Reply::err("value is not a valid float");
    let by = parse_float(&a[2]).ok_or_else(not_float)?;
    let now = now_ms();
    let old = tread(t, &a[1], now)?;
    let (cur, expire) = match &old {
        Some(v) => (parse_float(&v.payload).ok_or_else(not_float)?, v.expire),
        None => (0.0, 0),
    };
    let new = cur + by;
    if !new.is_finite() {
        return Err(Reply::err("increment would produce NaN or Infinity"));
    }
    let s = format_float(new);
    put(t, &a[1], s.clone().into_bytes(), expire, now)?;
    Ok(Reply::bulk(s))
}

/// `APPEND key value`.
pub fn append(t: &mut Txn<'_>, a: &[Bytes]) -> CmdResult {
    let now = now_ms();
    let (mut v, expire) = match tread(t, &a[1], now)? {
        Some(v) => (v.payload, v.expire),
        None => (Vec::new(), 0),
    };
    check_len(v.len() + a[2].len())?;
    v.extend_from_slice(&a[2]);
    let n = v.len() as i64;
    put(t, &a[1], v, expire, now)?;
    Ok(Reply::Int(n))
}

/// `SETRANGE key offset value`.
pub fn setrange(t: &mut Txn<'_>, a: &[Bytes]) -> CmdResult {
    let off = int_arg(&a[2])?;
    if off < 0 {
        return Err(Reply::err("offset is out of range"));
    }
    let val = &a[3];
    let now = now_ms();
    let old = tread(t, &a[1], now)?;
    if val.is_empty() {
        let n = old.map_or(0, |v| v.payload.len() as i64);
        return Ok(Reply::Int(n));
    }
    let end = off as u64 + val.len() as u64;
    if end > MAX_STRING as u64 {
        return Err(too_long(end));
    }
    let (mut v, expire) = old.map_or((Vec::new(), 0), |v| (v.payload, v.expire));
    let (off, end) = (off as usize, end as usize);
    if v.len() < end {
        v.resize(end, 0);
    }
    v[off..end].copy_from_slice(val);
    let n = v.len() as i64;
    put(t, &a[1], v, expire, now)?;
    Ok(Reply::Int(n))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_as_redis_prints_them() {
        assert_eq!(format_float(10.5 + 0.1), "10.6");
        assert_eq!(format_float(0.1 + 0.2), "0.3");
        assert_eq!(format_float(3.0), "3");
        assert_eq!(format_float(-2.5), "-2.5");
        assert_eq!(format_float(1e20), "100000000000000000000");
        assert_eq!(parse_float(b" 1"), None);
        assert_eq!(parse_float(b"1.5"), Some(1.5));
        assert_eq!(parse_float(b"nan"), None);
    }
}
