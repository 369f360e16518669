//! Helpers of the in-process server tests.
#![allow(dead_code)]

use sepkv::{Db, Options, Preset};
use sepkv_server::{Config, Fsync, Server};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// A server running in-process on its own thread, stopped when dropped.
pub struct Running {
    /// The port it listens on.
    pub port: u16,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Running {
    /// Serves `dir` with `fsync`, opened with `opts`.
    pub fn start_with(dir: &Path, opts: Options, fsync: Fsync) -> Running {
        Running::serve(Arc::new(Db::open(dir, opts).unwrap()), fsync)
    }

    /// Serves the open database `db` with `fsync` (the caller may keep a
    /// handle: to compact, to read stats); closes it when stopped.
    pub fn serve(db: Arc<Db>, fsync: Fsync) -> Running {
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let (ptx, prx) = std::sync::mpsc::channel();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Runtime::new().unwrap();
            rt.block_on(async {
                let config = Config {
                    port: 0,
                    fsync,
                    ..Config::default()
                };
                let server = Server::bind(db.clone(), config).await.unwrap();
                ptx.send(server.local_addr().unwrap().port()).unwrap();
                server
                    .run(async {
                        let _ = rx.await;
                    })
                    .await
                    .unwrap();
            });
            drop(rt);
            let _ = db.close();
        });
        let port = prx.recv_timeout(Duration::from_secs(30)).unwrap();
        Running {
            port,
            stop: Some(tx),
            thread: Some(thread),
        }
    }

    /// Serves `dir` (preset wisckey, `--fsync no`).
    pub fn start(dir: &Path) -> Running {
        Running::start_with(dir, Options::preset(Preset::WiscKey), Fsync::No)
    }

    /// Stops the server and closes the database.
    pub fn stop(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.thread.take() {
            t.join().unwrap();
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A minimal RESP2 client.
pub struct Conn(BufReader<TcpStream>, TcpStream);

impl Conn {
    /// Connects to 127.0.0.1:`port`.
    pub fn new(port: u16) -> Conn {
        let s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        Conn(BufReader::new(s.try_clone().unwrap()), s)
    }

    /// Sends a command; the reply as text (`:n`, `+s`, `-e`, `$` bulk as
    /// its text, `nil`).
    pub fn cmd(&mut self, args: &[&str]) -> String {
        let mut b = format!("*{}\r\n", args.len());
        for a in args {
            b.push_str(&format!("${}\r\n{a}\r\n", a.len()));
        }
        self.1.write_all(b.as_bytes()).unwrap();
        let mut line = String::new();
        self.0.read_line(&mut line).unwrap();
        let line = line.trim_end().to_string();
        if let Some(n) = line.strip_prefix('$') {
            let n: i64 = n.parse().unwrap();
            if n < 0 {
                return "nil".into();
            }
            let mut v = vec![0; n as usize + 2];
            self.0.read_exact(&mut v).unwrap();
            return String::from_utf8_lossy(&v[..n as usize]).into_owned();
        }
        line
    }
}
