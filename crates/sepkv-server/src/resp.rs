//! The wire: requests in, replies out.
//!
//! Requests arrive as RESP multibulk frames (`*N\r\n$len\r\n...`), decoded
//! by the `redis-protocol` crate's RESP2 decoder, or as inline commands (a
//! line of space-separated words, with `"…"` and `'…'` quoting), which is
//! what a telnet session and `redis-benchmark`'s `PING_INLINE` send. Before
//! a multibulk frame is handed to the decoder its headers are checked
//! ([`check_multibulk`]) against the limits Redis applies, so a client
//! announcing a 10 GB argument is refused at once rather than buffered.
//!
//! Replies are built as [`Reply`] values and encoded for the connection's
//! protocol version: RESP2, or RESP3 after `HELLO 3` (maps, nulls and
//! verbatim strings differ).
//!
//! Everything here is pure and thread-agnostic.

use bytes::{Buf, Bytes, BytesMut};
use redis_protocol::resp2::types::BytesFrame as Frame2;
use redis_protocol::resp3::types::{BytesFrame as Frame3, VerbatimStringFormat};

/// Largest number of arguments in one multibulk request (Redis's limit).
pub const MAX_MULTIBULK: i64 = 1024 * 1024;
/// Largest bulk argument the protocol layer accepts (Redis's default
/// `proto-max-bulk-len`); the engine's tighter limits are checked by the
/// commands, which answer with an error naming them.
pub const MAX_BULK: i64 = 512 * 1024 * 1024;
/// Longest inline request or header line without its newline.
pub const MAX_INLINE: usize = 64 * 1024;

/// A malformed request; the connection answers `-ERR Protocol error: …`
/// and is closed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProtocolError(pub String);

/// Takes one request off the front of `buf`: `Ok(Some(args))` (possibly
/// empty, for an empty inline line or `*0`), `Ok(None)` when more bytes are
/// needed.
///
/// # Errors
/// A [`ProtocolError`] for a frame no more bytes can make valid.
pub fn parse_request(buf: &mut BytesMut) -> Result<Option<Vec<Bytes>>, ProtocolError> {
    if buf.is_empty() {
        return Ok(None);
    }
    if buf[0] != b'*' {
        return parse_inline(buf);
    }
    if !check_multibulk(buf)? {
        return Ok(None);
    }
    match redis_protocol::resp2::decode::decode_bytes_mut(buf) {
        Ok(None) => Ok(None),
        Ok(Some((frame, _, _))) => match frame {
            Frame2::Array(items) => items
                .into_iter()
                .map(|f| match f {
                    Frame2::BulkString(b) => Ok(b),
                    _ => Err(ProtocolError("expected '$'".into())),
                })
                .collect::<Result<Vec<_>, _>>()
                .map(Some),
            Frame2::Null => Ok(Some(Vec::new())),
            _ => Err(ProtocolError("expected '*'".into())),
        },
        Err(e) => Err(ProtocolError(e.details().to_string())),
    }
}

/// Reads a `<prefix><integer>\r\n` header at `buf[at..]`: `Ok(None)` when
/// incomplete, else the integer and the offset after the line.
fn header(buf: &[u8], at: usize, what: &str) -> Result<Option<(i64, usize)>, ProtocolError> {
    let rest = &buf[at..];
    let Some(nl) = rest.iter().position(|&b| b == b'\r') else {
        if rest.len() > MAX_INLINE {
            return Err(ProtocolError(format!("too big {what} count string")));
        }
        return Ok(None);
    };
    if rest.len() < nl + 2 {
        return Ok(None);
    }
    let n = std::str::from_utf8(&rest[1..nl])
        .ok()
        .and_then(|s| s.parse::<i64>().ok());
    match n {
        Some(n) if rest[nl + 1] == b'\n' => Ok(Some((n, at + nl + 2))),
        _ => Err(ProtocolError(format!("invalid {what} length"))),
    }
}

