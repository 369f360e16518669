//! `--memory-limit`: device-bound runs under a memory cgroup;
//! `--device-bandwidth`: a slower device emulated with the block layer's
//! throttle ([`IoLimit`]).
//!
//! [`MemoryLimit::apply`] makes a child of the process's memory cgroup,
//! bounds it to the given bytes and moves the whole process (every thread)
//! into it. A memory cgroup charges the page cache its members fill as well
//! as their heap, so once the data outgrows the bound, reads go to the
//! device — the setting of the seeds' device experiments, with the engines'
//! own caches inside the same bound. Dropping the limit moves the process
//! back and removes the child group.
//!
//! Both hierarchies are supported: cgroup v1 (the `memory` controller's
//! `memory.limit_in_bytes`, and `memory.memsw.limit_in_bytes` when swap
//! accounting is on, so the bound cannot be dodged by swapping) and cgroup
//! v2 (`memory.max`, `memory.swap.max = 0`). Creating a group needs write
//! access to the cgroup file system, in practice root; without it, or
//! without a memory controller, [`MemoryLimit::apply`] fails with
//! [`BenchError::Unavailable`] saying why.

use crate::error::{BenchError, Result};
use std::path::{Path, PathBuf};

/// The smallest bound accepted (bytes): below it the harness itself, with
/// its key permutation and latency histograms, would be killed by the
/// out-of-memory handler rather than measure anything.
pub const MIN_MEMORY_LIMIT: u64 = 64 << 20;

/// Which cgroup hierarchy holds the limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CgroupVersion {
    /// cgroup v1, `memory` controller.
    V1,
    /// cgroup v2 (unified hierarchy).
    V2,
}

/// A memory bound on this process, in force until dropped.
#[derive(Debug)]
pub struct MemoryLimit {
    /// The child group the process was moved into.
    group: PathBuf,
    /// The group it came from (where it returns on drop).
    parent: PathBuf,
    version: CgroupVersion,
    bytes: u64,
}

impl MemoryLimit {
    /// Bounds this process's memory, page cache included, to `bytes`.
    ///
    /// # Errors
    /// [`BenchError::InvalidArgument`] for a bound under
    /// [`MIN_MEMORY_LIMIT`]; [`BenchError::Unavailable`] when no memory
    /// cgroup is found or it cannot be written (not root, a read-only
    /// cgroup file system, the v2 memory controller not delegated).
    pub fn apply(bytes: u64) -> Result<MemoryLimit> {
        if bytes < MIN_MEMORY_LIMIT {
            return Err(BenchError::InvalidArgument(format!(
                "--memory-limit {bytes}: at least {MIN_MEMORY_LIMIT} bytes (64 MiB)"
            )));
        }
        let unavailable = |why: String| {
            BenchError::Unavailable(format!(
                "--memory-limit needs a writable memory cgroup (v1 or v2), usually root: {why}"
            ))
        };
        let read =
            |p: &str| std::fs::read_to_string(p).map_err(|e| unavailable(format!("{p}: {e}")));
        let (version, parent) = locate(
            &read("/proc/self/cgroup")?,
            &read("/proc/self/mountinfo")?,
            "memory",
        )
        .ok_or_else(|| unavailable("no memory controller is mounted for this process".into()))?;
        let group = parent.join(format!("sepkv-bench-{}", std::process::id()));
        let io = |p: &Path, e: std::io::Error| unavailable(format!("{}: {e}", p.display()));
        if !group.is_dir() {
            std::fs::create_dir(&group).map_err(|e| io(&group, e))?;
        }
        let limit = MemoryLimit {
            group,
            parent,
            version,
            bytes,
        };
        // From here on a failure removes the group again (Drop).
        let write = |name: &str, value: String| {
            let p = limit.group.join(name);
            std::fs::write(&p, value).map_err(|e| io(&p, e))
        };
        match version {
            CgroupVersion::V1 => {
                write("memory.limit_in_bytes", bytes.to_string())?;
                if limit.group.join("memory.memsw.limit_in_bytes").exists() {
                    write("memory.memsw.limit_in_bytes", bytes.to_string())?;
                }
            }
            CgroupVersion::V2 => {
                if !limit.group.join("memory.max").exists() {
                    return Err(unavailable(format!(
                        "the memory controller is not enabled under {} (cgroup.subtree_control)",
                        limit.parent.display()
                    )));
                }
                write("memory.max", bytes.to_string())?;
                if limit.group.join("memory.swap.max").exists() {
                    write("memory.swap.max", "0".into())?;
                }
            }
        }
        write("cgroup.procs", std::process::id().to_string())?;
        Ok(limit)
    }

