//! Parse errors: what is wrong, on which line, and what to do.

use std::fmt;

use optio_placement::MapError;

/// A map file that could not be read as a map.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParseError {
    /// 1-based line, when known.
    pub line: Option<usize>,
    /// What is wrong.
    pub kind: ParseErrorKind,
}

/// The ways a map file can be wrong.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ParseErrorKind {
    /// The text does not follow the format's grammar.
    #[error("expected {expected}, found {found}")]
    Syntax {
        /// What the parser expected.
        expected: String,
        /// What it found.
        found: String,
    },
    /// A value of the wrong kind or out of range.
    #[error("{field}: {reason}")]
    Value {
        /// The field.
        field: String,
        /// Why it is refused.
        reason: String,
    },
    /// A feature Optio does not implement.
    #[error("{feature} is not supported: {hint}")]
    Unsupported {
        /// The feature.
        feature: String,
        /// What to do instead.
        hint: String,
    },
    /// The map is well-formed but invalid.
    #[error("{0}")]
    Map(MapError),
    /// JSON that is not JSON.
    #[error("invalid JSON: {0}")]
    Json(String),
    /// TOML that is not TOML.
    #[error("invalid TOML: {0}")]
    Toml(String),
    /// The file is too large to be a map.
    #[error("the file has {bytes} bytes; map files are limited to {limit}")]
    TooLarge {
        /// Size.
        bytes: usize,
        /// Limit.
        limit: usize,
    },
}

impl ParseError {
    /// An error at `line`.
    pub fn new(line: Option<usize>, kind: ParseErrorKind) -> ParseError {
        ParseError { line, kind }
    }

    /// A syntax error.
    pub fn syntax(
        line: Option<usize>,
        expected: impl Into<String>,
        found: impl Into<String>,
    ) -> ParseError {
        ParseError::new(
            line,
            ParseErrorKind::Syntax { expected: expected.into(), found: found.into() },
        )
    }

    /// A bad value.
    pub fn value(
        line: Option<usize>,
        field: impl Into<String>,
        reason: impl Into<String>,
    ) -> ParseError {
        ParseError::new(line, ParseErrorKind::Value { field: field.into(), reason: reason.into() })
    }
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(line) => write!(f, "line {line}: {}", self.kind),
            None => write!(f, "{}", self.kind),
        }
    }
}

impl std::error::Error for ParseError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match &self.kind {
            ParseErrorKind::Map(error) => Some(error),
            _ => None,
        }
    }
}

/// Where each item was defined, to point builder errors at lines.
#[derive(Clone, Debug, Default)]
pub(crate) struct Lines {
    entries: Vec<(optio_placement::Subject, usize)>,
}

impl Lines {
    pub(crate) fn record(&mut self, subject: optio_placement::Subject, line: usize) {
        self.entries.push((subject, line));
    }

    /// Wraps a builder error with the line of the item it is about: the first definition,
    /// or for a duplicate the last one (the builder reports the second of two).
    pub(crate) fn locate(&self, error: MapError) -> ParseError {
        let mut lines = self.entries.iter().filter(|(s, _)| *s == error.subject).map(|(_, l)| *l);
        let duplicate = matches!(
            error.kind,
            optio_placement::MapErrorKind::DuplicateName
                | optio_placement::MapErrorKind::DuplicateId { .. }
        );
        let line = if duplicate { lines.next_back() } else { lines.next() };
        ParseError::new(line, ParseErrorKind::Map(error))
    }
}

/// Why a map cannot be written in one of Ceph's formats.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WriteError {
    /// The map uses an Optio extension that Ceph's formats cannot hold.
    #[error(
        "bucket '{bucket}' uses {feature}, an Optio extension that Ceph cannot hold; write Optio TOML instead, or give the bucket a Ceph algorithm (straw2)"
    )]
    NotCephCompatible {
        /// The bucket.
        bucket: String,
        /// The extension.
        feature: &'static str,
    },
}

/// Refuses maps that Ceph's formats cannot hold: buckets of Optio's own algorithms.
pub(crate) fn check_ceph_compatible(map: &optio_placement::ClusterMap) -> Result<(), WriteError> {
    match map.buckets().find(|b| !b.alg.is_ceph()) {
        Some(bucket) => Err(WriteError::NotCephCompatible {
            bucket: bucket.name.clone(),
            feature: "the 'linear' bucket algorithm (seed 002)",
        }),
        None => Ok(()),
    }
}