/// Checks the headers of the multibulk request at the front of `buf` that
/// have arrived: `Ok(true)` when the whole request is there.
///
/// # Errors
/// A [`ProtocolError`] for a bad count, a non-bulk element or a bulk length
/// beyond [`MAX_BULK`], as Redis words them.
pub fn check_multibulk(buf: &[u8]) -> Result<bool, ProtocolError> {
    let Some((n, mut at)) = header(buf, 0, "multibulk")? else {
        return Ok(false);
    };
    if n > MAX_MULTIBULK {
        return Err(ProtocolError("invalid multibulk length".into()));
    }
    for _ in 0..n.max(0) {
        if at >= buf.len() {
            return Ok(false);
        }
        if buf[at] != b'$' {
            return Err(ProtocolError(format!(
                "expected '$', got '{}'",
                char::from(buf[at])
            )));
        }
        let Some((len, next)) = header(buf, at, "bulk")? else {
            return Ok(false);
        };
        if !(0..=MAX_BULK).contains(&len) {
            return Err(ProtocolError("invalid bulk length".into()));
        }
        let end = next + len as usize + 2;
        if end > buf.len() {
            return Ok(false);
        }
        if &buf[end - 2..end] != b"\r\n" {
            return Err(ProtocolError("bulk string not terminated by CRLF".into()));
        }
        at = end;
    }
    Ok(true)
}

fn parse_inline(buf: &mut BytesMut) -> Result<Option<Vec<Bytes>>, ProtocolError> {
    let Some(nl) = buf.iter().position(|&b| b == b'\n') else {
        if buf.len() > MAX_INLINE {
            return Err(ProtocolError("too big inline request".into()));
        }
        return Ok(None);
    };
    let line = buf.split_to(nl + 1);
    let mut line = &line[..nl];
    if line.last() == Some(&b'\r') {
        line = &line[..line.len() - 1];
    }
    split_args(line)
        .map(|v| Some(v.into_iter().map(Bytes::from).collect()))
        .ok_or_else(|| ProtocolError("unbalanced quotes in request".into()))
}

fn hex(b: u8) -> Option<u8> {
    (b as char).to_digit(16).map(|d| d as u8)
}

/// Splits an inline line into words as Redis does: blanks separate,
/// `"…"` allows `\n \r \t \b \a \\ \" \xHH` escapes, `'…'` allows `\'`,
/// and a closing quote must be followed by a blank. `None` for unbalanced
/// quotes.
pub fn split_args(line: &[u8]) -> Option<Vec<Vec<u8>>> {
    let mut out = Vec::new();
    let mut i = 0;
    let blank = |b: u8| matches!(b, b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c);
    loop {
        while i < line.len() && blank(line[i]) {
            i += 1;
        }
        if i >= line.len() {
            return Some(out);
        }
        let mut word = Vec::new();
        let (mut inq, mut insq) = (false, false);
        loop {
            if inq {
                if i >= line.len() {
                    return None;
                }
                if line[i] == b'\\' && i + 3 < line.len() && line[i + 1] == b'x' {
                    if let (Some(a), Some(b)) = (hex(line[i + 2]), hex(line[i + 3])) {
                        word.push(a * 16 + b);
                        i += 4;
                        continue;
                    }
                }
                if line[i] == b'\\' && i + 1 < line.len() {
                    i += 1;
                    word.push(match line[i] {
                        b'n' => b'\n',
                        b'r' => b'\r',
                        b't' => b'\t',
                        b'b' => 8,
                        b'a' => 7,
                        c => c,
                    });
                } else if line[i] == b'"' {
                    if i + 1 < line.len() && !blank(line[i + 1]) {
                        return None;
                    }
                    i += 1;
                    break;
                } else {
                    word.push(line[i]);
                }
                i += 1;
            } else if insq {
                if i >= line.len() {
                    return None;
                }
                if line[i] == b'\\' && i + 1 < line.len() && line[i + 1] == b'\'' {
                    word.push(b'\'');
                    i += 2;
                    continue;
                } else if line[i] == b'\'' {
                    if i + 1 < line.len() && !blank(line[i + 1]) {
                        return None;
                    }
                    i += 1;
                    break;
                }
                word.push(line[i]);
                i += 1;
            } else {
                if i >= line.len() || blank(line[i]) {
                    break;
                }
                match line[i] {
                    b'"' => inq = true,
                    b'\'' => insq = true,
                    c => word.push(c),
                }
                i += 1;
            }
        }
        out.push(word);
    }
}

/// A reply, before encoding for the connection's protocol.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    /// `+text`.
    Status(&'static str),
    /// `+text` with text built at run time.
    StatusOwned(String),
    /// `-text`: the text starts with the error code (`ERR`, `WRONGTYPE`,
    /// `NOAUTH`, …).
    Error(String),
    /// `:n`.
    Int(i64),
    /// `$len\r\nbytes`.
    Bulk(Bytes),
    /// The null bulk string (RESP3: `_`).
    Nil,
    /// `*n` of replies.
    Array(Vec<Reply>),
    /// A map (RESP3 `%`); a flat array of pairs in RESP2.
    Map(Vec<(Reply, Reply)>),
    /// Text for humans (RESP3 verbatim `txt`); a bulk string in RESP2.
    Verbatim(String),
    /// A set (RESP3 `~`); an array in RESP2.
    Set(Vec<Reply>),
    /// Pairs: an array of two-element arrays in RESP3, a flat array in
    /// RESP2 (`HRANDFIELD … WITHVALUES`).
    Pairs(Vec<(Reply, Reply)>),
    /// The null array: `*-1` in RESP2, `_` in RESP3 (an aborted `EXEC`).
    NilArray,
}

