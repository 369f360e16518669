//! The `IDENTITY` file: what kind of database a directory holds.
//!
//! ```text
//! sepkv-identity
//! format=1
//! index=lsm
//! layout=inline
//! crc=XXXXXXXX          masked CRC-32C (hex) of every line above
//! ```
//! Written once, atomically, when the database is created. On open it tells
//! a sepkv database from any other directory and refuses a configuration
//! other than the recorded one. Frozen: format version 1.

use crate::error::{Error, Result};
use crate::format::checksum::{crc, mask};
use crate::options::{IndexKind, ValueLayout};
use std::path::Path;

/// The on-disk format version this build writes and reads.
pub const FORMAT_VERSION: u32 = 1;

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
}

impl Identity {
    /// Renders the file body.
    pub fn encode(&self) -> String {
        let body = format!(
            "{MAGIC}\nformat={}\nindex={}\nlayout={}\n",
            self.format, self.index, self.layout
        );
        format!("{body}crc={:08x}\n", mask(crc(body.as_bytes())))
    }

    /// Parses the file body read from `path`.
    ///
    /// # Errors
    /// `NotADatabase` when the magic line is missing (a foreign file);
    /// `Corruption` for a checksum mismatch or a malformed field;
    /// `NotADatabase` for an unsupported format version.
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
        let field = |name: &str| -> Result<&str> {
            body.lines()
                .find_map(|l| l.strip_prefix(name).and_then(|r| r.strip_prefix('=')))
                .ok_or_else(|| Error::corruption(path, 0, format!("IDENTITY lacks {name}")))
        };
        let format: u32 = field("format")?
            .parse()
            .map_err(|_| Error::corruption(path, 0, "IDENTITY format is not a number"))?;
        if format != FORMAT_VERSION {
            return Err(Error::NotADatabase {
                path: dir.into(),
                reason: format!(
                    "format version {format} is not supported (this build reads {FORMAT_VERSION})"
                ),
            });
        }
        let index = field("index")?
            .parse()
            .map_err(|e: Error| Error::corruption(path, 0, e.to_string()))?;
        let layout = field("layout")?
            .parse()
            .map_err(|e: Error| Error::corruption(path, 0, e.to_string()))?;
        Ok(Identity {
            format,
            index,
            layout,
        })
    }

    /// `index+layout`, for messages.
    pub fn describe(&self) -> String {
        format!(
            "index={} layout={} format={}",
            self.index, self.layout, self.format
        )
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
        };
        let p = Path::new("db/IDENTITY");
        let enc = id.encode();
        assert_eq!(Identity::decode(p, enc.as_bytes()).unwrap(), id);
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
