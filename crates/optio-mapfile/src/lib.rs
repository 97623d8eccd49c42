//! # optio-mapfile
//!
//! Cluster map files: Optio's own TOML, the text Ceph's `crushtool -d` writes, and the JSON of
//! `crushtool --dump` (or `ceph osd crush dump`). [`parse`] detects the format from the
//! content ([`detect`]), so every Optio command accepts all three; each format also has its
//! own `parse` and `write` ([`optio_toml`], [`ceph_text`], [`ceph_json`]).
//!
//! Design decisions (details and every known difference from Ceph in `docs/map-format.md`):
//!
//! * **Ceph's meaning, not just its syntax.** A text map means what it means to `crushtool -c`
//!   (Ceph 16.2): missing tunables are the legacy values, weights go through single precision
//!   and are truncated exactly as crushtool does, buckets without ids are numbered in
//!   crushtool's order. The writers reproduce `crushtool -d` and `crushtool --dump` byte for
//!   byte. crushtool is the oracle of the tests.
//! * **Errors say what, where and what to do.** Parsing never panics: every malformed input is
//!   a [`ParseError`] with the line (and key), and semantic problems found by the map builder
//!   are mapped back to the line that defined the offending item.
//! * **Optio TOML round-trips every map exactly** and pins every bucket id, so a saved map is
//!   stable; the Ceph formats keep what Ceph can hold.
//!
//! ```
//! let toml = r#"
//! [[devices]]
//! id = 0
//! capacity = "4TiB"
//! location = { host = "h0" }
//!
//! [[devices]]
//! id = 1
//! capacity = "4TiB"
//! location = { host = "h1" }
//! "#;
//! let map = optio_mapfile::parse(toml).expect("valid");
//! assert_eq!(map.devices().len(), 2);
//! assert_eq!(map.rules()[0].name, "replicated_rule"); // the default rule
//!
//! // The same map as crushtool would decompile it, and back.
//! let text = optio_mapfile::ceph_text::write(&map).expect("no Optio-only buckets");
//! assert!(text.contains("item osd.0 weight 4.000"));
//! let again = optio_mapfile::parse(&text).expect("valid");
//! assert_eq!(again.bucket_by_name("h1").map(|b| b.items.len()), Some(1));
//! ```

#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod ceph_json;
pub mod ceph_text;
mod error;
mod fixed;
pub mod optio_toml;
mod steps;
mod units;

pub use error::{ParseError, ParseErrorKind, WriteError};
pub use units::{UnitError, parse_bytes as parse_size};

use optio_placement::ClusterMap;

/// Largest map file accepted, in bytes.
pub const MAP_FILE_BYTES_MAX: usize = 256 << 20;

/// The formats of map files.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// Optio's TOML.
    OptioToml,
    /// The text of `crushtool -d`.
    CephText,
    /// The JSON of `crushtool --dump`.
    CephJson,
}

impl Format {
    /// A short name for messages.
    pub fn name(self) -> &'static str {
        match self {
            Format::OptioToml => "Optio TOML",
            Format::CephText => "Ceph text (crushtool -d)",
            Format::CephJson => "Ceph JSON (crushtool --dump)",
        }
    }
}

/// Guesses the format of `text` from its first line that is not blank or a comment: JSON
/// starts with `{`; a TOML line is a table header (`[tunables]`, `[[devices]]`) or has a
/// `key = value`; anything else (`device 0 osd.0`, `tunable …`, `host h0 {`) is Ceph text,
/// whose lines never contain `=`.
pub fn detect(text: &str) -> Format {
    for line in text.trim_start_matches('\u{feff}').lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if line.starts_with('{') {
            return Format::CephJson;
        }
        let code = line.split('#').next().unwrap_or(line);
        return if line.starts_with('[') || code.contains('=') {
            Format::OptioToml
        } else {
            Format::CephText
        };
    }
    Format::OptioToml
}

/// Parses a map in any supported format, detected from the content.
pub fn parse(text: &str) -> Result<ClusterMap, ParseError> {
    parse_as(text, detect(text))
}

/// Parses a map in the given format.
pub fn parse_as(text: &str, format: Format) -> Result<ClusterMap, ParseError> {
    if text.len() > MAP_FILE_BYTES_MAX {
        return Err(ParseError::new(
            None,
            ParseErrorKind::TooLarge { bytes: text.len(), limit: MAP_FILE_BYTES_MAX },
        ));
    }
    match format {
        Format::OptioToml => optio_toml::parse(text),
        Format::CephText => ceph_text::parse(text),
        Format::CephJson => ceph_json::parse(text),
    }
}
