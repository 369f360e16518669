//! Hash commands: HSET, HMSET, HSETNX, HGET, HMGET, HDEL, HEXISTS, HLEN,
//! HSTRLEN, HGETALL, HKEYS, HVALS, HINCRBY, HINCRBYFLOAT, HSCAN,
//! HRANDFIELD.
//!
//! A hash is its key record (type, expiry, version, field count) plus one
//! engine record per field under the key and the version (see
//! [`crate::keys`]). Reads go through a [`Reader`], so the same code
//! answers alone and inside `EXEC`; writes run in the writer's
//! [`Txn`] and keep the field count in the key record, so `HLEN` is one
//! read and `DEL` of any hash writes one record.

use super::keyspace::{scan_cursor, scan_options, ScanOptions};
use super::strings::{format_float, parse_float, wrongtype};
use crate::command::{arity_error, int_arg, is, parse_i64, syntax_error, CmdResult, Ctx};
use crate::keys::{self, glob_match, TYPE_HASH};
use crate::keyspace::{now_ms, Fields, Reader, Txn, Value};
use crate::resp::Reply;
use bytes::Bytes;
use rand::Rng;

/// A live hash's key record.
#[derive(Debug, Clone, Copy)]
struct Hash {
    version: u64,
    count: u64,
    expire: u64,
}

/// The hash at `key`: `None` when absent, WRONGTYPE for another type.
fn hash_at(r: &mut dyn Reader, key: &[u8], now: u64) -> Result<Option<Hash>, Reply> {
    match r.get(key, now)? {
        None => Ok(None),
        Some(v) if v.kind != TYPE_HASH => Err(wrongtype()),
        Some(v) => {
            let (version, count) = keys::parse_hash_payload(&v.payload)
                .ok_or_else(|| Reply::err("the hash's key record is malformed"))?;
            Ok(Some(Hash {
                version,
                count,
                expire: v.expire,
            }))
        }
    }
}

/// Every field of `h`, in field order.
fn all_fields(r: &mut dyn Reader, key: &[u8], h: Hash) -> Result<Fields, Reply> {
    Ok(r.fields(key, h.version, b"", usize::MAX)?.0)
}

/// The hash at `key` for a write: the live one, or a new empty one (with a
/// fresh version) when absent.
fn hash_for_write(t: &mut Txn<'_>, key: &[u8], now: u64) -> Result<Hash, Reply> {
    match hash_at(t, key, now)? {
        Some(h) => Ok(h),
        None => Ok(Hash {
            version: t.new_version(),
            count: 0,
            expire: 0,
        }),
    }
}

/// Copies the fields of hash value `v` of `src` under key `dst` with a new
/// version (`RENAME`: a field record is named by its key); the key record
/// value for `dst`.
///
/// # Errors
/// Engine errors; a field too long for the engine's key limit under `dst`.
pub fn copy_fields(t: &mut Txn<'_>, src: &[u8], dst: &[u8], v: &Value) -> Result<Value, Reply> {
    let (version, count) = keys::parse_hash_payload(&v.payload)
        .ok_or_else(|| Reply::err("the hash's key record is malformed"))?;
    let fields = t.fields(src, version, b"", usize::MAX)?.0;
    for (f, val) in &fields {
        check_field(dst, f, val.len())?;
    }
    let new = t.new_version();
    for (f, val) in fields {
        t.put_field(dst, new, &f, val)?;
    }
    Ok(Value {
        kind: TYPE_HASH,
        payload: keys::hash_payload(new, count),
        expire: v.expire,
    })
}

/// Writes the key record of `h` (deletes the key when it has no field).
fn save(t: &mut Txn<'_>, key: &[u8], h: Hash, now: u64) -> Result<(), Reply> {
    if h.count == 0 {
        t.del(key, now)?;
    } else {
        let v = Value {
            kind: TYPE_HASH,
            payload: keys::hash_payload(h.version, h.count),
            expire: h.expire,
        };
        t.set(key, v, now)?;
    }
    Ok(())
}

