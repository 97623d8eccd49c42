//! The text format of Ceph's `crushtool -d` / `crushtool -c` (a decompiled CRUSH map).
//!
//! [`parse`] reads what `crushtool -c` reads, with crushtool's semantics: missing tunables mean
//! the legacy (argonaut) values, weights are converted exactly as crushtool converts them (see
//! `fixed.rs`: single precision, truncated, so `0.001` is 65/65536), buckets without ids are
//! numbered as crushtool numbers them. It also accepts a little more than crushtool: lines of
//! a bucket or rule in any order, a rule without `min_size`/`max_size`, `type N` and
//! `step noop` (which `crushtool -d` writes), and buckets in any order.
//!
//! [`write`] produces the layout of `crushtool -d`, byte for byte for maps crushtool can hold.
//!
//! Text maps print weights with three decimals: reading a decompiled map back changes every
//! weight that is not a multiple of 0.001 in binary (2.8125 becomes 2.812), and with it some
//! placements. For exact weights, use `crushtool --dump` JSON ([`crate::ceph_json`]).

mod convert;
mod lexer;
mod parser;
mod writer;

pub(crate) use convert::TUNABLE_NAMES;
pub(crate) use writer::{decompile_order, shadow_ids};

use optio_placement::ClusterMap;

use crate::error::ParseError;

/// Parses the text of `crushtool -d`.
pub fn parse(text: &str) -> Result<ClusterMap, ParseError> {
    let document = parser::parse_document(text)?;
    let (builder, lines) = convert::to_builder(document)?;
    builder.build().map_err(|error| lines.locate(error))
}

/// Writes `map` as `crushtool -d` would.
///
/// Ceph's text has no place for Optio's pools, device attributes (capacity, bandwidth, up/in,
/// reweight, addresses) or epoch; they are left out.
///
/// # Errors
///
/// [`WriteError::NotCephCompatible`](crate::WriteError) for a map with buckets of Optio's own
/// algorithms (`linear`), which Ceph cannot read.
pub fn write(map: &ClusterMap) -> Result<String, crate::WriteError> {
    crate::error::check_ceph_compatible(map)?;
    Ok(writer::write(map))
}
