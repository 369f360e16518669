//! A small blocking RESP2 client: what a node uses to copy slots to
//! another node, and what `sepkv cluster` uses to drive the nodes.
//! Frames are encoded and decoded by the `redis-protocol` crate.

use bytes::{Bytes, BytesMut};
use redis_protocol::resp2::decode::decode_bytes_mut;
use redis_protocol::resp2::encode::extend_encode;
use redis_protocol::resp2::types::BytesFrame;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// How long a reply may take before the call fails.
pub const TIMEOUT: Duration = Duration::from_secs(60);

/// A connection to one node.
#[derive(Debug)]
pub struct Client {
    sock: TcpStream,
    buf: BytesMut,
}

/// A failed call: the connection's error, or the server's error reply.
#[derive(Debug)]
pub enum CallError {
    /// Connecting, reading or writing failed, or the reply was malformed.
    Io(std::io::Error),
    /// The server answered with an error (its text).
    Server(String),
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CallError::Io(e) => write!(f, "{e}"),
            CallError::Server(e) => f.write_str(e),
        }
    }
}

impl std::error::Error for CallError {}

impl From<std::io::Error> for CallError {
    fn from(e: std::io::Error) -> Self {
        CallError::Io(e)
    }
}

impl Client {
    /// Connects to `addr` (`HOST:PORT`) and authenticates with `password`
    /// when given.
    ///
    /// # Errors
    /// Connection errors; a refused password.
    pub fn connect(addr: &str, password: Option<&str>) -> Result<Client, CallError> {
        let sock = TcpStream::connect(addr)?;
        sock.set_read_timeout(Some(TIMEOUT))?;
        sock.set_write_timeout(Some(TIMEOUT))?;
        let _ = sock.set_nodelay(true);
        let mut c = Client {
            sock,
            buf: BytesMut::with_capacity(64 * 1024),
        };
        if let Some(p) = password {
            c.call(&[b"AUTH".to_vec(), p.as_bytes().to_vec()])?;
        }
        Ok(c)
    }

    /// Sends one command and reads its reply; an error reply is
    /// [`CallError::Server`].
    ///
    /// # Errors
    /// As above.
    pub fn call<A: AsRef<[u8]>>(&mut self, args: &[A]) -> Result<BytesFrame, CallError> {
        let frame = BytesFrame::Array(
            args.iter()
                .map(|a| BytesFrame::BulkString(Bytes::copy_from_slice(a.as_ref())))
                .collect(),
        );
        let mut out = BytesMut::new();
        extend_encode(&mut out, &frame, false).map_err(|e| bad(e.to_string()))?;
        self.sock.write_all(&out)?;
        loop {
            if !self.buf.is_empty() {
                match decode_bytes_mut(&mut self.buf) {
                    Ok(Some((BytesFrame::Error(e), _, _))) => {
                        return Err(CallError::Server(e.to_string()))
                    }
                    Ok(Some((f, _, _))) => return Ok(f),
                    Ok(None) => {}
                    Err(e) => return Err(bad(e.to_string()).into()),
                }
            }
            let mut chunk = [0u8; 64 * 1024];
            let n = self.sock.read(&mut chunk)?;
            if n == 0 {
                return Err(bad("the server closed the connection".into()).into());
            }
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }

    /// [`Client::call`], discarding the reply.
    ///
    /// # Errors
    /// As [`Client::call`].
    pub fn call_ok<A: AsRef<[u8]>>(&mut self, args: &[A]) -> Result<(), CallError> {
        self.call(args).map(|_| ())
    }

    /// [`Client::call`] for a bulk or simple string reply, as text.
    ///
    /// # Errors
    /// As [`Client::call`]; another reply type.
    pub fn call_text<A: AsRef<[u8]>>(&mut self, args: &[A]) -> Result<String, CallError> {
        match self.call(args)? {
            BytesFrame::BulkString(b) | BytesFrame::SimpleString(b) => {
                Ok(String::from_utf8_lossy(&b).into_owned())
            }
            BytesFrame::Integer(n) => Ok(n.to_string()),
            other => Err(bad(format!("unexpected reply {other:?}")).into()),
        }
    }
}

fn bad(msg: String) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, msg)
}
