//! Errors of map construction and placement.

use std::fmt;

/// What a map error is about, so that a parser can point at the line that defined it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Subject {
    /// The map as a whole.
    Map,
    /// A device, by name.
    Device(String),
    /// A bucket, by name.
    Bucket(String),
    /// A bucket type, by name.
    Type(String),
    /// A rule, by name.
    Rule(String),
    /// A pool, by name.
    Pool(String),
    /// The tunables.
    Tunable(String),
    /// A choose_args (weight-set) entry, by its id.
    ChooseArgs(i64),
    /// The membership section (server ranks of `elastic` pools).
    Membership,
    /// A membership version, by its number.
    Version(u64),
}

impl fmt::Display for Subject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Subject::Map => write!(f, "map"),
            Subject::Device(name) => write!(f, "device '{name}'"),
            Subject::Bucket(name) => write!(f, "bucket '{name}'"),
            Subject::Type(name) => write!(f, "type '{name}'"),
            Subject::Rule(name) => write!(f, "rule '{name}'"),
            Subject::Pool(name) => write!(f, "pool '{name}'"),
            Subject::Tunable(name) => write!(f, "tunable '{name}'"),
            Subject::ChooseArgs(id) => write!(f, "choose_args {id}"),
            Subject::Membership => write!(f, "membership"),
            Subject::Version(version) => write!(f, "membership version {version}"),
        }
    }
}

/// A map that the builder refuses: what is wrong, with which item, and what to do.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{subject}: {kind}")]
pub struct MapError {
    /// The item the error is about.
    pub subject: Subject,
    /// What is wrong with it.
    pub kind: MapErrorKind,
}

/// The ways a cluster map can be invalid.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum MapErrorKind {
    /// Two items share an id.
    #[error("id {id} is used twice (also by {other}); give each item its own id")]
    DuplicateId {
        /// The id.
        id: i64,
        /// The other item with that id.
        other: String,
    },
    /// Two items share a name.
    #[error(
        "the name is used twice; names of devices, buckets, rules and pools must be unique: rename one of them"
    )]
    DuplicateName,
    /// A reference to an item that does not exist.
    #[error(
        "refers to {what} '{name}', which is not defined in the map; define it or correct the reference"
    )]
    UnknownReference {
        /// What kind of thing was referenced ("device", "bucket", "type", "rule", "class").
        what: &'static str,
        /// The name or id that was referenced.
        name: String,
    },
    /// The bucket hierarchy has a cycle.
    #[error(
        "is its own ancestor (cycle: {path}); a bucket hierarchy must be a tree: remove one of these buckets from its parent"
    )]
    Cycle {
        /// The items on the cycle.
        path: String,
    },
    /// An item appears under more than one parent.
    #[error(
        "is an item of both '{first}' and '{second}'; an item may have only one parent: remove it from one of them"
    )]
    MultipleParents {
        /// The first parent.
        first: String,
        /// The second parent.
        second: String,
    },
    /// A weight that is negative, not a number, or too large.
    #[error("weight {value} is invalid: {reason}")]
    InvalidWeight {
        /// The offending weight as written.
        value: String,
        /// Why it is refused.
        reason: &'static str,
    },
    /// A weight sum that does not fit in 16.16 fixed point.
    #[error(
        "the weights of its items add up to more than 65535.99998 (16.16 fixed point overflows); use smaller weight units, e.g. TiB"
    )]
    WeightOverflow,
    /// An id outside the allowed range.
    #[error("id {id} is out of range: {reason}")]
    IdOutOfRange {
        /// The id.
        id: i64,
        /// The allowed range.
        reason: &'static str,
    },
    /// A value outside the allowed range.
    #[error("{field} = {value} is out of range: {reason}")]
    OutOfRange {
        /// The field.
        field: &'static str,
        /// The value.
        value: String,
        /// The allowed range and why.
        reason: String,
    },
    /// A rule that cannot produce as many devices as a pool needs.
    #[error(
        "needs {needed} devices in distinct failure domains but rule '{rule}' can choose at most {available}: {hint}"
    )]
    RuleCannotSatisfy {
        /// The rule.
        rule: String,
        /// The pool size.
        needed: u32,
        /// How many the rule can produce.
        available: u32,
        /// What to do.
        hint: String,
    },
    /// An erasure-coded pool whose engine cannot place its K + M chunks on distinct failure
    /// domains.
    #[error(
        "is erasure-coded {k}+{m} (K+M = {} chunks, each on its own failure domain) but has \
         only {domains} failure domains ({counted}): add failure domains, choose a lower \
         failure-domain type, or use a profile with K+M at most {domains}",
        u64::from(*k) + u64::from(*m)
    )]
    ErasureCannotPlace {
        /// Data chunks, K.
        k: u32,
        /// Parity chunks, M.
        m: u32,
        /// Failure domains the pool's engine can place on.
        domains: u32,
        /// What was counted: the rule or engine and its failure domains.
        counted: String,
    },
    /// A feature that Optio does not implement.
    #[error("uses {feature}, which Optio does not support: {hint}")]
    Unsupported {
        /// The feature.
        feature: String,
        /// What to do instead.
        hint: &'static str,
    },
    /// A bucket whose items do not fit its algorithm.
    #[error("{0}")]
    BucketShape(&'static str),
    /// The map would exceed a hard limit.
    #[error("exceeds the limit of {limit} {what}")]
    TooMany {
        /// What is limited.
        what: &'static str,
        /// The limit.
        limit: usize,
    },
    /// A map change was computed against an older epoch than the map's.
    #[error(
        "the map changed underneath you: expected epoch {expected}, the map is at epoch {actual}; reload and retry"
    )]
    EpochMismatch {
        /// The epoch the change was made against.
        expected: u64,
        /// The map's epoch.
        actual: u64,
    },
}

impl MapError {
    /// A new error about `subject`.
    pub fn new(subject: Subject, kind: MapErrorKind) -> MapError {
        MapError { subject, kind }
    }
}
