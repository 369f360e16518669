//! The `IDENTITY` file: what kind of database a directory holds.
//!
//! ```text
//! sepkv-identity
//! format=2
//! index=lsm
//! layout=inline
//! wal=on               `off` in WiscKey's log mode (`Options::wal = false`)
//! v1-vlog-below=N      only in a database upgraded from format 1, see below
//! v1-hseg-below=N      likewise
//! crc=XXXXXXXX          masked CRC-32C (hex) of every line above
//! ```
//! Written atomically when the database is created, and once more when a
//! read-write open upgrades a format-1 database to format 2. On open it
//! tells a sepkv database from any other directory, supplies the
//! configuration when the options name none, and refuses a configuration
//! other than the recorded one. The `wal` line came later in format 1: a
//! file without it was written before the mode was recorded, and the
//! options decide (as they did then); builds of that time ignore the line.
//!
//! Format 2 moved the value log and HashKV segments to the shared
//! value-record codec. An upgraded database keeps its older files as they
//! are: `v1-vlog-below` and `v1-hseg-below` record that the value-log
//! files and HashKV segments numbered below them hold the format-1 codecs
//! ([`LegacyFiles`]). Frozen: format version 2.

use crate::error::{Error, Result};
use crate::format::checksum::{crc, mask};
use crate::options::{describe_config, IndexKind, ValueLayout};
use std::path::Path;

/// The on-disk format version this build writes (and reads).
pub const FORMAT_VERSION: u32 = 2;

/// The oldest format version this build reads: a database of this version
/// opens, and a read-write open upgrades it to [`FORMAT_VERSION`].
pub const OLDEST_FORMAT_VERSION: u32 = 1;

const MAGIC: &str = "sepkv-identity";

/// The recorded configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Identity {
    /// Format version.
    pub format: u32,
    /// Index structure.
    pub index: IndexKind,
    /// Value layout.
    pub layout: ValueLayout,
    /// `Some(false)` in WiscKey's log mode (the value log is the only log);
    /// `None` when the file predates the record.
    pub wal: Option<bool>,
    /// Files that hold the format-1 record codecs (all zero unless the
    /// database was upgraded from format 1; meaningless in a format-1
    /// record, whose every value-log file and segment is in them).
    pub legacy: LegacyFiles,
}

/// The value-store files of a database upgraded from format 1 that hold
/// the format-1 record codecs (`docs/format.md`, "Files in the older
/// record codecs"). Each number is the first file the upgrading open left
/// to the shared codec; 0 means none.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LegacyFiles {
    /// Value-log files (`NNNNNN.vlog`: the value log, or HashKV's cold
    /// data log) numbered below this.
    pub vlog_below: u64,
    /// HashKV segments (`NNNNNN.hseg`) numbered below this.
    pub hseg_below: u64,
}

impl Identity {
    /// The record of a new database of the configuration `opts` selects,
    /// in this build's format.
    pub fn new(opts: &crate::Options) -> Identity {
        Identity {
            format: FORMAT_VERSION,
            index: opts.index_kind(),
            layout: opts.layout(),
            wal: Some(opts.wal),
            legacy: LegacyFiles::default(),
        }
    }

    /// Renders the file body.
    pub fn encode(&self) -> String {
        let mut body = format!(
            "{MAGIC}\nformat={}\nindex={}\nlayout={}\n{}",
            self.format,
            self.index,
            self.layout,
            match self.wal {
                None => "",
                Some(true) => "wal=on\n",
                Some(false) => "wal=off\n",
            }
        );
        for (name, n) in [
            ("v1-vlog-below", self.legacy.vlog_below),
            ("v1-hseg-below", self.legacy.hseg_below),
        ] {
            if n > 0 {
                body.push_str(&format!("{name}={n}\n"));
            }
        }
        format!("{body}crc={:08x}\n", mask(crc(body.as_bytes())))
    }