impl Reply {
    /// `+OK`.
    pub const OK: Reply = Reply::Status("OK");

    /// An error reply `ERR <msg>`.
    pub fn err(msg: impl std::fmt::Display) -> Reply {
        Reply::Error(format!("ERR {msg}"))
    }

    /// A bulk string of `b`.
    pub fn bulk(b: impl Into<Bytes>) -> Reply {
        Reply::Bulk(b.into())
    }

    /// A bulk string, or nil.
    pub fn opt_bulk(b: Option<impl Into<Bytes>>) -> Reply {
        b.map_or(Reply::Nil, |b| Reply::Bulk(b.into()))
    }

    /// Whether this is an error reply.
    pub fn is_error(&self) -> bool {
        matches!(self, Reply::Error(_))
    }

    /// Appends the reply's encoding in protocol `proto` (2 or 3) to `out`.
    pub fn encode(self, proto: u8, out: &mut BytesMut) {
        if proto < 3 && self == Reply::NilArray {
            out.extend_from_slice(b"*-1\r\n");
            return;
        }
        let res = if proto >= 3 {
            redis_protocol::resp3::encode::complete::extend_encode(out, &self.into_frame3(), false)
        } else {
            redis_protocol::resp2::encode::extend_encode(out, &self.into_frame2(), false)
        };
        debug_assert!(res.is_ok(), "reply encoding cannot fail: {res:?}");
    }

    fn into_frame2(self) -> Frame2 {
        match self {
            Reply::Status(s) => Frame2::SimpleString(Bytes::from_static(s.as_bytes())),
            Reply::StatusOwned(s) => Frame2::SimpleString(s.into()),
            Reply::Error(e) => Frame2::Error(sanitize(e).into()),
            Reply::Int(n) => Frame2::Integer(n),
            Reply::Bulk(b) => Frame2::BulkString(b),
            Reply::Nil => Frame2::Null,
            Reply::Array(v) => Frame2::Array(v.into_iter().map(Reply::into_frame2).collect()),
            Reply::Map(v) | Reply::Pairs(v) => Frame2::Array(
                v.into_iter()
                    .flat_map(|(k, v)| [k.into_frame2(), v.into_frame2()])
                    .collect(),
            ),
            Reply::Verbatim(s) => Frame2::BulkString(s.into()),
            Reply::Set(v) => Frame2::Array(v.into_iter().map(Reply::into_frame2).collect()),
            Reply::NilArray => Frame2::Null,
        }
    }

    fn into_frame3(self) -> Frame3 {
        match self {
            Reply::Status(s) => Frame3::SimpleString {
                data: Bytes::from_static(s.as_bytes()),
                attributes: None,
            },
            Reply::StatusOwned(s) => Frame3::SimpleString {
                data: s.into(),
                attributes: None,
            },
            Reply::Error(e) => Frame3::SimpleError {
                data: sanitize(e).into(),
                attributes: None,
            },
            Reply::Int(n) => Frame3::Number {
                data: n,
                attributes: None,
            },
            Reply::Bulk(b) => Frame3::BlobString {
                data: b,
                attributes: None,
            },
            Reply::Nil => Frame3::Null,
            Reply::Array(v) => Frame3::Array {
                data: v.into_iter().map(Reply::into_frame3).collect(),
                attributes: None,
            },
            Reply::Map(v) => Frame3::Map {
                data: v
                    .into_iter()
                    .map(|(k, v)| (k.into_frame3(), v.into_frame3()))
                    .collect(),
                attributes: None,
            },
            Reply::Verbatim(s) => Frame3::VerbatimString {
                data: s.into(),
                format: VerbatimStringFormat::Text,
                attributes: None,
            },
            Reply::Set(v) => Frame3::Set {
                data: v.into_iter().map(Reply::into_frame3).collect(),
                attributes: None,
            },
            Reply::Pairs(v) => Frame3::Array {
                data: v
                    .into_iter()
                    .map(|(a, b)| Frame3::Array {
                        data: vec![a.into_frame3(), b.into_frame3()],
                        attributes: None,
                    })
                    .collect(),
                attributes: None,
            },
            Reply::NilArray => Frame3::Null,
        }
    }
}

