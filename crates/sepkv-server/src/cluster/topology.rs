//! The topology file: which shard serves which hash slots, at which
//! address.
//!
//! ```text
//! # comments and blank lines are ignored
//! version 3
//! shard-a 0-5460 node-a=10.0.0.1:6379
//! shard-b 5461-10922 node-b=10.0.0.2:6379
//! shard-c 10923-16383 node-c=10.0.0.3:6379
//! shard-d - node-d=10.0.0.4:6379
//! ```
//!
//! The first line that is not a comment is `version N` (`N` a positive
//! integer; a node installs a topology only of a higher version than the
//! one in force). Then one shard a line: its name, its slots as ranges
//! (`0-100,200,300-400`; `-` for none, a node about to receive slots), and
//! its nodes as `NODE-ID=HOST:PORT`. Shard names and node IDs are 1–40
//! characters of `[A-Za-z0-9_-]`, each used once. A shard of several
//! nodes is one Raft group ([`super::raft`]); a node may name its Raft bus
//! port as `HOST:PORT@BUS` (default `PORT + 10000`). Every one of the 16384 slots must
//! be covered exactly once; otherwise the topology is refused naming the
//! first slot in error.

use crate::keys::SLOTS;
use std::fmt;

/// One node: its ID and the address clients reach it at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    /// 1–40 characters of `[A-Za-z0-9_-]`.
    pub id: String,
    /// Host name or IP address, as written.
    pub host: String,
    /// TCP port.
    pub port: u16,
    /// The Raft bus port (`HOST:PORT@BUS`), when not `PORT + 10000`.
    pub bus: Option<u16>,
}

impl Node {
    /// `HOST:PORT` (IPv6 addresses in brackets).
    pub fn addr(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }

    /// The port Raft messages reach this node at: the one written after
    /// `@`, else `PORT + 10000` (the Redis cluster-bus convention), `None`
    /// when that is beyond 65535.
    pub fn bus_port(&self) -> Option<u16> {
        self.bus.or_else(|| self.port.checked_add(10000))
    }

    /// `HOST:PORT`, with `@BUS` when the bus port was written.
    pub fn entry(&self) -> String {
        match self.bus {
            Some(b) => format!("{}@{b}", self.addr()),
            None => self.addr(),
        }
    }
}

/// One shard: a set of slot ranges served by its node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shard {
    /// The shard's name.
    pub name: String,
    /// Inclusive slot ranges, in the order written.
    pub slots: Vec<(u16, u16)>,
    /// Its nodes: one, or the replicas of a Raft group.
    pub nodes: Vec<Node>,
}

/// A validated topology.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Topology {
    /// Its version; higher replaces lower.
    pub version: u64,
    /// The shards, in file order.
    pub shards: Vec<Shard>,
    /// The shard index of every slot.
    owner: Vec<u16>,
}

/// Why a topology is refused: the line (1-based, 0 for the whole file)
/// and the reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopologyError {
    /// Line of the file, 0 when the error concerns the whole file.
    pub line: usize,
    /// What is wrong.
    pub reason: String,
}

impl fmt::Display for TopologyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line == 0 {
            write!(f, "topology: {}", self.reason)
        } else {
            write!(f, "topology line {}: {}", self.line, self.reason)
        }
    }
}

impl std::error::Error for TopologyError {}

fn err(line: usize, reason: impl Into<String>) -> TopologyError {
    TopologyError {
        line,
        reason: reason.into(),
    }
}

