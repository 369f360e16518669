//! Generic key commands: DEL, UNLINK, EXISTS, TYPE, the EXPIRE family,
//! TTL, PTTL, EXPIRETIME, PERSIST, RENAME, RENAMENX, SCAN, KEYS,
//! RANDOMKEY.

use crate::command::{int_arg, is, syntax_error, CmdResult, Ctx};
use crate::keys::{self, glob_match, TYPE_STRING};
use crate::keyspace::{now_ms, Txn, Value};
use crate::resp::Reply;
use bytes::Bytes;
use rand::Rng;

/// The Redis type name of a value.
pub fn type_name(v: &Value) -> &'static str {
    match v.kind {
        TYPE_STRING => "string",
        keys::TYPE_HASH => "hash",
        _ => "unknown",
    }
}

/// `DEL key…` and `UNLINK key…`.
pub fn del(t: &mut Txn<'_>, a: &[Bytes]) -> CmdResult {
    let now = now_ms();
    let mut n = 0;
    for k in &a[1..] {
        n += i64::from(t.del(k, now)?);
    }
    Ok(Reply::Int(n))
}

/// `EXISTS key…` (a key named twice counts twice).
pub fn exists(ctx: &mut Ctx<'_>, a: &[Bytes]) -> CmdResult {
    let now = now_ms();
    let mut n = 0;
    for k in &a[1..] {
        n += i64::from(ctx.get(k, now)?.is_some());
    }
    Ok(Reply::Int(n))
}

/// `TYPE key`.
pub fn type_(ctx: &mut Ctx<'_>, a: &[Bytes]) -> CmdResult {
    Ok(Reply::Status(
        ctx.get(&a[1], now_ms())?.as_ref().map_or("none", type_name),
    ))
}

const NX: u8 = 1;
const XX: u8 = 2;
const GT: u8 = 4;
const LT: u8 = 8;

fn expire_generic(t: &mut Txn<'_>, a: &[Bytes], cmd: &str, secs: bool, abs: bool) -> CmdResult {
    let mut flags = 0;
    for o in &a[3..] {
        flags |= match () {
            _ if is(o, "nx") => NX,
            _ if is(o, "xx") => XX,
            _ if is(o, "gt") => GT,
            _ if is(o, "lt") => LT,
            _ => {
                return Err(Reply::err(format!(
                    "Unsupported option {}",
                    String::from_utf8_lossy(o)
                )))
            }
        };
    }
    if flags & NX != 0 && flags & (XX | GT | LT) != 0 {
        return Err(Reply::err(
            "NX and XX, GT or LT options at the same time are not compatible",
        ));
    }
    if flags & GT != 0 && flags & LT != 0 {
        return Err(Reply::err(
            "GT and LT options at the same time are not compatible",
        ));
    }
    let mut when = int_arg(&a[2])?;
    let bad = || Reply::err(format!("invalid expire time in '{cmd}' command"));
    if secs {
        if !(i64::MIN / 1000..=i64::MAX / 1000).contains(&when) {
            return Err(bad());
        }
        when *= 1000;
    }
    let now = now_ms();
    let base = if abs { 0 } else { now as i64 };
    if when > i64::MAX - base {
        return Err(bad());
    }
    when += base;
    let Some(v) = t.get(&a[1], now)? else {
        return Ok(Reply::Int(0));
    };
    let cur = if v.expire == 0 { -1 } else { v.expire as i64 };
    let refused = (flags & NX != 0 && cur != -1)
        || (flags & XX != 0 && cur == -1)
        || (flags & GT != 0 && (when <= cur || cur == -1))
        || (flags & LT != 0 && when >= cur && cur != -1);
    if refused {
        return Ok(Reply::Int(0));
    }
    if when <= now as i64 {
        t.del(&a[1], now)?;
    } else {
        t.set(
            &a[1],
            Value {
                expire: when as u64,
                ..v
            },
            now,
        )?;
    }
    Ok(Reply::Int(1))
}

/// `EXPIRE key seconds [NX|XX|GT|LT]`.
pub fn expire(t: &mut Txn<'_>, a: &[Bytes]) -> CmdResult {
    expire_generic(t, a, "expire", true, false)
}

