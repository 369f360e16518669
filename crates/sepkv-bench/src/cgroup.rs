//! `--memory-limit`: device-bound runs under a memory cgroup.
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
        let (version, parent) = locate(&read("/proc/self/cgroup")?, &read("/proc/self/mountinfo")?)
            .ok_or_else(|| {
                unavailable("no memory controller is mounted for this process".into())
            })?;
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

/// The hierarchy and directory of this process's memory cgroup, from the
/// text of `/proc/self/cgroup` and `/proc/self/mountinfo`; v1's `memory`
/// controller is preferred when both are mounted.
fn locate(cgroup: &str, mountinfo: &str) -> Option<(CgroupVersion, PathBuf)> {
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
        if controllers.split(',').any(|c| c == "memory") {
            let m = mounts.iter().find(|(_, _, fs, opts)| {
                fs == "cgroup" && opts.split(',').any(|o| o == "memory")
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
            locate(cg, MOUNTINFO),
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
            locate(cg, mi),
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
            locate(cg, mi),
            Some((CgroupVersion::V2, PathBuf::from("/sys/fs/cgroup/inner")))
        );
    }

    #[test]
    fn no_cgroup_mount_is_none() {
        assert_eq!(
            locate("4:memory:/a\n", "1 0 8:1 / / rw - ext4 /dev/sda rw\n"),
            None
        );
        assert_eq!(locate("", MOUNTINFO), None);
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
    fn a_bound_below_the_minimum_is_refused_before_touching_cgroups() {
        match MemoryLimit::apply(1 << 20) {
            Err(BenchError::InvalidArgument(m)) => assert!(m.contains("64 MiB"), "{m}"),
            other => panic!("expected InvalidArgument, got {other:?}"),
        }
    }
}