/// Whether `s` is a valid shard name or node ID.
pub fn valid_id(s: &str) -> bool {
    (1..=40).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// Parses a slot list: `A`, `A-B`, comma separated; `-` for none.
///
/// # Errors
/// A message naming the bad part.
pub fn parse_slots(s: &str) -> Result<Vec<(u16, u16)>, String> {
    if s == "-" {
        return Ok(Vec::new());
    }
    let slot = |p: &str| -> Result<u16, String> {
        p.parse::<u16>()
            .ok()
            .filter(|&n| n < SLOTS)
            .ok_or_else(|| format!("{p:?} is not a slot (0-{})", SLOTS - 1))
    };
    s.split(',')
        .map(|part| {
            let (a, b) = match part.split_once('-') {
                Some((a, b)) => (slot(a)?, slot(b)?),
                None => (slot(part)?, slot(part)?),
            };
            if a > b {
                return Err(format!("range {part:?} runs backwards"));
            }
            Ok((a, b))
        })
        .collect()
}

/// Writes slot ranges as [`parse_slots`] reads them.
pub fn format_slots(ranges: &[(u16, u16)]) -> String {
    if ranges.is_empty() {
        return "-".into();
    }
    ranges
        .iter()
        .map(|&(a, b)| {
            if a == b {
                a.to_string()
            } else {
                format!("{a}-{b}")
            }
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// Sorted slots folded into inclusive ranges.
pub fn ranges_of(slots: impl IntoIterator<Item = u16>) -> Vec<(u16, u16)> {
    let mut out: Vec<(u16, u16)> = Vec::new();
    for s in slots {
        match out.last_mut() {
            Some((_, b)) if *b + 1 == s => *b = s,
            _ => out.push((s, s)),
        }
    }
    out
}

fn parse_node(line: usize, s: &str) -> Result<Node, TopologyError> {
    let (id, addr) = s
        .split_once('=')
        .ok_or_else(|| err(line, format!("{s:?} is not NODE-ID=HOST:PORT")))?;
    if !valid_id(id) {
        return Err(err(
            line,
            format!("node ID {id:?} is not 1-40 characters of [A-Za-z0-9_-]"),
        ));
    }
    let (addr, bus) = match addr.split_once('@') {
        Some((a, b)) => (
            a,
            Some(
                b.parse::<u16>()
                    .ok()
                    .filter(|&p| p > 0)
                    .ok_or_else(|| err(line, format!("{b:?} is not a TCP port")))?,
            ),
        ),
        None => (addr, None),
    };
    let (host, port) = addr
        .rsplit_once(':')
        .ok_or_else(|| err(line, format!("{addr:?} is not HOST:PORT")))?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let port = port
        .parse::<u16>()
        .ok()
        .filter(|&p| p > 0)
        .ok_or_else(|| err(line, format!("{port:?} is not a TCP port")))?;
    if host.is_empty() {
        return Err(err(line, format!("{addr:?} has no host")));
    }
    Ok(Node {
        id: id.into(),
        host: host.into(),
        port,
        bus,
    })
}

impl Topology {
    /// Parses and validates a topology file's text.
    ///
    /// # Errors
    /// The first problem, with its line; for slot coverage, the first slot
    /// covered by no shard or by two.
    pub fn parse(text: &str) -> Result<Topology, TopologyError> {
        let mut version = None;
        let mut shards: Vec<Shard> = Vec::new();
        for (i, raw) in text.lines().enumerate() {
            let line = i + 1;
            let l = raw.split('#').next().unwrap_or("").trim();
            if l.is_empty() {
                continue;
            }
            let words: Vec<&str> = l.split_whitespace().collect();
            if version.is_none() {
                if words.len() != 2 || words[0] != "version" {
                    return Err(err(line, "the first line must be `version N`"));
                }
                let v = words[1]
                    .parse::<u64>()
                    .ok()
                    .filter(|&v| v > 0)
                    .ok_or_else(|| {
                        err(line, format!("{:?} is not a version (1, 2, …)", words[1]))
                    })?;
                version = Some(v);
                continue;
            }
            if words.len() < 3 {
                return Err(err(
                    line,
                    "a shard line is `SHARD SLOTS NODE-ID=HOST:PORT …`",
                ));
            }
            let name = words[0];
            if !valid_id(name) {
                return Err(err(
                    line,
                    format!("shard name {name:?} is not 1-40 characters of [A-Za-z0-9_-]"),
                ));
            }
            if shards.iter().any(|s| s.name == name) {
                return Err(err(line, format!("shard {name} is named twice")));
            }
            let slots = parse_slots(words[1]).map_err(|m| err(line, m))?;
            let nodes = words[2..]
                .iter()
                .map(|w| parse_node(line, w))
                .collect::<Result<Vec<_>, _>>()?;
            for n in &nodes {
                let dup = shards
                    .iter()
                    .flat_map(|s| &s.nodes)
                    .find(|o| o.id == n.id || (o.host == n.host && o.port == n.port));
                if let Some(o) = dup {
                    return Err(err(
                        line,
                        format!(
                            "node {}={} repeats node {}={}",
                            n.id,
                            n.addr(),
                            o.id,
                            o.addr()
                        ),
                    ));
                }
            }
            shards.push(Shard {
                name: name.into(),
                slots,
                nodes,
            });
        }
        let version = version.ok_or_else(|| err(0, "empty: no `version N` line"))?;
        let mut owner = vec![u16::MAX; usize::from(SLOTS)];
        for (i, s) in shards.iter().enumerate() {
            for &(a, b) in &s.slots {
                for slot in a..=b {
                    let o = &mut owner[usize::from(slot)];
                    if *o != u16::MAX {
                        let first = &shards[usize::from(*o)].name;
                        return Err(err(
                            0,
                            format!(
                                "slot {slot} is covered twice: by shard {first} and by shard {}",
                                s.name
                            ),
                        ));
                    }
                    *o = i as u16;
                }
            }
        }
        if let Some(slot) = owner.iter().position(|&o| o == u16::MAX) {
            return Err(err(0, format!("slot {slot} is covered by no shard")));
        }
        Ok(Topology {
            version,
            shards,
            owner,
        })
    }

    /// The shard serving `slot`.
    pub fn shard_of(&self, slot: u16) -> &Shard {
        &self.shards[usize::from(self.owner[usize::from(slot)])]
    }

    /// The node serving `slot`.
    pub fn owner(&self, slot: u16) -> &Node {
        &self.shard_of(slot).nodes[0]
    }

    /// The node of ID `id`, with its shard.
    pub fn node(&self, id: &str) -> Option<(&Shard, &Node)> {
        self.shards
            .iter()
            .find_map(|s| s.nodes.iter().find(|n| n.id == id).map(|n| (s, n)))
    }

    /// The slots `id` serves, as ranges in slot order.
    pub fn slots_of(&self, id: &str) -> Vec<(u16, u16)> {
        ranges_of((0..SLOTS).filter(|&s| self.owner(s).id == id))
    }

    /// Every contiguous run of slots with one owner, in slot order:
    /// `(first, last, shard)`.
    pub fn runs(&self) -> Vec<(u16, u16, &Shard)> {
        let mut out: Vec<(u16, u16, &Shard)> = Vec::new();
        for slot in 0..SLOTS {
            let o = self.owner[usize::from(slot)];
            match out.last_mut() {
                Some((_, b, s)) if std::ptr::eq(*s, &self.shards[usize::from(o)]) => *b = slot,
                _ => out.push((slot, slot, &self.shards[usize::from(o)])),
            }
        }
        out
    }

    /// The same shards with `slots` given to the shard of node `to`, as
    /// version `version`.
    ///
    /// # Errors
    /// An unknown node.
    pub fn with_slots_moved(
        &self,
        slots: &[(u16, u16)],
        to: &str,
        version: u64,
    ) -> Result<Topology, TopologyError> {
        let (target, _) = self
            .node(to)
            .ok_or_else(|| err(0, format!("no node {to} in the topology")))?;
        let target = target.name.clone();
        let moving = |s: u16| slots.iter().any(|&(a, b)| (a..=b).contains(&s));
        let mut shards = self.shards.clone();
        for sh in &mut shards {
            let keep = (0..SLOTS).filter(|&s| {
                if moving(s) {
                    sh.name == target
                } else {
                    self.shard_of(s).name == sh.name
                }
            });
            sh.slots = ranges_of(keep);
        }
        Topology::parse(
            &Topology {
                version,
                shards,
                owner: Vec::new(),
            }
            .to_string(),
        )
    }
}

impl fmt::Display for Topology {
    /// The file text [`Topology::parse`] reads back.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "version {}", self.version)?;
        for s in &self.shards {
            write!(f, "{} {}", s.name, format_slots(&s.slots))?;
            for n in &s.nodes {
                write!(f, " {}={}", n.id, n.entry())?;
            }
            writeln!(f)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const THREE: &str = "# three shards\nversion 3\n\
        a 0-5460 n1=127.0.0.1:7001\n\
        b 5461-10922 n2=127.0.0.1:7002  # the middle\n\
        c 10923-16383 n3=127.0.0.1:7003\n";

    #[test]
    fn parses_and_round_trips() {
        let t = Topology::parse(THREE).unwrap();
        assert_eq!(t.version, 3);
        assert_eq!(t.owner(0).id, "n1");
        assert_eq!(t.owner(5461).addr(), "127.0.0.1:7002");
        assert_eq!(t.owner(16383).id, "n3");
        assert_eq!(t.slots_of("n2"), vec![(5461, 10922)]);
        assert_eq!(t.runs().len(), 3);
        assert_eq!(Topology::parse(&t.to_string()).unwrap(), t);
    }

    #[test]
    fn slot_lists() {
        assert_eq!(
            parse_slots("0-10,12,20-21").unwrap(),
            vec![(0, 10), (12, 12), (20, 21)]
        );
        assert_eq!(parse_slots("-").unwrap(), vec![]);
        assert!(parse_slots("5-3").unwrap_err().contains("backwards"));
        assert!(parse_slots("16384").unwrap_err().contains("not a slot"));
        assert!(parse_slots("1-").is_err());
        assert_eq!(format_slots(&[(0, 10), (12, 12)]), "0-10,12");
        assert_eq!(
            ranges_of([1, 2, 3, 7, 9, 10]),
            vec![(1, 3), (7, 7), (9, 10)]
        );
    }

    #[test]
    fn refuses_with_the_first_slot_in_error() {
        let gap = THREE.replace("5461-10922", "5461-10000,10002-10922");
        let e = Topology::parse(&gap).unwrap_err();
        assert_eq!(e.to_string(), "topology: slot 10001 is covered by no shard");
        let twice = THREE.replace("10923-16383", "10900-16383");
        let e = Topology::parse(&twice).unwrap_err();
        assert!(e.reason.starts_with("slot 10900 is covered twice"), "{e}");
    }

    #[test]
    fn replicas_and_bus_ports() {
        let text = "version 1\ns 0-16383 a=127.0.0.1:7001@17101 b=127.0.0.1:7002 c=h:60000\n";
        let t = Topology::parse(text).unwrap();
        let n = &t.shards[0].nodes;
        assert_eq!(n.len(), 3);
        assert_eq!(n[0].bus_port(), Some(17101));
        assert_eq!(n[1].bus_port(), Some(17002));
        assert_eq!(n[2].bus_port(), None);
        assert_eq!(Topology::parse(&t.to_string()).unwrap(), t);
        assert!(t
            .to_string()
            .contains("a=127.0.0.1:7001@17101 b=127.0.0.1:7002"));
    }

    #[test]
    fn refuses_bad_lines() {
        let cases = [
            ("a 0-16383 n1=h:1\n", 1, "first line"),
            ("version 0\na 0-16383 n1=h:1\n", 1, "not a version"),
            ("version 1\na 0-16383\n", 2, "a shard line"),
            ("version 1\na 0-16383 n1\n", 2, "not NODE-ID"),
            ("version 1\na 0-16383 n1=h:0\n", 2, "not a TCP port"),
            ("version 1\na 0-16383 n!=h:1\n", 2, "node ID"),
            ("version 1\na 0-16383 n1=h:1@0\n", 2, "not a TCP port"),
            (
                "version 1\na 0-100 n1=h:1\na 101-16383 n2=h:2\n",
                3,
                "named twice",
            ),
            (
                "version 1\na 0-100 n1=h:1\nb 101-16383 n1=h:2\n",
                3,
                "repeats",
            ),
            (
                "version 1\na 0-100 n1=h:1\nb 101-16383 n2=h:1\n",
                3,
                "repeats",
            ),
        ];
        for (text, line, msg) in cases {
            let e = Topology::parse(text).unwrap_err();
            assert_eq!(e.line, line, "{text:?}: {e}");
            assert!(e.reason.contains(msg), "{text:?}: {e}");
        }
        assert_eq!(Topology::parse("# nothing\n").unwrap_err().line, 0);
    }

    #[test]
    fn moves_slots_to_a_node() {
        let t = Topology::parse(&format!("{THREE}d - n4=127.0.0.1:7004\n")).unwrap();
        let u = t
            .with_slots_moved(&[(0, 99), (5461, 5470)], "n4", 4)
            .unwrap();
        assert_eq!(u.version, 4);
        assert_eq!(u.slots_of("n4"), vec![(0, 99), (5461, 5470)]);
        assert_eq!(u.slots_of("n1"), vec![(100, 5460)]);
        assert_eq!(u.slots_of("n2"), vec![(5471, 10922)]);
        assert!(t.with_slots_moved(&[(0, 1)], "nope", 4).is_err());
    }
}