    /// The bound in bytes.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// The cgroup hierarchy in use.
    pub fn version(&self) -> CgroupVersion {
        self.version
    }

    /// The group the process runs in while the limit holds.
    pub fn group(&self) -> &Path {
        &self.group
    }

    /// Bytes charged to the group now (heap and page cache), if readable.
    pub fn usage(&self) -> Option<u64> {
        let name = match self.version {
            CgroupVersion::V1 => "memory.usage_in_bytes",
            CgroupVersion::V2 => "memory.current",
        };
        std::fs::read_to_string(self.group.join(name))
            .ok()?
            .trim()
            .parse()
            .ok()
    }
}

impl Drop for MemoryLimit {
    fn drop(&mut self) {
        // Back to where the process came from; the group can only be
        // removed once it has no members. Its page cache moves to the
        // parent with it (v1 reparents charges, v2 likewise).
        let _ = std::fs::write(
            self.parent.join("cgroup.procs"),
            std::process::id().to_string(),
        );
        if let Err(e) = std::fs::remove_dir(&self.group) {
            eprintln!(
                "note: could not remove the memory cgroup {}: {e}",
                self.group.display()
            );
        }
    }
}

/// A bandwidth bound on this process's I/O to the device that holds a
/// directory (`--device-bandwidth`), in force until dropped.
///
/// It emulates a slower device — a hard drive's 150–170 MB/s, the setting of
/// the LWC-tree's load experiments (§5, Table 2) — on a faster one, with the
/// block layer's throttle: cgroup v1's `blkio.throttle.{read,write}_bps_device`
/// or cgroup v2's `io.max`. The bound is per direction (reads and writes
/// each get the full rate) and counts bytes only, not seeks.
///
/// **What is charged.** Reads, and writes that the process itself sends to
/// the device (`fsync`, `fdatasync`, `sync_file_range`, direct I/O), are
/// charged on both hierarchies. Dirty pages that the kernel's flusher
/// threads write back on their own are charged only on v2 with the memory
/// and io controllers both enabled (cgroup writeback); on v1 they pass
/// unthrottled. [`IoLimit::charged`] tells how many bytes the bound saw, to
/// set beside the process's own write count.
#[derive(Debug)]
pub struct IoLimit {
    group: PathBuf,
    /// Where the process returns on drop; `None` when the bound was set on
    /// a group this harness made already (v2 with `--memory-limit`).
    parent: Option<PathBuf>,
    version: CgroupVersion,
    device: (u32, u32),
    read_bps: u64,
    write_bps: u64,
}

/// The smallest rate accepted (bytes per second): below it a benchmark
/// would take hours rather than show a device-bound ratio.
pub const MIN_DEVICE_BANDWIDTH: u64 = 1 << 20;

