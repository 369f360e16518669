//! `sepkv serve` as a process: kill -9 under concurrent `--fsync always`
//! writers loses no acknowledged write (every preset); kill -9 under
//! MULTI/EXEC transfers keeps a bank's total (every preset); malformed frames of
//! each kind close only their connection; limits, authentication,
//! protected mode, `maxclients`, inline commands and a clean SIGTERM exit.
//!
//! Every server listens on 127.0.0.1 on a port it picked itself (`--port
//! 0`, read back from the ready line) and is stopped by its pid, failed
//! test or not (`Served` kills it on drop).

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const PRESETS: [&str; 6] = ["leveldb", "wisckey", "hashkv", "ktstore", "flashkey", "lwc"];

/// A running `sepkv serve`, killed when dropped.
struct Served {
    child: Child,
    port: u16,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn serve(db: &Path, preset: &str, extra: &[&str]) -> Served {
    let mut child = Command::new(env!("CARGO_BIN_EXE_sepkv"))
        .arg("--db")
        .arg(db)
        .args(["--preset", preset, "serve", "--port", "0"])
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start sepkv serve");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let port = line
        .trim()
        .strip_prefix("ready: listening on ")
        .and_then(|a| a.rsplit(':').next())
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| {
            let _ = child.kill();
            panic!("no ready line: {line:?}")
        });
    Served { child, port }
}

/// A reply, as the tests need it.
#[derive(Debug, Clone, PartialEq)]
enum R {
    Status(String),
    Err(String),
    Int(i64),
    Bulk(Option<Vec<u8>>),
    Array(Vec<R>),
}

struct Conn {
    r: BufReader<TcpStream>,
    w: TcpStream,
}

impl Conn {
    fn new(port: u16) -> Conn {
        let s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        Conn {
            r: BufReader::new(s.try_clone().unwrap()),
            w: s,
        }
    }

    fn send_raw(&mut self, b: &[u8]) {
        self.w.write_all(b).unwrap();
    }

    fn cmd(&mut self, args: &[&[u8]]) -> R {
        let mut b = format!("*{}\r\n", args.len()).into_bytes();
        for a in args {
            b.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
            b.extend_from_slice(a);
            b.extend_from_slice(b"\r\n");
        }
        self.send_raw(&b);
        self.read().expect("reply")
    }

    fn read(&mut self) -> Option<R> {
        let mut line = Vec::new();
        if self.r.read_until(b'\n', &mut line).ok()? == 0 {
            return None;
        }
        let text = String::from_utf8_lossy(&line[1..line.len() - 2]).into_owned();
        Some(match line[0] {
            b'+' => R::Status(text),
            b'-' => R::Err(text),
            b':' => R::Int(text.parse().unwrap()),
            b'$' => {
                let n: i64 = text.parse().unwrap();
                if n < 0 {
                    R::Bulk(None)
                } else {
                    let mut v = vec![0; n as usize + 2];
                    self.r.read_exact(&mut v).ok()?;
                    v.truncate(n as usize);
                    R::Bulk(Some(v))
                }
            }
            b'*' => {
                let n: i64 = text.parse().unwrap();
                if n < 0 {
                    // The null array (an aborted EXEC).
                    return Some(R::Bulk(None));
                }
                R::Array((0..n).map(|_| self.read().unwrap()).collect())
            }
            c => panic!("unexpected reply type {c}"),
        })
    }

    /// Whether the server closed the connection.
    fn closed(&mut self) -> bool {
        let mut b = [0u8; 1];
        matches!(self.r.read(&mut b), Ok(0) | Err(_))
    }
}

fn value_for(client: usize, n: u64) -> Vec<u8> {
    let len = if n.is_multiple_of(5) {
        20_000
    } else {
        100 + (n % 900) as usize
    };
    let mut v = format!("c{client}-n{n}-").into_bytes();
    v.resize(len, b'a' + (n % 26) as u8);
    v
}