/// Refuses a field whose record would exceed the engine's limits.
fn check_field(key: &[u8], field: &[u8], value_len: usize) -> Result<(), Reply> {
    let len = keys::field_key_len(key, field);
    if len > sepkv::MAX_KEY_SIZE {
        return Err(Reply::err(format!(
            "hash field of {} bytes under a key of {} bytes exceeds sepkv's key limit of {} \
             bytes for the two together (less {} bytes of record header)",
            field.len(),
            key.len(),
            sepkv::MAX_KEY_SIZE,
            keys::FIELD_OVERHEAD
        )));
    }
    if value_len > sepkv::MAX_VALUE_SIZE {
        return Err(Reply::err(format!(
            "hash value of {value_len} bytes exceeds sepkv's value limit of {} bytes",
            sepkv::MAX_VALUE_SIZE
        )));
    }
    Ok(())
}

/// Sets the field/value pairs `pairs` (`[f1, v1, f2, v2, …]`); how many
/// fields were new.
fn set_fields(t: &mut Txn<'_>, key: &[u8], pairs: &[Bytes], nx: bool) -> Result<i64, Reply> {
    for p in pairs.chunks(2) {
        check_field(key, &p[0], p[1].len())?;
    }
    let now = now_ms();
    let mut h = hash_for_write(t, key, now)?;
    let mut added = 0;
    for p in pairs.chunks(2) {
        let exists = t.field(key, h.version, &p[0])?.is_some();
        if exists && nx {
            continue;
        }
        if !exists {
            added += 1;
            h.count += 1;
        }
        t.put_field(key, h.version, &p[0], p[1].to_vec())?;
    }
    if added > 0 || !nx {
        save(t, key, h, now)?;
    }
    Ok(added as i64)
}

/// `HSET key field value [field value …]`.
pub fn hset(t: &mut Txn<'_>, a: &[Bytes]) -> CmdResult {
    if !a.len().is_multiple_of(2) {
        return Err(arity_error("hset"));
    }
    Ok(Reply::Int(set_fields(t, &a[1], &a[2..], false)?))
}

/// `HMSET key field value [field value …]`.
pub fn hmset(t: &mut Txn<'_>, a: &[Bytes]) -> CmdResult {
    if !a.len().is_multiple_of(2) {
        return Err(arity_error("hmset"));
    }
    set_fields(t, &a[1], &a[2..], false)?;
    Ok(Reply::OK)
}

/// `HSETNX key field value`.
pub fn hsetnx(t: &mut Txn<'_>, a: &[Bytes]) -> CmdResult {
    Ok(Reply::Int(set_fields(t, &a[1], &a[2..4], true)?))
}

/// `HDEL key field [field …]`.
pub fn hdel(t: &mut Txn<'_>, a: &[Bytes]) -> CmdResult {
    let now = now_ms();
    let Some(mut h) = hash_at(t, &a[1], now)? else {
        return Ok(Reply::Int(0));
    };
    let mut n = 0;
    for f in &a[2..] {
        if keys::field_key_len(&a[1], f) > sepkv::MAX_KEY_SIZE {
            continue;
        }
        if t.field(&a[1], h.version, f)?.is_some() {
            t.del_field(&a[1], h.version, f)?;
            h.count = h.count.saturating_sub(1);
            n += 1;
        }
    }
    if n > 0 {
        save(t, &a[1], h, now)?;
    }
    Ok(Reply::Int(n))
}

/// The value of one field (`None` for an absent hash or field).
fn field_of(r: &mut dyn Reader, key: &[u8], field: &[u8]) -> Result<Option<Vec<u8>>, Reply> {
    let Some(h) = hash_at(r, key, now_ms())? else {
        return Ok(None);
    };
    if keys::field_key_len(key, field) > sepkv::MAX_KEY_SIZE {
        return Ok(None);
    }
    Ok(r.field(key, h.version, field)?)
}

/// `HGET key field`.
pub fn hget(ctx: &mut Ctx<'_>, a: &[Bytes]) -> CmdResult {
    Ok(Reply::opt_bulk(ctx.read(|r| field_of(r, &a[1], &a[2]))?))
}

/// `HMGET key field [field …]`.
pub fn hmget(ctx: &mut Ctx<'_>, a: &[Bytes]) -> CmdResult {
    ctx.read(|r| {
        let h = hash_at(r, &a[1], now_ms())?;
        let mut out = Vec::with_capacity(a.len() - 2);
        for f in &a[2..] {
            let v = match h {
                Some(h) if keys::field_key_len(&a[1], f) <= sepkv::MAX_KEY_SIZE => {
                    r.field(&a[1], h.version, f)?
                }
                _ => None,
            };
            out.push(Reply::opt_bulk(v));
        }
        Ok(Reply::Array(out))
    })
}