impl IoLimit {
    /// Bounds this process's reads to `read_bps` and writes to `write_bps`
    /// (bytes per second) on the whole disk holding `dir`.
    ///
    /// # Errors
    /// [`BenchError::InvalidArgument`] for a rate under
    /// [`MIN_DEVICE_BANDWIDTH`]; [`BenchError::Unavailable`] when `dir` is
    /// not on a block device (tmpfs, overlay) or no writable `blkio` (v1) /
    /// `io` (v2) cgroup is found (not root, the v2 io controller not
    /// enabled in the parent's `cgroup.subtree_control`).
    pub fn apply(dir: &Path, read_bps: u64, write_bps: u64) -> Result<IoLimit> {
        if read_bps.min(write_bps) < MIN_DEVICE_BANDWIDTH {
            return Err(BenchError::InvalidArgument(format!(
                "--device-bandwidth {read_bps}:{write_bps}: at least {MIN_DEVICE_BANDWIDTH} bytes per second (1 MiB/s) each way"
            )));
        }
        let unavailable = |why: String| {
            BenchError::Unavailable(format!(
                "--device-bandwidth needs a block device and a writable blkio (v1) or io (v2) cgroup, usually root: {why}"
            ))
        };
        let device = whole_disk(dir).map_err(unavailable)?;
        let read =
            |p: &str| std::fs::read_to_string(p).map_err(|e| unavailable(format!("{p}: {e}")));
        let (cgroup, mountinfo) = (read("/proc/self/cgroup")?, read("/proc/self/mountinfo")?);
        let (version, current) = locate(&cgroup, &mountinfo, "blkio")
            .or_else(|| locate(&cgroup, &mountinfo, "io"))
            .ok_or_else(|| unavailable("no blkio or io controller is mounted".into()))?;
        let io = |p: &Path, e: std::io::Error| unavailable(format!("{}: {e}", p.display()));
        // On v2 a process lives in one group: if it already runs in the
        // memory-limit group made by this harness, bound that one too.
        let reuse = version == CgroupVersion::V2
            && current
                .file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("sepkv-bench-"));
        let (group, parent) = if reuse {
            (current, None)
        } else {
            let group = current.join(format!("sepkv-bench-io-{}", std::process::id()));
            if !group.is_dir() {
                std::fs::create_dir(&group).map_err(|e| io(&group, e))?;
            }
            (group, Some(current))
        };
        let limit = IoLimit {
            group,
            parent,
            version,
            device,
            read_bps,
            write_bps,
        };
        // From here on a failure removes the group again (Drop).
        let write = |name: &str, value: String| {
            let p = limit.group.join(name);
            std::fs::write(&p, value).map_err(|e| io(&p, e))
        };
        let (major, minor) = device;
        match version {
            CgroupVersion::V1 => {
                write(
                    "blkio.throttle.read_bps_device",
                    format!("{major}:{minor} {read_bps}"),
                )?;
                write(
                    "blkio.throttle.write_bps_device",
                    format!("{major}:{minor} {write_bps}"),
                )?;
            }
            CgroupVersion::V2 => {
                if !limit.group.join("io.max").exists() {
                    return Err(unavailable(format!(
                        "the io controller is not enabled above {} (cgroup.subtree_control)",
                        limit.group.display()
                    )));
                }
                write(
                    "io.max",
                    format!("{major}:{minor} rbps={read_bps} wbps={write_bps}"),
                )?;
            }
        }
        if limit.parent.is_some() {
            write("cgroup.procs", std::process::id().to_string())?;
        }
        Ok(limit)
    }

    /// The bounded device (major, minor).
    pub fn device(&self) -> (u32, u32) {
        self.device
    }

    /// The bounds, bytes per second: (reads, writes).
    pub fn rates(&self) -> (u64, u64) {
        (self.read_bps, self.write_bps)
    }

    /// Bytes charged to the bound so far on its device: (read, written);
    /// `None` where the group's statistics cannot be read.
    pub fn charged(&self) -> Option<(u64, u64)> {
        let (major, minor) = self.device;
        let dev = format!("{major}:{minor}");
        match self.version {
            CgroupVersion::V1 => {
                let text =
                    std::fs::read_to_string(self.group.join("blkio.throttle.io_service_bytes"))
                        .ok()?;
                Some(parse_v1_service_bytes(&text, &dev))
            }
            CgroupVersion::V2 => {
                let text = std::fs::read_to_string(self.group.join("io.stat")).ok()?;
                Some(parse_v2_io_stat(&text, &dev))
            }
        }
    }
}