#[test]
fn sigkill_under_synced_writers_loses_no_acknowledged_write() {
    let secs: f64 = std::env::var("SEPKV_SERVE_KILL_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1.5);
    for preset in PRESETS {
        let tmp = tempfile::tempdir().unwrap();
        let db = tmp.path().join("db");
        let mut srv = serve(&db, preset, &["--fsync", "always"]);
        let stop = Arc::new(AtomicBool::new(false));
        let acked: Arc<Mutex<HashMap<Vec<u8>, Vec<u8>>>> = Arc::default();
        let counters: Arc<Mutex<HashMap<usize, i64>>> = Arc::default();
        let threads: Vec<_> = (0..8)
            .map(|c| {
                let (stop, acked, counters, port) =
                    (stop.clone(), acked.clone(), counters.clone(), srv.port);
                std::thread::spawn(move || {
                    let mut conn = Conn::new(port);
                    let deadline = Instant::now() + Duration::from_secs(60);
                    let mut n = 0u64;
                    while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
                        let key = format!("c{c}:{}", n % 500).into_bytes();
                        let v = value_for(c, n);
                        let Some(r) =
                            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                                conn.cmd(&[b"SET", &key, &v])
                            }))
                            .ok()
                        else {
                            return;
                        };
                        if r != R::Status("OK".into()) {
                            return;
                        }
                        acked.lock().unwrap().insert(key, v);
                        let ctr = format!("ctr{c}").into_bytes();
                        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                            conn.cmd(&[b"INCR", &ctr])
                        })) {
                            Ok(R::Int(i)) => {
                                counters.lock().unwrap().insert(c, i);
                            }
                            _ => return,
                        }
                        n += 1;
                    }
                })
            })
            .collect();
        // The kill is timed from the writers' progress: on a loaded
        // machine a fixed window may hold too few synced writes, so it
        // starts once more than 50 are acknowledged (the writers give up
        // after 60 s, and the assertion below then fails).
        let progress_deadline = Instant::now() + Duration::from_secs(60);
        while acked.lock().unwrap().len() <= 50 && Instant::now() < progress_deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        std::thread::sleep(Duration::from_secs_f64(secs));
        // SIGKILL while the writers are mid-command.
        srv.child.kill().unwrap();
        srv.child.wait().unwrap();
        stop.store(true, Ordering::Relaxed);
        for t in threads {
            let _ = t.join();
        }
        let srv = serve(&db, preset, &[]);
        let mut conn = Conn::new(srv.port);
        let acked = acked.lock().unwrap();
        assert!(
            acked.len() > 50,
            "{preset}: only {} writes acknowledged",
            acked.len()
        );
        // A key's last acknowledged value is there, or the one write after
        // it that was in flight (applied but not acknowledged).
        for (k, v) in acked.iter() {
            match conn.cmd(&[b"GET", k]) {
                R::Bulk(Some(got)) if &got == v => {}
                R::Bulk(Some(got)) => {
                    let kc = &got[..got.iter().position(|&b| b == b'-').unwrap()];
                    assert_eq!(
                        kc,
                        &v[..kc.len()],
                        "{preset}: key {k:?} holds another client's value"
                    );
                    let n = |b: &[u8]| -> u64 {
                        let s = String::from_utf8_lossy(b);
                        s.split('-').nth(1).unwrap()[1..].parse().unwrap()
                    };
                    assert!(
                        n(&got) > n(v),
                        "{preset}: key {k:?} went back to an older value"
                    );
                }
                other => panic!("{preset}: acknowledged key {k:?} reads {other:?}"),
            }
        }
        for (c, i) in counters.lock().unwrap().iter() {
            match conn.cmd(&[b"GET", format!("ctr{c}").as_bytes()]) {
                R::Bulk(Some(v)) => {
                    let got: i64 = String::from_utf8_lossy(&v).parse().unwrap();
                    assert!(
                        got == *i || got == *i + 1,
                        "{preset}: counter {c} {got} < acked {i}"
                    );
                }
                other => panic!("{preset}: counter {c}: {other:?}"),
            }
        }
        // The maintained count matches the keys.
        let R::Array(keys) = conn.cmd(&[b"KEYS", b"*"]) else {
            panic!("KEYS")
        };
        assert_eq!(
            conn.cmd(&[b"DBSIZE"]),
            R::Int(keys.len() as i64),
            "{preset}: DBSIZE"
        );
        eprintln!(
            "{preset}: {} acknowledged keys survived kill -9",
            acked.len()
        );
    }
}