/// `HEXISTS key field`.
pub fn hexists(ctx: &mut Ctx<'_>, a: &[Bytes]) -> CmdResult {
    let found = ctx.read(|r| field_of(r, &a[1], &a[2]))?;
    Ok(Reply::Int(i64::from(found.is_some())))
}

/// `HSTRLEN key field`.
pub fn hstrlen(ctx: &mut Ctx<'_>, a: &[Bytes]) -> CmdResult {
    let found = ctx.read(|r| field_of(r, &a[1], &a[2]))?;
    Ok(Reply::Int(found.map_or(0, |v| v.len() as i64)))
}

/// `HLEN key`: the count kept in the key record.
pub fn hlen(ctx: &mut Ctx<'_>, a: &[Bytes]) -> CmdResult {
    let h = ctx.read(|r| hash_at(r, &a[1], now_ms()))?;
    Ok(Reply::Int(h.map_or(0, |h| h.count as i64)))
}

/// Every field of the hash at `key` (empty when absent).
fn fields_at(ctx: &mut Ctx<'_>, key: &[u8]) -> Result<Fields, Reply> {
    ctx.read(|r| match hash_at(r, key, now_ms())? {
        Some(h) => all_fields(r, key, h),
        None => Ok(Vec::new()),
    })
}

/// `HGETALL key`: a map in RESP3, a flat array in RESP2.
pub fn hgetall(ctx: &mut Ctx<'_>, a: &[Bytes]) -> CmdResult {
    let f = fields_at(ctx, &a[1])?;
    Ok(Reply::Map(
        f.into_iter()
            .map(|(k, v)| (Reply::bulk(k), Reply::bulk(v)))
            .collect(),
    ))
}

/// `HKEYS key`.
pub fn hkeys(ctx: &mut Ctx<'_>, a: &[Bytes]) -> CmdResult {
    let f = fields_at(ctx, &a[1])?;
    Ok(Reply::Array(
        f.into_iter().map(|(k, _)| Reply::bulk(k)).collect(),
    ))
}

/// `HVALS key`.
pub fn hvals(ctx: &mut Ctx<'_>, a: &[Bytes]) -> CmdResult {
    let f = fields_at(ctx, &a[1])?;
    Ok(Reply::Array(
        f.into_iter().map(|(_, v)| Reply::bulk(v)).collect(),
    ))
}

/// Reads a field for an increment, applies `f` to it and writes the
/// result; the result.
fn incr_field(
    t: &mut Txn<'_>,
    a: &[Bytes],
    f: impl FnOnce(Option<Vec<u8>>) -> Result<Vec<u8>, Reply>,
) -> Result<Vec<u8>, Reply> {
    let (key, field) = (&a[1], &a[2]);
    check_field(key, field, 0)?;
    let now = now_ms();
    let mut h = hash_for_write(t, key, now)?;
    let old = t.field(key, h.version, field)?;
    if old.is_none() {
        h.count += 1;
    }
    let new = f(old)?;
    t.put_field(key, h.version, field, new.clone())?;
    save(t, key, h, now)?;
    Ok(new)
}

/// `HINCRBY key field increment`.
pub fn hincrby(t: &mut Txn<'_>, a: &[Bytes]) -> CmdResult {
    let by = int_arg(&a[3])?;
    let new = incr_field(t, a, |old| {
        let cur = match old {
            Some(v) => parse_i64(&v).ok_or_else(|| Reply::err("hash value is not an integer"))?,
            None => 0,
        };
        let n = cur
            .checked_add(by)
            .ok_or_else(|| Reply::err("increment or decrement would overflow"))?;
        Ok(n.to_string().into_bytes())
    })?;
    Ok(Reply::Int(parse_i64(&new).unwrap_or_default()))
}