/// `PEXPIRE key ms [NX|XX|GT|LT]`.
pub fn pexpire(t: &mut Txn<'_>, a: &[Bytes]) -> CmdResult {
    expire_generic(t, a, "pexpire", false, false)
}

/// `EXPIREAT key unix-seconds [NX|XX|GT|LT]`.
pub fn expireat(t: &mut Txn<'_>, a: &[Bytes]) -> CmdResult {
    expire_generic(t, a, "expireat", true, true)
}

/// `PEXPIREAT key unix-ms [NX|XX|GT|LT]`.
pub fn pexpireat(t: &mut Txn<'_>, a: &[Bytes]) -> CmdResult {
    expire_generic(t, a, "pexpireat", false, true)
}

/// TTL-like replies: -2 missing, -1 no TTL, else `f(expire, now)`.
fn ttl_generic(ctx: &mut Ctx<'_>, key: &[u8], f: impl Fn(u64, u64) -> i64) -> CmdResult {
    let now = now_ms();
    Ok(Reply::Int(match ctx.get(key, now)? {
        None => -2,
        Some(v) if v.expire == 0 => -1,
        Some(v) => f(v.expire, now),
    }))
}

/// `TTL key` (seconds, rounded).
pub fn ttl(ctx: &mut Ctx<'_>, a: &[Bytes]) -> CmdResult {
    ttl_generic(ctx, &a[1], |e, now| {
        ((e.saturating_sub(now) + 500) / 1000) as i64
    })
}

/// `PTTL key`.
pub fn pttl(ctx: &mut Ctx<'_>, a: &[Bytes]) -> CmdResult {
    ttl_generic(ctx, &a[1], |e, now| e.saturating_sub(now) as i64)
}

/// `EXPIRETIME key` (Unix seconds).
pub fn expiretime(ctx: &mut Ctx<'_>, a: &[Bytes]) -> CmdResult {
    ttl_generic(ctx, &a[1], |e, _| (e / 1000) as i64)
}

/// `PEXPIRETIME key` (Unix ms).
pub fn pexpiretime(ctx: &mut Ctx<'_>, a: &[Bytes]) -> CmdResult {
    ttl_generic(ctx, &a[1], |e, _| e as i64)
}

/// `PERSIST key`.
pub fn persist(t: &mut Txn<'_>, a: &[Bytes]) -> CmdResult {
    let now = now_ms();
    let n = match t.get(&a[1], now)? {
        Some(v) if v.expire != 0 => {
            t.set(&a[1], Value { expire: 0, ..v }, now)?;
            1
        }
        _ => 0,
    };
    Ok(Reply::Int(n))
}

fn rename_generic(t: &mut Txn<'_>, a: &[Bytes], nx: bool) -> CmdResult {
    let now = now_ms();
    let Some(v) = t.get(&a[1], now)? else {
        return Err(Reply::err("no such key"));
    };
    if a[1] == a[2] {
        return Ok(if nx { Reply::Int(0) } else { Reply::OK });
    }
    if nx && t.get(&a[2], now)?.is_some() {
        return Ok(Reply::Int(0));
    }
    let v = if v.kind == keys::TYPE_HASH {
        super::hashes::copy_fields(t, &a[1], &a[2], &v)?
    } else {
        v
    };
    t.del(&a[1], now)?;
    t.set(&a[2], v, now)?;
    Ok(if nx { Reply::Int(1) } else { Reply::OK })
}

/// `RENAME key newkey` (the TTL moves with the value).
pub fn rename(t: &mut Txn<'_>, a: &[Bytes]) -> CmdResult {
    rename_generic(t, a, false)
}

/// `RENAMENX key newkey`.
pub fn renamenx(t: &mut Txn<'_>, a: &[Bytes]) -> CmdResult {
    rename_generic(t, a, true)
}

/// The options of `SCAN` and `HSCAN`.
pub(crate) struct ScanOptions {
    /// `MATCH pattern`.
    pub pat: Option<Bytes>,
    /// `COUNT n` (default 10, at least 1).
    pub count: i64,
    /// `TYPE type`, lower-cased (`SCAN` only).
    pub ty: Option<String>,
}