impl Drop for IoLimit {
    fn drop(&mut self) {
        let Some(parent) = &self.parent else {
            // A shared v2 group: lift the bound, the memory limit's drop
            // removes the group.
            let (major, minor) = self.device;
            let _ = std::fs::write(
                self.group.join("io.max"),
                format!("{major}:{minor} rbps=max wbps=max"),
            );
            return;
        };
        let _ = std::fs::write(parent.join("cgroup.procs"), std::process::id().to_string());
        if let Err(e) = std::fs::remove_dir(&self.group) {
            eprintln!(
                "note: could not remove the io cgroup {}: {e}",
                self.group.display()
            );
        }
    }
}

/// The whole disk (major, minor) that holds `dir`: the throttle takes
/// disks, not partitions.
fn whole_disk(dir: &Path) -> std::result::Result<(u32, u32), String> {
    use std::os::unix::fs::MetadataExt;
    let dev = std::fs::metadata(dir)
        .map_err(|e| format!("{}: {e}", dir.display()))?
        .dev();
    // glibc's encoding of dev_t.
    let major = (((dev >> 8) & 0xfff) | ((dev >> 32) & !0xfff)) as u32;
    let minor = ((dev & 0xff) | ((dev >> 12) & !0xff)) as u32;
    let sys = PathBuf::from(format!("/sys/dev/block/{major}:{minor}"));
    if !sys.exists() {
        return Err(format!(
            "{} is on device {major}:{minor}, which is not a block device",
            dir.display()
        ));
    }
    if !sys.join("partition").exists() {
        return Ok((major, minor));
    }
    // A partition: its directory sits inside its disk's.
    let disk = std::fs::canonicalize(&sys)
        .ok()
        .and_then(|p| p.parent().map(|d| d.join("dev")))
        .and_then(|p| std::fs::read_to_string(p).ok())
        .ok_or_else(|| format!("cannot find the disk of partition {major}:{minor}"))?;
    parse_major_minor(disk.trim())
        .ok_or_else(|| format!("cannot read the disk of partition {major}:{minor}: {disk:?}"))
}

fn parse_major_minor(text: &str) -> Option<(u32, u32)> {
    let (a, b) = text.split_once(':')?;
    Some((a.parse().ok()?, b.parse().ok()?))
}

/// (read, written) bytes of `dev` in v1's `blkio.throttle.io_service_bytes`
/// ("254:0 Read 4096" lines).
fn parse_v1_service_bytes(text: &str, dev: &str) -> (u64, u64) {
    let (mut read, mut written) = (0, 0);
    for line in text.lines() {
        let mut f = line.split_whitespace();
        if f.next() != Some(dev) {
            continue;
        }
        match (f.next(), f.next().and_then(|v| v.parse::<u64>().ok())) {
            (Some("Read"), Some(v)) => read = v,
            (Some("Write"), Some(v)) => written = v,
            _ => {}
        }
    }
    (read, written)
}

/// (read, written) bytes of `dev` in v2's `io.stat`
/// ("254:0 rbytes=4096 wbytes=8192 rios=1 ..." lines).
fn parse_v2_io_stat(text: &str, dev: &str) -> (u64, u64) {
    let (mut read, mut written) = (0, 0);
    for line in text.lines() {
        let mut f = line.split_whitespace();
        if f.next() != Some(dev) {
            continue;
        }
        for kv in f {
            match kv.split_once('=') {
                Some(("rbytes", v)) => read = v.parse().unwrap_or(0),
                Some(("wbytes", v)) => written = v.parse().unwrap_or(0),
                _ => {}
            }
        }
    }
    (read, written)
}

/// Parses `--device-bandwidth`: one rate for both directions (`150MB`) or
/// `READ:WRITE` (`169MB:155MB`), each a byte count per second as
/// [`parse_bytes`] reads it.
///
/// # Errors
/// [`BenchError::InvalidArgument`] naming the text.
pub fn parse_bandwidth(text: &str) -> Result<(u64, u64)> {
    match text.split_once(':') {
        Some((r, w)) => Ok((parse_bytes(r)?, parse_bytes(w)?)),
        None => {
            let b = parse_bytes(text)?;
            Ok((b, b))
        }
    }
}