/// `HINCRBYFLOAT key field increment` (a bulk string in both protocols, as
/// Redis 7 answers).
pub fn hincrbyfloat(t: &mut Txn<'_>, a: &[Bytes]) -> CmdResult {
    let by = parse_float(&a[3]).ok_or_else(|| Reply::err("value is not a valid float"))?;
    let new = incr_field(t, a, |old| {
        let cur = match old {
            Some(v) => parse_float(&v).ok_or_else(|| Reply::err("hash value is not a float"))?,
            None => 0.0,
        };
        let n = cur + by;
        if !n.is_finite() {
            return Err(Reply::err("increment would produce NaN or Infinity"));
        }
        Ok(format_float(n).into_bytes())
    })?;
    Ok(Reply::bulk(new))
}

/// `HSCAN key cursor [MATCH pattern] [COUNT count]`: fields in field order;
/// the cursor names the field to go on from.
pub fn hscan(ctx: &mut Ctx<'_>, a: &[Bytes]) -> CmdResult {
    let cursor = scan_cursor(&a[2])?;
    // As Redis: the key is looked up before the options are parsed.
    let key = &a[1];
    let Some(h) = ctx.read(|r| hash_at(r, key, now_ms()))? else {
        return Ok(Reply::Array(vec![
            Reply::bulk("0"),
            Reply::Array(Vec::new()),
        ]));
    };
    let ScanOptions { pat, count, .. } = scan_options(&a[3..], false)?;
    let prefix = keys::field_prefix(key, h.version);
    let from = if cursor == 0 {
        Vec::new()
    } else {
        let k = ctx
            .shared
            .cursors
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .resume(cursor);
        // A forgotten cursor, or one of an older version of the hash,
        // starts over: fields may come twice, none is missed.
        k.strip_prefix(prefix.as_slice())
            .map(<[u8]>::to_vec)
            .unwrap_or_default()
    };
    let n = count.min(100_000) as usize;
    let (found, next) = ctx.read(|r| r.fields(key, h.version, &from, n))?;
    let mut out = Vec::new();
    for (f, v) in found {
        if pat.as_ref().is_none_or(|p| glob_match(p, &f)) {
            out.push(Reply::bulk(f));
            out.push(Reply::bulk(v));
        }
    }
    let next = match next {
        Some(f) => {
            let mut k = prefix;
            k.extend_from_slice(&f);
            ctx.shared
                .cursors
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .save(k)
        }
        None => 0,
    };
    Ok(Reply::Array(vec![
        Reply::bulk(next.to_string()),
        Reply::Array(out),
    ]))
}

/// `HRANDFIELD key [count [WITHVALUES]]`: as Redis, a positive count gives
/// distinct fields, a negative one `-count` fields that may repeat.
pub fn hrandfield(ctx: &mut Ctx<'_>, a: &[Bytes]) -> CmdResult {
    let (count, with_values) = match a.len() {
        2 => (None, false),
        3 => (Some(int_arg(&a[2])?), false),
        4 if is(&a[3], "withvalues") => (Some(int_arg(&a[2])?), true),
        _ => return Err(syntax_error()),
    };
    if let Some(c) = count {
        let limit = i64::MAX / 2;
        if !(-limit..=limit).contains(&c) {
            return Err(Reply::err(format!(
                "value is out of range, must be positive and less than {limit}"
            )));
        }
    }
    let fields = fields_at(ctx, &a[1])?;
    let mut rng = rand::thread_rng();
    let Some(c) = count else {
        if fields.is_empty() {
            return Ok(Reply::Nil);
        }
        let i = rng.gen_range(0..fields.len());
        return Ok(Reply::bulk(fields[i].0.clone()));
    };
    let picked: Vec<usize> = if fields.is_empty() {
        Vec::new()
    } else if c < 0 {
        (0..c.unsigned_abs())
            .map(|_| rng.gen_range(0..fields.len()))
            .collect()
    } else {
        let n = (c as usize).min(fields.len());
        rand::seq::index::sample(&mut rng, fields.len(), n).into_vec()
    };
    let field = |i: usize| Reply::bulk(fields[i].0.clone());
    Ok(if with_values {
        Reply::Pairs(
            picked
                .into_iter()
                .map(|i| (field(i), Reply::bulk(fields[i].1.clone())))
                .collect(),
        )
    } else {
        Reply::Array(picked.into_iter().map(field).collect())
    })
}