/// A scan cursor: an unsigned decimal without a sign.
///
/// # Errors
/// `invalid cursor`.
pub(crate) fn scan_cursor(b: &[u8]) -> Result<u64, Reply> {
    std::str::from_utf8(b)
        .ok()
        .filter(|s| !s.starts_with('+'))
        .and_then(|s| s.parse::<u64>().ok())
        .ok_or_else(|| Reply::err("invalid cursor"))
}

/// Parses `[MATCH pattern] [COUNT n]` (and `[TYPE type]` when `with_type`)
/// in any order, as Redis does.
///
/// # Errors
/// A syntax error for an unknown or incomplete option or a `COUNT` below
/// 1; a non-integer `COUNT`.
pub(crate) fn scan_options(a: &[Bytes], with_type: bool) -> Result<ScanOptions, Reply> {
    let mut o = ScanOptions {
        pat: None,
        count: 10,
        ty: None,
    };
    let mut i = 0;
    while i < a.len() {
        let more = i + 1 < a.len();
        if is(&a[i], "count") && more {
            o.count = int_arg(&a[i + 1])?;
            if o.count < 1 {
                return Err(syntax_error());
            }
        } else if is(&a[i], "match") && more {
            o.pat = Some(a[i + 1].clone());
        } else if with_type && is(&a[i], "type") && more {
            o.ty = Some(String::from_utf8_lossy(&a[i + 1]).to_ascii_lowercase());
        } else {
            return Err(syntax_error());
        }
        i += 2;
    }
    Ok(o)
}

/// `SCAN cursor [MATCH pattern] [COUNT n] [TYPE type]`.
pub fn scan(ctx: &mut Ctx<'_>, a: &[Bytes]) -> CmdResult {
    let cursor = scan_cursor(&a[1])?;
    let ScanOptions { pat, count, ty } = scan_options(&a[2..], true)?;
    let from = if cursor == 0 {
        Vec::new()
    } else {
        ctx.shared
            .cursors
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .resume(cursor)
    };
    let (found, next) = ctx.read(|r| r.scan(&from, count.min(100_000) as usize, now_ms()))?;
    let keys = found
        .into_iter()
        .filter(|(k, v)| {
            pat.as_ref().is_none_or(|p| glob_match(p, k))
                && ty.as_deref().is_none_or(|t| t == type_name(v))
        })
        .map(|(k, _)| Reply::bulk(k))
        .collect();
    let next = match next {
        Some(k) => ctx
            .shared
            .cursors
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .save(k),
        None => 0,
    };
    Ok(Reply::Array(vec![
        Reply::bulk(next.to_string()),
        Reply::Array(keys),
    ]))
}

/// `KEYS pattern` (reads the whole key space).
pub fn keys(ctx: &mut Ctx<'_>, a: &[Bytes]) -> CmdResult {
    let now = now_ms();
    let mut out = Vec::new();
    let mut from = Vec::new();
    loop {
        let (found, next) = ctx.read(|r| r.scan(&from, 1024, now))?;
        out.extend(
            found
                .into_iter()
                .filter(|(k, _)| glob_match(&a[1], k))
                .map(|(k, _)| Reply::bulk(k)),
        );
        match next {
            Some(k) => from = k,
            None => return Ok(Reply::Array(out)),
        }
    }
}

/// `RANDOMKEY`: the first live key at or after a random slot (wrapping).
pub fn randomkey(ctx: &mut Ctx<'_>, _: &[Bytes]) -> CmdResult {
    if ctx.read(|r| r.dbsize()) == 0 {
        return Ok(Reply::Nil);
    }
    let now = now_ms();
    let slot: u16 = rand::thread_rng().gen_range(0..keys::SLOTS);
    for start in [slot.to_be_bytes().to_vec(), Vec::new()] {
        let mut from = start;
        // Bounded: a key space of expired keys ends in nil.
        for _ in 0..64 {
            let (found, next) = ctx.read(|r| r.scan(&from, 64, now))?;
            if let Some((k, _)) = found.into_iter().next() {
                return Ok(Reply::bulk(k));
            }
            match next {
                Some(k) => from = k,
                None => break,
            }
        }
    }
    Ok(Reply::Nil)
}