/// Accounts of the bank test: string keys, and as many fields of one hash.
const ACCOUNTS: usize = 12;
const OPENING: i64 = 1000;

fn account(i: usize) -> Vec<u8> {
    format!("{{bank}}acct:{i}").into_bytes()
}

fn int_of(r: &R) -> i64 {
    match r {
        R::Bulk(Some(v)) => String::from_utf8_lossy(v).parse().unwrap(),
        R::Int(i) => *i,
        other => panic!("not a number: {other:?}"),
    }
}

/// Both ledgers' totals, read in one transaction.
fn totals(conn: &mut Conn) -> (i64, i64) {
    assert_eq!(conn.cmd(&[b"MULTI"]), R::Status("OK".into()));
    for i in 0..ACCOUNTS {
        assert_eq!(conn.cmd(&[b"GET", &account(i)]), R::Status("QUEUED".into()));
    }
    assert_eq!(
        conn.cmd(&[b"HVALS", b"{bank}ledger"]),
        R::Status("QUEUED".into())
    );
    let R::Array(r) = conn.cmd(&[b"EXEC"]) else {
        panic!("EXEC")
    };
    let strings = r[..ACCOUNTS].iter().map(int_of).sum();
    let R::Array(fields) = &r[ACCOUNTS] else {
        panic!("HVALS: {:?}", r[ACCOUNTS])
    };
    (strings, fields.iter().map(int_of).sum())
}

/// One transfer of `x` from account `a` to `b`: on the string keys, either
/// blind (DECRBY/INCRBY) or optimistic (WATCH, GET, MULTI, SET, retried
/// when EXEC aborts), and on the hash's fields (HINCRBY), all in one
/// transaction. `None` when the connection is gone.
fn transfer(conn: &mut Conn, a: usize, b: usize, x: i64, watch: bool) -> Option<()> {
    let (ka, kb) = (account(a), account(b));
    let (fa, fb) = (format!("f{a}").into_bytes(), format!("f{b}").into_bytes());
    let xs = x.to_string().into_bytes();
    let neg = (-x).to_string().into_bytes();
    loop {
        let sets = if watch {
            if conn.cmd(&[b"WATCH", &ka, &kb]) != R::Status("OK".into()) {
                return None;
            }
            let va = int_of(&conn.cmd(&[b"GET", &ka]));
            let vb = int_of(&conn.cmd(&[b"GET", &kb]));
            Some(((va - x).to_string(), (vb + x).to_string()))
        } else {
            None
        };
        if conn.cmd(&[b"MULTI"]) != R::Status("OK".into()) {
            return None;
        }
        let mut queued = Vec::new();
        match &sets {
            Some((na, nb)) => {
                queued.push(conn.cmd(&[b"SET", &ka, na.as_bytes()]));
                queued.push(conn.cmd(&[b"SET", &kb, nb.as_bytes()]));
            }
            None => {
                queued.push(conn.cmd(&[b"DECRBY", &ka, &xs]));
                queued.push(conn.cmd(&[b"INCRBY", &kb, &xs]));
            }
        }
        queued.push(conn.cmd(&[b"HINCRBY", b"{bank}ledger", &fa, &neg]));
        queued.push(conn.cmd(&[b"HINCRBY", b"{bank}ledger", &fb, &xs]));
        if queued.iter().any(|r| *r != R::Status("QUEUED".into())) {
            return None;
        }
        match conn.cmd(&[b"EXEC"]) {
            R::Array(r) if r.len() == 4 && r.iter().all(|x| !matches!(x, R::Err(_))) => {
                return Some(())
            }
            R::Bulk(None) if watch => continue,
            _ => return None,
        }
    }
}