    /// Parses the file body read from `path`.
    ///
    /// # Errors
    /// `NotADatabase` when the magic line is missing (a foreign file);
    /// `Corruption` for a checksum mismatch or a malformed field;
    /// `FormatTooNew` for a format version newer than [`FORMAT_VERSION`];
    /// `NotADatabase` for one older than [`OLDEST_FORMAT_VERSION`].
    pub fn decode(path: &Path, data: &[u8]) -> Result<Identity> {
        let dir = path.parent().unwrap_or(Path::new("."));
        if !data.starts_with(MAGIC.as_bytes()) {
            return Err(Error::NotADatabase {
                path: dir.into(),
                reason: "IDENTITY lacks the sepkv magic line".into(),
            });
        }
        // From here on the file claims to be ours: damage is corruption.
        let text = std::str::from_utf8(data).map_err(|e| {
            Error::corruption(path, e.valid_up_to() as u64, "IDENTITY is not valid UTF-8")
        })?;
        let crc_at = text
            .rfind("crc=")
            .ok_or_else(|| Error::corruption(path, 0, "IDENTITY has no checksum"))?;
        let (body, tail) = text.split_at(crc_at);
        let stored =
            u32::from_str_radix(tail.trim_start_matches("crc=").trim_end(), 16).map_err(|_| {
                Error::corruption(path, crc_at as u64, "IDENTITY checksum is malformed")
            })?;
        if stored != mask(crc(body.as_bytes())) {
            return Err(Error::corruption(path, 0, "IDENTITY checksum mismatch"));
        }
        let find = |name: &str| -> Option<&str> {
            body.lines()
                .find_map(|l| l.strip_prefix(name).and_then(|r| r.strip_prefix('=')))
        };
        let field = |name: &str| -> Result<&str> {
            find(name).ok_or_else(|| Error::corruption(path, 0, format!("IDENTITY lacks {name}")))
        };
        // The parsers' messages, without the `invalid argument: ` prefix.
        let bad = |e: Error| match e {
            Error::InvalidArgument(m) => Error::corruption(path, 0, format!("IDENTITY: {m}")),
            other => other,
        };
        let format: u32 = field("format")?
            .parse()
            .map_err(|_| Error::corruption(path, 0, "IDENTITY format is not a number"))?;
        if format > FORMAT_VERSION {
            // A newer build wrote it: say so, with both versions, rather
            // than calling it foreign (docs/operations.md, format policy).
            return Err(Error::FormatTooNew {
                path: path.into(),
                found: format,
                supported: FORMAT_VERSION,
            });
        }
        if format < OLDEST_FORMAT_VERSION {
            return Err(Error::NotADatabase {
                path: dir.into(),
                reason: format!(
                    "format version {format} is not supported (this build reads {OLDEST_FORMAT_VERSION} to {FORMAT_VERSION})"
                ),
            });
        }
        let index = field("index")?.parse().map_err(bad)?;
        let layout = field("layout")?.parse().map_err(bad)?;
        let wal = match find("wal") {
            None => None,
            Some("on") => Some(true),
            Some("off") => Some(false),
            Some(other) => {
                return Err(Error::corruption(
                    path,
                    0,
                    format!("IDENTITY: unknown wal mode {other:?}"),
                ))
            }
        };
        let number = |name: &str| -> Result<u64> {
            match find(name) {
                None => Ok(0),
                Some(v) => v.parse().map_err(|_| {
                    Error::corruption(path, 0, format!("IDENTITY: {name} is not a number"))
                }),
            }
        };
        let legacy = LegacyFiles {
            vlog_below: number("v1-vlog-below")?,
            hseg_below: number("v1-hseg-below")?,
        };
        Ok(Identity {
            format,
            index,
            layout,
            wal,
            legacy,
        })
    }

    /// The configuration in the user's words (the preset name when one
    /// has it), for messages.
    pub fn describe(&self) -> String {
        let mut s = describe_config(self.index, self.layout);
        if self.wal == Some(false) {
            s.push_str(" without a write-ahead log (wal = false)");
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrip_and_damage() {
        let id = Identity {
            format: 1,
            index: IndexKind::Lsm,
            layout: ValueLayout::Inline,
            wal: Some(true),
            legacy: LegacyFiles::default(),
        };
        let p = Path::new("db/IDENTITY");
        let enc = id.encode();
        assert!(enc.contains("\nwal=on\n"), "{enc}");
        assert_eq!(Identity::decode(p, enc.as_bytes()).unwrap(), id);
        let old = Identity { wal: None, ..id };
        assert!(!old.encode().contains("wal"));
        assert_eq!(Identity::decode(p, old.encode().as_bytes()).unwrap(), old);
        let log_mode = Identity {
            layout: ValueLayout::Vlog,
            wal: Some(false),
            ..id
        };
        let enc2 = log_mode.encode();
        assert!(enc2.contains("\nwal=off\n"), "{enc2}");
        assert_eq!(Identity::decode(p, enc2.as_bytes()).unwrap(), log_mode);
        assert_eq!(
            log_mode.describe(),
            "preset wisckey (index lsm, value layout vlog) without a write-ahead log (wal = false)"
        );
        // A bad name under a valid checksum is named once, without the
        // parser's `invalid argument:` prefix.
        let body = format!("{MAGIC}\nformat=1\nindex=lsn\nlayout=inline\n");
        let text = format!("{body}crc={:08x}\n", mask(crc(body.as_bytes())));
        match Identity::decode(p, text.as_bytes()) {
            Err(Error::Corruption { reason, .. }) => {
                assert_eq!(
                    reason,
                    "IDENTITY: unknown index \"lsn\"; known: lsm lwc hash"
                )
            }
            other => panic!("{other:?}"),
        }
        let bad = enc.replace("inline", "inlinf");
        assert!(Identity::decode(p, bad.as_bytes())
            .unwrap_err()
            .is_corruption());
        assert!(matches!(
            Identity::decode(p, b"hello"),
            Err(Error::NotADatabase { .. })
        ));
    }
}