/// The hierarchy and directory of this process's cgroup for `controller`
/// (`memory`, `blkio`), from the text of `/proc/self/cgroup` and
/// `/proc/self/mountinfo`; a v1 hierarchy with the controller is preferred
/// when both are mounted.
fn locate(cgroup: &str, mountinfo: &str, controller: &str) -> Option<(CgroupVersion, PathBuf)> {
    // mountinfo: "ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTS... - FSTYPE SOURCE SUPEROPTS"
    let mounts: Vec<(String, String, String, String)> = mountinfo
        .lines()
        .filter_map(|l| {
            let (pre, post) = l.split_once(" - ")?;
            let pre: Vec<&str> = pre.split_whitespace().collect();
            let post: Vec<&str> = post.split_whitespace().collect();
            Some((
                pre.get(3)?.to_string(),
                pre.get(4)?.to_string(),
                post.first()?.to_string(),
                post.get(2).unwrap_or(&"").to_string(),
            ))
        })
        .collect();
    let join = |mount_root: &str, mount_point: &str, path: &str| -> PathBuf {
        // The cgroup path is relative to the hierarchy's root; a mount of a
        // sub-tree (ROOT other than "/") shows only what lies below it.
        let rel = path
            .strip_prefix(mount_root)
            .unwrap_or(path)
            .trim_start_matches('/');
        Path::new(mount_point).join(rel)
    };
    for line in cgroup.lines() {
        let mut parts = line.splitn(3, ':');
        let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
        if controllers.split(',').any(|c| c == controller) {
            let m = mounts.iter().find(|(_, _, fs, opts)| {
                fs == "cgroup" && opts.split(',').any(|o| o == controller)
            })?;
            return Some((CgroupVersion::V1, join(&m.0, &m.1, path)));
        }
    }
    for line in cgroup.lines() {
        if let Some(path) = line.strip_prefix("0::") {
            let m = mounts.iter().find(|(_, _, fs, _)| fs == "cgroup2")?;
            return Some((CgroupVersion::V2, join(&m.0, &m.1, path)));
        }
    }
    None
}