/// Error and status lines may not hold CR or LF (Redis replaces them).
fn sanitize(mut s: String) -> String {
    if s.contains(['\r', '\n']) {
        s = s.replace(['\r', '\n'], " ");
    }
    s
}

/// Skips `n` bytes of `buf` (for callers holding a `BytesMut`).
pub fn consume(buf: &mut BytesMut, n: usize) {
    buf.advance(n);
}

/// Decodes `data` as a client's byte stream, whole and cut in two at
/// every tenth byte, and panics if the decoder panics, stops consuming,
/// or decodes a cut stream differently from the whole one: the entry
/// point of the `resp_request` fuzz target and of `tests/decoder.rs`.
#[doc(hidden)]
pub fn fuzz_decoder(data: &[u8]) {
    let whole = decode_stream(&[data]);
    for cut in (0..data.len()).step_by(10) {
        let parts = decode_stream(&[&data[..cut], &data[cut..]]);
        assert_eq!(parts, whole, "stream cut at {cut} decodes differently");
    }
}

/// Feeds `chunks` one after another, taking off every complete request;
/// the requests and the error that ended the stream, if any.
fn decode_stream(chunks: &[&[u8]]) -> (Vec<Vec<Bytes>>, Option<ProtocolError>) {
    let mut buf = BytesMut::new();
    let mut out = Vec::new();
    for c in chunks {
        buf.extend_from_slice(c);
        loop {
            let before = buf.len();
            match parse_request(&mut buf) {
                Ok(Some(args)) => {
                    assert!(buf.len() < before, "a request consumed nothing");
                    out.push(args);
                }
                Ok(None) => break,
                Err(e) => return (out, Some(e)),
            }
        }
    }
    (out, None)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &[u8]) -> Result<Option<Vec<Bytes>>, ProtocolError> {
        parse_request(&mut BytesMut::from(s))
    }

    #[test]
    fn multibulk_and_inline() {
        let r = parse(b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n").unwrap().unwrap();
        assert_eq!(r, vec![Bytes::from("GET"), Bytes::from("k")]);
        assert_eq!(parse(b"*2\r\n$3\r\nGET\r\n$1\r\n").unwrap(), None);
        let r = parse(b"set \"a b\\x41\" 'c'\r\n").unwrap().unwrap();
        assert_eq!(
            r,
            vec![Bytes::from("set"), Bytes::from("a bA"), Bytes::from("c")]
        );
        assert!(parse(b"set \"a\r\n").is_err());
        assert_eq!(parse(b"PING").unwrap(), None);
    }

    #[test]
    fn bad_frames() {
        for bad in [
            &b"*x\r\n"[..],
            b"*2\r\n:1\r\n",
            b"*1\r\n$-5\r\n",
            b"*1\r\n$999999999999\r\n",
            b"*1\r\n$1\r\nab\r\n",
            b"*99999999\r\n",
        ] {
            assert!(parse(bad).is_err(), "{:?}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn encodes_both_protocols() {
        let mut b = BytesMut::new();
        Reply::Nil.encode(2, &mut b);
        Reply::Nil.encode(3, &mut b);
        Reply::Map(vec![(Reply::bulk("a"), Reply::Int(1))]).encode(2, &mut b);
        Reply::Map(vec![(Reply::bulk("a"), Reply::Int(1))]).encode(3, &mut b);
        assert_eq!(
            &b[..],
            b"$-1\r\n_\r\n*2\r\n$1\r\na\r\n:1\r\n%1\r\n$1\r\na\r\n:1\r\n"
        );
        b.clear();
        Reply::NilArray.encode(2, &mut b);
        Reply::NilArray.encode(3, &mut b);
        Reply::Set(vec![Reply::Int(1)]).encode(2, &mut b);
        Reply::Set(vec![Reply::Int(1)]).encode(3, &mut b);
        let pairs = || Reply::Pairs(vec![(Reply::Int(1), Reply::Int(2))]);
        pairs().encode(2, &mut b);
        pairs().encode(3, &mut b);
        assert_eq!(
            &b[..],
            &b"*-1\r\n_\r\n*1\r\n:1\r\n~1\r\n:1\r\n*2\r\n:1\r\n:2\r\n*1\r\n*2\r\n:1\r\n:2\r\n"[..]
        );
    }
}