#[test]
fn sigkill_under_multi_exec_transfers_keeps_the_bank_total() {
    let secs: f64 = std::env::var("SEPKV_SERVE_KILL_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1.5);
    let total = OPENING * ACCOUNTS as i64;
    for preset in PRESETS {
        let tmp = tempfile::tempdir().unwrap();
        let db = tmp.path().join("db");
        let mut srv = serve(&db, preset, &[]);
        let mut conn = Conn::new(srv.port);
        let mut open: Vec<Vec<u8>> = vec![b"MSET".to_vec()];
        let mut fields: Vec<Vec<u8>> = vec![b"HSET".to_vec(), b"{bank}ledger".to_vec()];
        for i in 0..ACCOUNTS {
            open.extend([account(i), OPENING.to_string().into_bytes()]);
            fields.extend([
                format!("f{i}").into_bytes(),
                OPENING.to_string().into_bytes(),
            ]);
        }
        fn args(v: &[Vec<u8>]) -> Vec<&[u8]> {
            v.iter().map(Vec::as_slice).collect()
        }
        assert_eq!(conn.cmd(&args(&open)), R::Status("OK".into()));
        assert_eq!(conn.cmd(&args(&fields)), R::Int(ACCOUNTS as i64));
        let stop = Arc::new(AtomicBool::new(false));
        let done = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let threads: Vec<_> = (0..6)
            .map(|c| {
                let (stop, done, port) = (stop.clone(), done.clone(), srv.port);
                std::thread::spawn(move || {
                    let mut conn = Conn::new(port);
                    let deadline = Instant::now() + Duration::from_secs(60);
                    let mut n = c as u64;
                    while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
                        n = n
                            .wrapping_mul(6364136223846793005)
                            .wrapping_add(1442695040888963407);
                        let a = (n >> 33) as usize % ACCOUNTS;
                        let b = (a + 1 + (n >> 40) as usize % (ACCOUNTS - 1)) % ACCOUNTS;
                        let x = 1 + (n >> 50) as i64 % 50;
                        // A killed server ends the writer (a read error
                        // panics inside Conn).
                        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                            transfer(&mut conn, a, b, x, c % 2 == 0)
                        }));
                        if !matches!(r, Ok(Some(()))) {
                            return;
                        }
                        done.fetch_add(1, Ordering::Relaxed);
                    }
                })
            })
            .collect();
        // While they run, a transaction reads both totals whole.
        // For `secs`, and on a loaded machine longer: until more than 20
        // transfers are done (bounded by the writers' 60 s).
        let until = Instant::now() + Duration::from_secs_f64(secs);
        let progress_deadline = Instant::now() + Duration::from_secs(60);
        let mut checks = 0;
        while Instant::now() < until
            || (done.load(Ordering::Relaxed) <= 20 && Instant::now() < progress_deadline)
        {
            assert_eq!(totals(&mut conn), (total, total), "{preset}: live totals");
            checks += 1;
        }
        // SIGKILL while the writers are mid-transaction.
        srv.child.kill().unwrap();
        srv.child.wait().unwrap();
        stop.store(true, Ordering::Relaxed);
        for t in threads {
            let _ = t.join();
        }
        let transfers = done.load(Ordering::Relaxed);
        assert!(transfers > 20, "{preset}: only {transfers} transfers");
        let srv = serve(&db, preset, &[]);
        let mut conn = Conn::new(srv.port);
        assert_eq!(
            totals(&mut conn),
            (total, total),
            "{preset}: totals after kill -9"
        );
        assert_eq!(
            conn.cmd(&[b"HLEN", b"{bank}ledger"]),
            R::Int(ACCOUNTS as i64)
        );
        eprintln!(
            "{preset}: {transfers} transfers, {checks} live checks, total kept across kill -9"
        );
    }
}