/// Parses a byte count with an optional unit: `400000000`, `400M`, `400MB`
/// (10^6), `400MiB` (2^20), likewise K/KB/KiB, G/GB/GiB; units are
/// case-insensitive and a bare `M` means MiB, as memory sizes usually do.
///
/// # Errors
/// [`BenchError::InvalidArgument`] naming the text.
pub fn parse_bytes(text: &str) -> Result<u64> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let bad = || {
        BenchError::InvalidArgument(format!(
            "{text:?}: expected bytes such as 400000000, 400M, 400MiB or 1GB"
        ))
    };
    let n: u64 = num.parse().map_err(|_| bad())?;
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kib" => 1 << 10,
        "m" | "mib" => 1 << 20,
        "g" | "gib" => 1 << 30,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        _ => return Err(bad()),
    };
    n.checked_mul(mult).ok_or_else(bad)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MOUNTINFO: &str = "\
24 30 0:22 / /sys/fs/cgroup rw,nosuid - tmpfs tmpfs ro,mode=755
31 24 0:27 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
32 24 0:28 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
40 24 0:35 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";

    #[test]
    fn v1_memory_controller_is_preferred() {
        let cg = "4:memory:/jobs/a\n1:cpu:/\n0::/\n";
        assert_eq!(
            locate(cg, MOUNTINFO, "memory"),
            Some((
                CgroupVersion::V1,
                PathBuf::from("/sys/fs/cgroup/memory/jobs/a")
            ))
        );
    }

    #[test]
    fn v2_is_used_when_memory_has_no_v1_controller() {
        let cg = "0::/user.slice/run-1\n";
        let mi = "40 24 0:35 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n";
        assert_eq!(
            locate(cg, mi, "memory"),
            Some((
                CgroupVersion::V2,
                PathBuf::from("/sys/fs/cgroup/user.slice/run-1")
            ))
        );
    }

    #[test]
    fn a_sub_tree_mount_strips_its_root() {
        let cg = "0::/outer/inner\n";
        let mi = "40 24 0:35 /outer /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n";
        assert_eq!(
            locate(cg, mi, "memory"),
            Some((CgroupVersion::V2, PathBuf::from("/sys/fs/cgroup/inner")))
        );
    }

    #[test]
    fn no_cgroup_mount_is_none() {
        assert_eq!(
            locate(
                "4:memory:/a\n",
                "1 0 8:1 / / rw - ext4 /dev/sda rw\n",
                "memory"
            ),
            None
        );
        assert_eq!(locate("", MOUNTINFO, "memory"), None);
    }

    #[test]
    fn byte_counts_with_units() {
        assert_eq!(parse_bytes("400000000").unwrap(), 400_000_000);
        assert_eq!(parse_bytes("400M").unwrap(), 400 << 20);
        assert_eq!(parse_bytes("400MiB").unwrap(), 400 << 20);
        assert_eq!(parse_bytes("400mb").unwrap(), 400_000_000);
        assert_eq!(parse_bytes("1G").unwrap(), 1 << 30);
        assert_eq!(parse_bytes("2GB").unwrap(), 2_000_000_000);
        for bad in ["", "M", "12X", "-5", "99999999999999999999G"] {
            assert!(parse_bytes(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn blkio_is_found_like_memory() {
        let mi = "33 24 0:29 / /sys/fs/cgroup/blkio rw,relatime - cgroup cgroup rw,blkio\n";
        assert_eq!(
            locate("7:blkio:/jobs/b\n4:memory:/jobs/a\n", mi, "blkio"),
            Some((
                CgroupVersion::V1,
                PathBuf::from("/sys/fs/cgroup/blkio/jobs/b")
            ))
        );
        assert_eq!(locate("4:memory:/jobs/a\n", MOUNTINFO, "blkio"), None);
    }

    #[test]
    fn charged_bytes_are_read_per_device() {
        let v1 = "254:0 Read 4096\n254:0 Write 8192\n254:0 Sync 1\n8:0 Read 77\nTotal 12288\n";
        assert_eq!(parse_v1_service_bytes(v1, "254:0"), (4096, 8192));
        assert_eq!(parse_v1_service_bytes(v1, "8:0"), (77, 0));
        let v2 = "8:0 rbytes=1 wbytes=2 rios=1 wios=1\n254:0 rbytes=4096 wbytes=8192 rios=1 wios=2 dbytes=0 dios=0\n";
        assert_eq!(parse_v2_io_stat(v2, "254:0"), (4096, 8192));
        assert_eq!(parse_v2_io_stat(v2, "9:9"), (0, 0));
    }

    #[test]
    fn bandwidth_is_one_rate_or_read_and_write() {
        assert_eq!(
            parse_bandwidth("150MB").unwrap(),
            (150_000_000, 150_000_000)
        );
        assert_eq!(
            parse_bandwidth("169MB:155MB").unwrap(),
            (169_000_000, 155_000_000)
        );
        assert!(parse_bandwidth("150MB:").is_err());
        assert!(parse_bandwidth("fast").is_err());
        match IoLimit::apply(Path::new("."), 1000, 1 << 30) {
            Err(BenchError::InvalidArgument(m)) => assert!(m.contains("1 MiB/s"), "{m}"),
            other => panic!("expected InvalidArgument, got {other:?}"),
        }
    }

    #[test]
    fn a_bound_below_the_minimum_is_refused_before_touching_cgroups() {
        match MemoryLimit::apply(1 << 20) {
            Err(BenchError::InvalidArgument(m)) => assert!(m.contains("64 MiB"), "{m}"),
            other => panic!("expected InvalidArgument, got {other:?}"),
        }
    }
}
