//! `sepkv`: command-line administration of a sepkv database.
//!
//! Keys and values are UTF-8 on the command line (bytes in the library).
//! Exit codes: 0 success; 1 a missing key (`get`) or faults found
//! (`verify`); 2 any other error, with the message on stderr.
//!
//! `sepkv serve` serves the database over the Redis protocol (the
//! `sepkv-server` crate) until SIGTERM or SIGINT.
//!
//! Only `put`, `import`, `serve` and `bench` create a database; every other command
//! on a directory that holds none fails with `no database at DIR` (exit 2)
//! and creates nothing.
//!
//! `get`, `scan`, `stats` and `verify` open the database read-only
//! (`Db::open_read_only`): they write nothing, so they work on a full disk
//! and on a read-only mount, and several may run at once; beside a process
//! that has the database open for writing they fail with the lock error.
//!
//! `sepkv bench` runs the benchmark harness (the `sepkv-bench` crate); its
//! database directory is the global `--db` when given on the command line,
//! else a fresh temporary directory.

use clap::parser::ValueSource;
use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use sepkv::{Db, Options, Preset, WriteBatch, WriteOptions};
use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "sepkv",
    version,
    about = "Administer a sepkv key-value database"
)]
struct Cli {
    /// Database directory [default: sepkv-db; for bench: a fresh temporary
    /// directory].
    #[arg(
        long,
        global = true,
        default_value = "sepkv-db",
        hide_default_value = true
    )]
    db: PathBuf,
    /// Configuration used when the database is created: leveldb (the
    /// default), wisckey, hashkv, ktstore, flashkey or lwc. Later opens use
    /// the recorded one; naming a different one is refused.
    #[arg(long, global = true)]
    preset: Option<String>,
    /// Where a `hash` index (preset flashkey) keeps its table at this
    /// open: memory (every page in memory; the default) or disk (pages on
    /// disk behind a bounded write-back cache). May change at each open
    /// (FlashKey §V-A1).
    #[arg(long, global = true)]
    hash_index_mode: Option<String>,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Set KEY to VALUE (synced).
    Put { key: String, value: String },
    /// Print the value of KEY; exit 1 when it is missing.
    Get { key: String },
    /// Delete KEY (synced).
    Delete { key: String },
    /// Print `key<TAB>value` lines of a key range in order.
    Scan {
        /// First key (inclusive).
        #[arg(long)]
        start: Option<String>,
        /// End key (exclusive).
        #[arg(long)]
        end: Option<String>,
        /// Stop after N pairs.
        #[arg(long)]
        limit: Option<usize>,
        /// Descending order.
        #[arg(long)]
        reverse: bool,
    },
    /// Load `key<TAB>value` lines from stdin; prints `acked <total>` after
    /// each batch is written (durable with --sync).
    Import {
        /// Sync each batch before acknowledging it.
        #[arg(long)]
        sync: bool,
        /// Records per batch.
        #[arg(long, default_value_t = 1000)]
        batch: usize,
    },
    /// Print statistics.
    Stats {
        /// As JSON.
        #[arg(long)]
        json: bool,
    },
    /// Compact the whole key space down to the bottommost level holding
    /// data, dropping tombstones and overwritten versions; prints what it
    /// did.
    Compact,
    /// Check every table, block, record and checksum, and the manifest.
    Verify,
    /// Write a consistent copy of the database into the new directory DIR
    /// (SSTables hard-linked, every other file copied); prints the
    /// sequence number it holds. Writes wait while it runs.
    Checkpoint {
        /// The checkpoint's directory; must not exist.
        dir: PathBuf,
    },
    /// Rebuild a database whose manifest or CURRENT is lost or damaged from
    /// the tables, WALs and value files that survive (LevelDB's RepairDB);
    /// prints what it kept and dropped. Old files go to DIR/lost/.
    Repair,
    /// Garbage-collect the value store (`wisckey` value log, `hashkv` segment groups, `ktstore` TrieTables, `flashkey` logical bands).
    Gc {
        /// Stop once the estimated garbage ratio is at most this; without
        /// it, one pass reclaims everything reclaimable.
        #[arg(long)]
        target: Option<f64>,
    },
    /// Serve the database over the Redis protocol (RESP2/RESP3) until
    /// SIGTERM or SIGINT; prints `ready: listening on HOST:PORT` once
    /// connections are accepted.
    Serve(ServeArgs),
    /// Administer a cluster of `sepkv serve --cluster-config` nodes.
    #[command(subcommand)]
    Cluster(ClusterCmd),
    /// Run benchmarks (with no options: the default suite, every preset
    /// beside fjall and fjall-kv with 1000-byte values, about two minutes;
    /// its report goes to ./sepkv-bench-report/). The
    /// database lives in --db when given, else in a temporary directory,
    /// and is deleted afterwards unless --keep.
    Bench(Box<sepkv_bench::cli::BenchArgs>),
}

