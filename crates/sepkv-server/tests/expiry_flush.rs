//! Active expiry deletes keys nobody reads; FLUSHDB empties the keyspace at
//! once, its old records are reclaimed in the background, and the count
//! and data are right after a reopen. The server runs in-process on
//! 127.0.0.1 on a port of its choosing.

use sepkv::{Db, Options, Preset};
use sepkv_server::{Config, Fsync, Server};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

struct Running {
    port: u16,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Running {
    fn start(dir: &Path) -> Running {
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let (ptx, prx) = std::sync::mpsc::channel();
        let dir = dir.to_path_buf();
        let thread = std::thread::spawn(move || {
            let db = Arc::new(Db::open(&dir, Options::preset(Preset::WiscKey)).unwrap());
            let rt = tokio::runtime::Runtime::new().unwrap();
            rt.block_on(async {
                let config = Config {
                    port: 0,
                    fsync: Fsync::No,
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
            db.close().unwrap();
        });
        let port = prx.recv_timeout(Duration::from_secs(30)).unwrap();
        Running {
            port,
            stop: Some(tx),
            thread: Some(thread),
        }
    }

    fn stop(&mut self) {
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

struct Conn(BufReader<TcpStream>, TcpStream);

impl Conn {
    fn new(port: u16) -> Conn {
        let s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        Conn(BufReader::new(s.try_clone().unwrap()), s)
    }

    /// Sends a command; the reply as text (`:n`, `+s`, `-e`, `$` bulk as
    /// its text, `nil`).
    fn cmd(&mut self, args: &[&str]) -> String {
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

fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    let end = Instant::now() + Duration::from_secs(20);
    while !f() {
        assert!(Instant::now() < end, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn active_expiry_and_flushdb_reclaim() {
    let tmp = tempfile::tempdir().unwrap();
    let mut srv = Running::start(tmp.path());
    let mut c = Conn::new(srv.port);
    for i in 0..300 {
        assert_eq!(c.cmd(&["SET", &format!("t{i}"), "v", "PX", "100"]), "+OK");
    }
    assert_eq!(c.cmd(&["SET", "keep", "v"]), "+OK");
    assert_eq!(c.cmd(&["DBSIZE"]), ":301");
    // Nobody reads the keys: the active cycle deletes them.
    wait_for("active expiry", || c.cmd(&["DBSIZE"]) == ":1");
    assert!(c.cmd(&["INFO", "stats"]).contains("expired_keys:300"));

    for i in 0..3000 {
        assert_eq!(c.cmd(&["SET", &format!("f{i}"), "value"]), "+OK");
    }
    assert_eq!(c.cmd(&["DBSIZE"]), ":3001");
    assert_eq!(c.cmd(&["FLUSHDB"]), "+OK");
    assert_eq!(c.cmd(&["DBSIZE"]), ":0");
    assert_eq!(c.cmd(&["GET", "f7"]), "nil");
    assert_eq!(c.cmd(&["KEYS", "*"]), "*0");
    assert_eq!(c.cmd(&["SET", "f7", "new"]), "+OK");
    wait_for("reclaim", || {
        let info = c.cmd(&["INFO", "sepkv"]);
        info.lines()
            .find_map(|l| l.strip_prefix("flushed_records_reclaimed:"))
            .and_then(|n| n.trim().parse::<u64>().ok())
            .is_some_and(|n| n >= 3000)
    });
    drop(c);
    srv.stop();
    let srv = Running::start(tmp.path());
    let mut c = Conn::new(srv.port);
    assert_eq!(c.cmd(&["DBSIZE"]), ":1");
    assert_eq!(c.cmd(&["GET", "f7"]), "new");
    assert_eq!(c.cmd(&["GET", "f8"]), "nil");
    assert_eq!(c.cmd(&["GET", "keep"]), "nil");
}