#[test]
fn each_malformed_frame_closes_only_its_connection() {
    let tmp = tempfile::tempdir().unwrap();
    let srv = serve(&tmp.path().join("db"), "wisckey", &["--fsync", "no"]);
    let mut good = Conn::new(srv.port);
    assert_eq!(good.cmd(&[b"SET", b"kept", b"v"]), R::Status("OK".into()));
    let frames: &[&[u8]] = &[
        b"*x\r\n",
        b"*2\r\n:1\r\n",
        b"*1\r\n$-5\r\n",
        b"*1\r\n$99999999999\r\n",
        b"*1\r\n$1\r\nab\r\n",
        b"*99999999\r\n",
        b"*1\r\n+OK\r\n",
        b"*1\r\n*1\r\n$1\r\na\r\n",
        b"SET \"unbalanced\r\n",
    ];
    for f in frames {
        let mut c = Conn::new(srv.port);
        c.send_raw(f);
        match c.read() {
            Some(R::Err(e)) => assert!(e.starts_with("ERR Protocol error"), "{f:?}: {e}"),
            other => panic!("{f:?}: {other:?}"),
        }
        assert!(c.closed(), "{f:?}: connection left open");
    }
    // An oversized inline request and one header without its line end.
    let mut c = Conn::new(srv.port);
    c.send_raw(&vec![b'a'; 70 * 1024]);
    assert!(matches!(c.read(), Some(R::Err(e)) if e.contains("too big inline request")));
    // A client vanishing mid-command harms nobody.
    let mut c = Conn::new(srv.port);
    c.send_raw(b"*3\r\n$3\r\nSET\r\n$4\r\nhalf\r\n$100\r\nabc");
    drop(c);
    assert_eq!(good.cmd(&[b"GET", b"kept"]), R::Bulk(Some(b"v".to_vec())));
    assert_eq!(good.cmd(&[b"EXISTS", b"half"]), R::Int(0));
    // Inline commands, as telnet and PING_INLINE send them.
    good.send_raw(b"PING\r\n");
    assert_eq!(good.read(), Some(R::Status("PONG".into())));
    good.send_raw(b"set \"in line\" 'v 2'\r\nget \"in line\"\r\n");
    assert_eq!(good.read(), Some(R::Status("OK".into())));
    assert_eq!(good.read(), Some(R::Bulk(Some(b"v 2".to_vec()))));
}