/// `sepkv cluster …`.
#[derive(Subcommand)]
enum ClusterCmd {
    /// Move hash slots to node ID while the cluster serves writes: mark
    /// them migrating and importing, copy them, install the next topology
    /// version on every node and rewrite FILE. Repeat a failed run to
    /// resume it.
    Migrate {
        /// The topology file (the nodes' `--cluster-config`).
        #[arg(long)]
        config: PathBuf,
        /// Slots to move: `A-B`, or ranges separated by commas.
        #[arg(long)]
        slots: String,
        /// The node ID to move them to.
        #[arg(long)]
        to: String,
        /// The nodes' password (`--requirepass`); also read from
        /// SEPKV_PASSWORD.
        #[arg(long)]
        password: Option<String>,
    },
}

/// `sepkv cluster …`.
fn cluster(cmd: &ClusterCmd) -> Result<ExitCode, Failure> {
    match cmd {
        ClusterCmd::Migrate {
            config,
            slots,
            to,
            password,
        } => {
            let slots = sepkv_server::cluster::topology::parse_slots(slots)
                .map_err(|e| Failure::Message(format!("--slots: {e}")))?;
            let password = password
                .clone()
                .or_else(|| std::env::var("SEPKV_PASSWORD").ok());
            let t = sepkv_server::cluster::admin::migrate(
                config,
                &slots,
                to,
                password.as_deref(),
                |line| println!("{line}"),
            )
            .map_err(Failure::Message)?;
            println!("topology version {} in force", t.version);
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// Flags of `sepkv serve`.
#[derive(clap::Args)]
struct ServeArgs {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    bind: String,
    /// TCP port (0: any free port; the ready line names it).
    #[arg(long, default_value_t = 6379)]
    port: u16,
    /// When writes reach the disk: always (before each reply, fsyncs
    /// shared by concurrent clients), everysec, or no (left to the OS).
    #[arg(long, default_value = "everysec")]
    fsync: String,
    /// Password clients must give with AUTH (or HELLO … AUTH).
    #[arg(long)]
    requirepass: Option<String>,
    /// Most clients connected at once.
    #[arg(long, default_value_t = 10_000)]
    maxclients: usize,
    /// yes: refuse to listen on a non-loopback address without
    /// --requirepass; no: allow it.
    #[arg(long, default_value = "yes")]
    protected_mode: String,
    /// Cluster mode: the topology file (reread on SIGHUP; see
    /// docs/cluster.md). Needs --cluster-node-id.
    #[arg(long, requires = "cluster_node_id")]
    cluster_config: Option<PathBuf>,
    /// This node's ID in the topology file; its entry there must be the
    /// --bind/--port address.
    #[arg(long, requires = "cluster_config")]
    cluster_node_id: Option<String>,
    /// The port Raft messages between the replicas of a shard arrive on
    /// (default: the topology's `HOST:PORT@BUS`, else --port + 10000).
    #[arg(long, requires = "cluster_config")]
    cluster_bus_port: Option<u16>,
}

/// `sepkv serve`.
fn serve(cli: &Cli, args: &ServeArgs) -> Result<ExitCode, Failure> {
    let fsync = args.fsync.parse().map_err(Failure::Message)?;
    let protected_mode = match args.protected_mode.as_str() {
        "yes" => true,
        "no" => false,
        o => {
            return Err(Failure::Message(format!(
                "--protected-mode takes yes or no, not {o:?}"
            )))
        }
    };
    // The server's compaction filter drops the field records of deleted,
    // expired and overwritten hashes; it reads the database it filters.
    let filter = sepkv_server::filter::KeyspaceFilter::new();
    let mut opts = options(cli, true)?;
    opts.compaction_filter = Some(filter.clone());
    let db = std::sync::Arc::new(Db::open(&cli.db, opts)?);
    filter.attach(&db);
    let preset = db.stats().ok().and_then(|s| {
        Preset::from_axes(s.index.parse().ok()?, s.value_layout.parse().ok()?)
            .map(|p| p.to_string())
    });
    let config = sepkv_server::Config {
        bind: args.bind.clone(),
        port: args.port,
        fsync,
        requirepass: args.requirepass.clone(),
        maxclients: args.maxclients,
        protected_mode,
        preset: preset.unwrap_or_else(|| "custom".into()),
        cluster: args
            .cluster_config
            .as_ref()
            .map(|file| sepkv_server::cluster::ClusterConfig {
                file: file.clone(),
                node_id: args.cluster_node_id.clone().unwrap_or_default(),
                bus_port: args.cluster_bus_port,
            }),
    };
    sepkv_server::serve(db, config, |addr| {
        println!("ready: listening on {addr}");
        let _ = std::io::stdout().flush();
    })
    .map_err(|e| Failure::Message(e.to_string()))?;
    Ok(ExitCode::SUCCESS)
}

/// A failure of the command: a database error, or a message of the CLI's
/// own.
enum Failure {
    Db(sepkv::Error),
    Message(String),
}

impl From<sepkv::Error> for Failure {
    fn from(e: sepkv::Error) -> Self {
        Failure::Db(e)
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Db(e) => e.fmt(f),
            Failure::Message(m) => f.write_str(m),
        }
    }
}

/// Options for the command: the named preset, or (none named) whatever the
/// database records, `leveldb` for a new one. Commands that may not create
/// a database get `create_if_missing: false`.
fn options(cli: &Cli, creates: bool) -> Result<Options, sepkv::Error> {
    let mut o = match &cli.preset {
        Some(p) => Options::preset(p.parse::<Preset>()?),
        None => Options::default(),
    };
    o.create_if_missing = creates;
    if let Some(m) = &cli.hash_index_mode {
        o.hash_index_mode = m.parse()?;
    }
    Ok(o)
}

fn run(cli: Cli) -> Result<ExitCode, Failure> {
    let creates = matches!(cli.cmd, Cmd::Put { .. } | Cmd::Import { .. });
    let opts = options(&cli, creates)?;
    if !creates && sepkv::stored_config(&cli.db)?.is_none() {
        return Err(Failure::Message(format!(
            "no database at {}",
            cli.db.display()
        )));
    }
    if let Cmd::Verify = cli.cmd {
        return Ok(verify(&cli, opts));
    }
    if let Cmd::Repair = cli.cmd {
        let r = Db::repair(&cli.db, opts)?;
        println!(
            "repaired {}: kept {} table(s) and {} WAL(s), {} entries read; \
             {} key(s) live, {} deleted key(s) kept deleted; last sequence {}",
            cli.db.display(),
            r.tables_kept,
            r.wals_read,
            r.entries_read,
            r.live_keys,
            r.tombstones,
            r.last_sequence
        );
        println!(
            "dropped: {} damaged table(s), {} obsolete table(s); value-store state from a manifest: {}",
            r.tables_dropped.len(),
            r.tables_obsolete,
            if r.value_store_state_kept { "yes" } else { "no" }
        );
        for m in &r.manifests {
            println!("manifest {m}");
        }
        for t in &r.tables_dropped {
            println!("dropped table {t}");
        }
        for w in &r.wal_damage {
            println!("WAL damage {w}");
        }
        for w in &r.warnings {
            println!("warning: {w}");
        }
        println!("keys after repair: {}", r.keys_after);
        return Ok(ExitCode::SUCCESS);
    }
    let read_only = matches!(
        cli.cmd,
        Cmd::Get { .. } | Cmd::Scan { .. } | Cmd::Stats { .. }
    );
    let opened = std::time::Instant::now();
    let db = if read_only {
        Db::open_read_only(&cli.db, opts)?
    } else {
        Db::open(&cli.db, opts)?
    };
    let open_time = opened.elapsed();
    let sync = WriteOptions { sync: true };
    let out = std::io::stdout();
    let mut out = std::io::BufWriter::new(out.lock());
    let code = match &cli.cmd {
        Cmd::Put { key, value } => {
            let mut b = WriteBatch::new();
            b.put(key, value)?;
            db.write(&b, sync)?;
            ExitCode::SUCCESS
        }
        Cmd::Get { key } => match db.get(key)? {
            Some(v) => {
                out.write_all(&v)
                    .and_then(|_| out.write_all(b"\n"))
                    .map_err(stdout_err)?;
                ExitCode::SUCCESS
            }
            None => {
                eprintln!("key {key:?} not found");
                ExitCode::from(1)
            }
        },
        Cmd::Delete { key } => {
            let mut b = WriteBatch::new();
            b.delete(key)?;
            db.write(&b, sync)?;
            ExitCode::SUCCESS
        }
        Cmd::Scan {
            start,
            end,
            limit,
            reverse,
        } => {
            use std::ops::Bound;
            let lower = start.as_deref().map_or(Bound::Unbounded, Bound::Included);
            let upper = end.as_deref().map_or(Bound::Unbounded, Bound::Excluded);
            let scan = db.scan((lower, upper), *reverse)?;
            for (i, r) in scan.enumerate() {
                if limit.is_some_and(|l| i >= l) {
                    break;
                }
                let (k, v) = r?;
                out.write_all(&k)
                    .and_then(|_| out.write_all(b"\t"))
                    .and_then(|_| out.write_all(&v))
                    .and_then(|_| out.write_all(b"\n"))
                    .map_err(stdout_err)?;
            }
            ExitCode::SUCCESS
        }
        Cmd::Import { sync, batch } => {
            import(&db, *sync, (*batch).max(1), &mut out)?;
            ExitCode::SUCCESS
        }
        Cmd::Stats { json } => {
            let s = db.stats()?;
            if *json {
                let text = serde_json::to_string_pretty(&s).expect("stats serialize");
                writeln!(out, "{text}").map_err(stdout_err)?;
            } else {
                print_stats(&s, &mut out).map_err(stdout_err)?;
                // Recovery (a WAL or band replay after a crash) is part
                // of the open.
                writeln!(
                    out,
                    "open time          {:.1} ms (recovery included)",
                    open_time.as_secs_f64() * 1e3
                )
                .map_err(stdout_err)?;
            }
            ExitCode::SUCCESS
        }
        Cmd::Compact => {
            let before = db.stats()?;
            let c = db.compact_range(..)?;
            let after = db.stats()?;
            let tables = |s: &sepkv::DbStats| s.levels.iter().map(|l| l.files).sum::<usize>();
            writeln!(
                out,
                "compacted: {} compaction(s); {} file(s), {} B in; {} file(s), {} B out; \
                 {} entries dropped, {} of them tombstones; tables {} -> {}, level 0 {} -> {}",
                c.compactions,
                c.files_in,
                c.bytes_in,
                c.files_out,
                c.bytes_out,
                c.dropped,
                c.tombstones_dropped,
                tables(&before),
                tables(&after),
                before.levels.first().map_or(0, |l| l.files),
                after.levels.first().map_or(0, |l| l.files),
            )
            .map_err(stdout_err)?;
            ExitCode::SUCCESS
        }
        Cmd::Gc { target } => {
            let before = db.stats()?.disk_bytes;
            let r = db.gc(*target)?;
            let after = db.stats()?.disk_bytes;
            writeln!(
                out,
                "gc: {} steps, read {} B, rewrote {} B, freed {} B; disk {} B -> {} B; garbage ratio now {:.3}",
                r.steps, r.bytes_read, r.bytes_rewritten, r.bytes_freed, before, after, r.garbage_ratio
            )
            .map_err(stdout_err)?;
            ExitCode::SUCCESS
        }
        Cmd::Checkpoint { dir } => {
            let r = db.checkpoint_report(dir)?;
            writeln!(
                out,
                "checkpoint {} at sequence {}: {} file(s) linked ({} B, shared with the source), \
                 {} file(s) copied ({} B)",
                dir.display(),
                r.sequence,
                r.linked_files,
                r.linked_bytes,
                r.copied_files,
                r.copied_bytes
            )
            .map_err(stdout_err)?;
            ExitCode::SUCCESS
        }
        Cmd::Verify | Cmd::Repair => unreachable!("handled above"),
        Cmd::Bench(_) | Cmd::Serve(_) | Cmd::Cluster(_) => unreachable!("handled in main"),
    };
    out.flush().map_err(stdout_err)?;
    drop(out);
    db.close()?;
    Ok(code)
}

fn stdout_err(e: std::io::Error) -> sepkv::Error {
    sepkv::Error::io("<stdout>", e)
}

fn import(
    db: &Db,
    sync: bool,
    batch_size: usize,
    out: &mut impl Write,
) -> Result<(), sepkv::Error> {
    let stdin = std::io::stdin();
    let mut b = WriteBatch::new();
    let mut total = 0u64;
    let opts = WriteOptions { sync };
    let flush =
        |b: &mut WriteBatch, total: &mut u64, out: &mut dyn Write| -> Result<(), sepkv::Error> {
            if b.is_empty() {
                return Ok(());
            }
            db.write(b, opts)?;
            *total += b.len() as u64;
            b.clear();
            writeln!(out, "acked {total}")
                .and_then(|_| out.flush())
                .map_err(stdout_err)
        };
    for (n, line) in stdin.lock().lines().enumerate() {
        let line = line.map_err(|e| sepkv::Error::io("<stdin>", e))?;
        if line.is_empty() {
            continue;
        }
        let (k, v) = line.split_once('\t').ok_or_else(|| {
            sepkv::Error::InvalidArgument(format!("stdin line {}: expected key<TAB>value", n + 1))
        })?;
        b.put(k, v).map_err(|e| match e {
            sepkv::Error::InvalidArgument(m) => {
                sepkv::Error::InvalidArgument(format!("stdin line {}: {m}", n + 1))
            }
            other => other,
        })?;
        if b.len() >= batch_size {
            flush(&mut b, &mut total, out)?;
        }
    }
    flush(&mut b, &mut total, out)?;
    eprintln!("imported {total} records");
    Ok(())
}

fn verify(cli: &Cli, opts: Options) -> ExitCode {
    let db = match Db::open_read_only(&cli.db, opts) {
        Ok(db) => db,
        Err(e) => {
            println!("FAULT {e}");
            return ExitCode::from(1);
        }
    };
    match db.verify() {
        Ok(rep) if rep.faults.is_empty() => {
            println!(
                "ok: {} tables, {} entries, {} manifest edits, {} WAL records, {} value-log records checked",
                rep.tables, rep.entries, rep.manifest_edits, rep.wal_records, rep.value_records
            );
            ExitCode::SUCCESS
        }
        Ok(rep) => {
            for f in &rep.faults {
                println!("FAULT {f}");
            }
            println!("{} fault(s) found", rep.faults.len());
            ExitCode::from(1)
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}

fn print_stats(s: &sepkv::DbStats, out: &mut impl Write) -> std::io::Result<()> {
    let preset = match (s.index.parse(), s.value_layout.parse()) {
        (Ok(i), Ok(l)) => Preset::from_axes(i, l).map(|p| format!("preset {p}, ")),
        _ => None,
    };
    writeln!(
        out,
        "configuration      {}index {}, value layout {}",
        preset.unwrap_or_default(),
        s.index,
        s.value_layout
    )?;
    writeln!(out, "state (what is on disk and in memory now)")?;
    writeln!(out, "  last sequence    {}", s.last_sequence)?;
    writeln!(
        out,
        "  memtable bytes   {}{}",
        s.memtable_bytes,
        if s.immutable_memtable {
            " (+ immutable memtable)"
        } else {
            ""
        }
    )?;
    writeln!(out, "  level  files  bytes")?;
    for l in &s.levels {
        writeln!(out, "  {:>5}  {:>5}  {}", l.level, l.files, l.bytes)?;
    }
    writeln!(
        out,
        "  files          count    size B (ls)  allocated B (du)"
    )?;
    let (mut n, mut size, mut alloc) = (0, 0, 0);
    for g in &s.files {
        writeln!(
            out,
            "  {:<12} {:>6} {:>14} {:>17}",
            g.kind, g.files, g.size_bytes, g.allocated_bytes
        )?;
        n += g.files;
        size += g.size_bytes;
        alloc += g.allocated_bytes;
    }
    writeln!(out, "  {:<12} {n:>6} {size:>14} {alloc:>17}", "total")?;
    if s.value_layout != "inline" {
        let v = &s.value_store;
        writeln!(
            out,
            "  value store      live {} B, garbage {} B (ratio {:.3}; estimates), allocated {} B",
            v.live_bytes,
            v.garbage_bytes,
            v.garbage_ratio(),
            v.file_bytes
        )?;
        writeln!(
            out,
            "  space amp        {:.2} estimated (target {}; {} B possibly hidden in the index)",
            s.space_amp_estimate, s.space_amp_target, s.space_hidden_garbage
        )?;
    }
    writeln!(
        out,
        "counters since this process opened the database (not persisted: each sepkv command starts at 0)"
    )?;
    writeln!(
        out,
        "  flushes {}  compactions {}  trivial moves {}  stall µs {}  write GC steps {}",
        s.flushes, s.compactions, s.trivial_moves, s.write_stall_micros, s.write_gc_steps
    )?;
    if s.value_layout != "inline" {
        writeln!(
            out,
            "  space target: slowdowns {}  stops {}  index compactions {}  missed {}",
            s.space_slowdowns, s.space_stops, s.space_discoveries, s.space_target_misses
        )?;
    }
    writeln!(out, "  io category   bytes read   bytes written")?;
    for ((c, r), (_, w)) in s.io.read.iter().zip(&s.io.written) {
        writeln!(out, "  {:<12} {:>12} {:>15}", c.name(), r, w)?;
    }
    if !s.index_figures.is_empty() {
        writeln!(
            out,
            "index figures (sizes and loads are state; tallies count since open)"
        )?;
        for (k, val) in &s.index_figures {
            writeln!(out, "  {k:<22} {val}")?;
        }
    }
    if !s.value_store_figures.is_empty() {
        writeln!(
            out,
            "value-store figures (positions and sizes are state; the GC tallies count since open)"
        )?;
        for (k, val) in &s.value_store_figures {
            writeln!(out, "  {k:<22} {val}")?;
        }
    }
    if let Some(e) = &s.background_error {
        writeln!(out, "background error   {e}")?;
    }
    Ok(())
}

/// `sepkv bench`: `db_given` says whether `--db` was named on the command
/// line (otherwise the benchmark uses a temporary directory).
fn bench(cli: &Cli, args: &sepkv_bench::cli::BenchArgs, db_given: bool) -> ExitCode {
    let db = db_given.then(|| cli.db.clone());
    match sepkv_bench::cli::run(args, db, cli.preset.as_deref()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}

fn main() -> ExitCode {
    let matches = Cli::command().get_matches();
    let db_given = matches!(
        matches.value_source("db"),
        Some(ValueSource::CommandLine | ValueSource::EnvVariable)
    );
    let cli = match Cli::from_arg_matches(&matches) {
        Ok(c) => c,
        Err(e) => e.exit(),
    };
    if let Cmd::Bench(args) = &cli.cmd {
        return bench(&cli, args, db_given);
    }
    if let Cmd::Cluster(c) = &cli.cmd {
        return match cluster(c) {
            Ok(c) => c,
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::from(2)
            }
        };
    }
    if let Cmd::Serve(args) = &cli.cmd {
        return match serve(&cli, args) {
            Ok(c) => c,
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::from(2)
            }
        };
    }
    match run(cli) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}