#[test]
fn limits_auth_maxclients_protected_mode_and_sigterm() {
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("db");
    let mut srv = serve(
        &db,
        "leveldb",
        &["--requirepass", "sekret", "--maxclients", "3"],
    );
    let mut c = Conn::new(srv.port);
    assert!(matches!(c.cmd(&[b"GET", b"k"]), R::Err(e) if e.starts_with("NOAUTH")));
    assert!(matches!(c.cmd(&[b"AUTH", b"wrong"]), R::Err(e) if e.starts_with("WRONGPASS")));
    assert_eq!(c.cmd(&[b"AUTH", b"sekret"]), R::Status("OK".into()));
    let big_key = vec![b'k'; 70 * 1024];
    assert!(
        matches!(c.cmd(&[b"SET", &big_key, b"v"]), R::Err(e) if e.contains("sepkv's key limit"))
    );
    let big_value = vec![b'v'; 33 * 1024 * 1024];
    assert!(
        matches!(c.cmd(&[b"SET", b"k", &big_value]), R::Err(e) if e.contains("sepkv's value limit"))
    );
    assert!(
        matches!(c.cmd(&[b"SETRANGE", b"k", b"40000000", b"x"]), R::Err(e) if e.contains("sepkv's value limit"))
    );
    assert!(
        matches!(c.cmd(&[b"GET"]), R::Err(e) if e == "ERR wrong number of arguments for 'get' command")
    );
    assert!(
        matches!(c.cmd(&[b"INCRBY", b"k", b"x"]), R::Err(e) if e == "ERR value is not an integer or out of range")
    );
    // maxclients 3: this one and two more.
    let _b = Conn::new(srv.port);
    let _d = Conn::new(srv.port);
    let mut e = Conn::new(srv.port);
    assert_eq!(
        e.read(),
        Some(R::Err("ERR max number of clients reached".into()))
    );
    assert_eq!(c.cmd(&[b"SET", b"after", b"1"]), R::Status("OK".into()));
    // SIGTERM: a clean exit 0.
    let pid = srv.child.id().to_string();
    Command::new("kill").args(["-TERM", &pid]).status().unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(s) = srv.child.try_wait().unwrap() {
            break s;
        }
        assert!(Instant::now() < deadline, "no exit after SIGTERM");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "exit status {status:?}");
    drop(srv);
    // Protected mode: a non-loopback address without a password is refused.
    let out = Command::new(env!("CARGO_BIN_EXE_sepkv"))
        .arg("--db")
        .arg(&db)
        .args(["serve", "--bind", "0.0.0.0", "--port", "0"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--protected-mode no"));
    // The data written before SIGTERM is there.
    let srv = serve(&db, "leveldb", &[]);
    let mut c = Conn::new(srv.port);
    assert_eq!(c.cmd(&[b"GET", b"after"]), R::Bulk(Some(b"1".to_vec())));
}

#[test]
fn corruption_answers_the_command_and_the_server_keeps_serving() {
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("db");
    let mut srv = serve(&db, "wisckey", &[]);
    let mut c = Conn::new(srv.port);
    let mut big = b"CORRUPT-ME-".repeat(500);
    big.extend_from_slice(b"END");
    assert_eq!(c.cmd(&[b"SET", b"victim", &big]), R::Status("OK".into()));
    assert_eq!(
        c.cmd(&[b"SET", b"bystander", b"fine"]),
        R::Status("OK".into())
    );
    // Separated values after the victim's, so its record is not the last.
    let later = vec![b'L'; 4000];
    for i in 0..20 {
        assert_eq!(
            c.cmd(&[b"SET", format!("later{i}").as_bytes(), &later]),
            R::Status("OK".into())
        );
    }
    drop(c);
    let pid = srv.child.id().to_string();
    Command::new("kill").args(["-TERM", &pid]).status().unwrap();
    assert!(srv.child.wait().unwrap().success());
    drop(srv);
    // Damage the value in the value log.
    let mut damaged = false;
    for e in std::fs::read_dir(&db).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "vlog") {
            let bytes = std::fs::read(&p).unwrap();
            if let Some(i) = bytes.windows(11).position(|w| w == b"CORRUPT-ME-") {
                // One byte in place: the file keeps its size and holes.
                use std::io::{Seek, SeekFrom};
                let mut f = std::fs::OpenOptions::new().write(true).open(&p).unwrap();
                f.seek(SeekFrom::Start((i + 2000) as u64)).unwrap();
                f.write_all(&[bytes[i + 2000] ^ 0x55]).unwrap();
                f.sync_all().unwrap();
                damaged = true;
            }
        }
    }
    assert!(damaged, "value not found in a .vlog file");
    let srv = serve(&db, "wisckey", &[]);
    let mut c = Conn::new(srv.port);
    match c.cmd(&[b"GET", b"victim"]) {
        R::Err(e) => assert!(
            e.starts_with("ERR corruption in ") && e.contains(" at offset "),
            "{e}"
        ),
        other => panic!("damaged value read as {other:?}"),
    }
    assert_eq!(c.cmd(&[b"PING"]), R::Status("PONG".into()));
    assert_eq!(
        c.cmd(&[b"GET", b"bystander"]),
        R::Bulk(Some(b"fine".to_vec()))
    );
    assert_eq!(c.cmd(&[b"SET", b"after", b"1"]), R::Status("OK".into()));
    assert_eq!(c.cmd(&[b"GET", b"after"]), R::Bulk(Some(b"1".to_vec())));
}
